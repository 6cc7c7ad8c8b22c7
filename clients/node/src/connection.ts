// Sending a command about a project key to the node that serves it, and telling errors apart.
// Level 0: imports nothing of the package.
import type { Cluster, Redis } from "ioredis";
import calculateSlot from "cluster-key-slot";

/** What a `PathLocks` handle talks to: one ioredis connection, or an ioredis Cluster. */
export type Client = Redis | Cluster;

export type Arg = string | number;

/**
 * True for an error reply from the server (`-ERR ...`, `-WRONGTYPE ...`). Everything else that
 * ioredis rejects a command with (connection closed, refused, reset, too many retries, no
 * reachable cluster node) means the command's fate is unknown, and is retried where that is safe.
 */
export function isReplyError(error: unknown): boolean {
  return error instanceof Error && error.name === "ReplyError";
}

/** True for the server's answer that the key holds another type of value than a project. */
export function isWrongType(error: unknown): boolean {
  return isReplyError(error) && (error as Error).message.startsWith("WRONGTYPE");
}

function isRedirect(error: unknown): boolean {
  if (!isReplyError(error)) {
    return false;
  }
  const message = (error as Error).message;
  return /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN) /.test(message);
}

/**
 * The connection of the master that serves `key`'s slot, or undefined while the cluster does not
 * know its slots yet.
 *
 * ioredis routes a command by its key only when the command is in its built-in table, which a
 * module's commands are not: it would send `PATHLOCK.*` to a random node and follow the `-MOVED`,
 * a second round trip for most calls. `WAIT` must also run on the very connection that made the
 * grant, because it counts the replication of that connection's own writes.
 */
function masterFor(cluster: Cluster, key: string): Redis | undefined {
  const nodeKeys = cluster.slots[calculateSlot(key)];
  if (!nodeKeys || nodeKeys.length === 0) {
    return undefined;
  }
  return cluster.nodes("master").find((node) => `${node.options.host}:${node.options.port}` === nodeKeys[0]);
}

/** Sends one command about `key` (the command's first argument after its name). */
export async function send(client: Client, key: string, command: string, args: Arg[]): Promise<unknown> {
  if (!client.isCluster) {
    return (client as Redis).call(command, ...args);
  }
  const cluster = client as Cluster;
  const node = masterFor(cluster, key);
  if (node !== undefined) {
    try {
      return await node.call(command, ...args);
    } catch (error) {
      // A slot that moved, or a cluster in the middle of a change: hand the command to the
      // cluster client, which follows redirects, refreshes its slot map and retries.
      if (!isRedirect(error)) {
        throw error;
      }
    }
  }
  return cluster.call(command, ...args);
}

/**
 * The prefix ioredis puts before the keys of the commands it knows (`keyPrefix`), which it cannot
 * put before a module's: the handle puts it before the project key itself, so that the locks live
 * where the application's other keys do. A Cluster takes its `redisOptions.keyPrefix` when it has
 * no `keyPrefix` of its own, as ioredis does.
 */
export function keyPrefix(client: Client): string {
  if (!client.isCluster) {
    return (client as Redis).options.keyPrefix ?? "";
  }
  const options = (client as Cluster).options;
  return options.keyPrefix ?? options.redisOptions?.keyPrefix ?? "";
}

/** ioredis's message for a command on a client that was closed (`quit()`, `disconnect()`). */
export const CONNECTION_CLOSED = "Connection is closed.";

/** True once the application has closed the client (ioredis's status `end`). */
export function isClosed(client: Client): boolean {
  return client.status === "end";
}

/**
 * `WAIT replicas timeoutMs` on the connection that serves `key`, which must be the one the grant
 * was made on. Returns the number of replicas that acknowledged.
 */
export async function waitForReplicas(
  client: Client,
  key: string,
  replicas: number,
  timeoutMs: number,
): Promise<number> {
  let connection: Redis;
  if (client.isCluster) {
    const node = masterFor(client as Cluster, key);
    if (node === undefined) {
      throw new Error(`no known master for ${key} to count replicas on`);
    }
    connection = node;
  } else {
    connection = client as Redis;
  }
  return Number(await connection.call("WAIT", replicas, timeoutMs));
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
