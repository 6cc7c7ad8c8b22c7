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

/** The connection a command about `key` runs on: the client itself, or the master of its slot. */
function nodeFor(client: Client, key: string): Redis | undefined {
  return client.isCluster ? masterFor(client as Cluster, key) : (client as Redis);
}

/** ioredis's message for a command on a client that was closed (`quit()`, `disconnect()`). */
export const CONNECTION_CLOSED = "Connection is closed.";

/** True once the application has closed the client (ioredis's status `end`). */
export function isClosed(client: Client): boolean {
  return client.status === "end";
}

/**
 * Sends a command that may block its connection on the server (`ACQUIRE ... WAIT`), so that an
 * abort of `signal` takes it off the server's queue (see `interruptible`).
 */
export async function sendBlocking(
  client: Client,
  key: string,
  command: string,
  args: Arg[],
  signal: AbortSignal | undefined,
): Promise<unknown> {
  const node = nodeFor(client, key);
  if (signal === undefined || node === undefined) {
    return send(client, key, command, args);
  }
  return interruptible(client, node, () => send(client, key, command, args), signal);
}

/**
 * `WAIT replicas timeoutMs` on the connection that serves `key`, which must be the one the grant
 * was made on. Returns the number of replicas that acknowledged; an abort of `signal` ends it early.
 */
export async function waitForReplicas(
  client: Client,
  key: string,
  replicas: number,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<number> {
  const node = nodeFor(client, key);
  if (node === undefined) {
    throw new Error(`no known master for ${key} to count replicas on`);
  }
  const run = (): Promise<unknown> => node.call("WAIT", replicas, timeoutMs);
  return Number(await (signal === undefined ? run() : interruptible(client, node, run, signal)));
}

/**
 * How long an aborted call waits for its reply after `CLIENT UNBLOCK` found it not blocked (its
 * reply already on its way), before it closes the connection instead.
 */
const UNBLOCK_GRACE_MS = 200;

/**
 * Runs `run` (one command sent on `node`, a connection of the blocking pool) so that aborting
 * `signal` ends its wait on the server: ioredis cannot take back a command it has sent, and a
 * request left waiting would be granted later to nobody. The connection's `CLIENT ID` is asked
 * for just before the command, on the same connection; on an abort, `CLIENT UNBLOCK <id>` goes
 * on a connection of its own, and the command answers as if its wait had run out (nil for an
 * acquire, the count so far for `WAIT`). A grant that was made before the unblock arrived
 * answers as a grant, which the caller releases.
 *
 * When the unblock finds nothing blocked and no reply comes soon after (a reconnect changed the
 * connection's id, or the command had not reached the server yet), the connection is closed,
 * which takes a waiter off the queue as surely; the command then rejects with a connection
 * error, and the caller releases the token since a grant may have happened. The call settles
 * only once the unblock has landed, so that it cannot end the wait of the connection's next
 * user in the pool.
 */
async function interruptible(
  connection: Client,
  node: Redis,
  run: () => Promise<unknown>,
  signal: AbortSignal,
): Promise<unknown> {
  const id = node.call("CLIENT", "ID");
  const reply = run();
  id.catch(() => undefined);
  let answered = false;
  const settled = reply.then(
    () => {
      answered = true;
    },
    () => {
      answered = true;
    },
  );
  let unblocking: Promise<void> | undefined;
  const onAbort = (): void => {
    if (!answered && unblocking === undefined) {
      unblocking = unblock(connection, node, id, settled);
    }
  };
  signal.addEventListener("abort", onAbort, { once: true });
  if (signal.aborted) {
    onAbort();
  }
  try {
    return await reply;
  } finally {
    signal.removeEventListener("abort", onAbort);
    await unblocking;
  }
}

async function unblock(connection: Client, node: Redis, id: Promise<unknown>, settled: Promise<void>): Promise<void> {
  let unblocked = false;
  let asked = false;
  try {
    // The waiting connection cannot carry the unblock, and the application's client may be
    // closed or in another state: a short-lived duplicate of the node reaches the same server.
    const other = node.duplicate({ retryStrategy: () => null, maxRetriesPerRequest: 0 });
    other.on("error", () => undefined);
    try {
      unblocked = Number(await other.call("CLIENT", "UNBLOCK", String(await id))) === 1;
      asked = true;
    } finally {
      other.disconnect();
    }
  } catch {
    // The server could not be asked, or refused (an ACL user without CLIENT ID or CLIENT
    // UNBLOCK, as docs/operations.md's recipe is): closing the connection below does what the
    // unblock would.
  }
  if (unblocked) {
    return;
  }
  // The grace is for an unblock that found the command no longer blocked, its reply on its way;
  // when nothing was found out, waiting for a reply would only delay the close.
  const replied =
    asked && (await Promise.race([settled.then(() => true), sleep(UNBLOCK_GRACE_MS).then(() => false)]));
  if (!replied) {
    connection.disconnect();
  }
}

/** Waits `ms`, or less if `signal` aborts first (the caller then looks at the signal). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms).unref();
    signal?.addEventListener("abort", done, { once: true });
    if (signal?.aborted) {
      done();
    }
  });
}
