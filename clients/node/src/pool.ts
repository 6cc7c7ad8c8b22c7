// The extra connections of the calls that block a connection on the server.
// Level 1: builds on `connection`.
import type { Cluster, Redis } from "ioredis";
import { CONNECTION_CLOSED, type Client, isClosed } from "./connection";

/** Idle connections kept for later blocking acquires; more are closed when they come back. */
const MAX_IDLE = 4;

/** One pool for each application client, shared by every handle made on it. */
const pools = new WeakMap<Client, BlockingPool>();

/** The blocking pool of `client`, made on first use. */
export function blockingPool(client: Client): BlockingPool {
  let pool = pools.get(client);
  if (pool === undefined) {
    pool = new BlockingPool(client);
    pools.set(client, pool);
  }
  return pool;
}

/**
 * Extra connections for the calls that block a connection on the server: `ACQUIRE ... WAIT` and
 * `WAIT` for replicas. On the application's own connection they would hold up every command
 * queued behind them, among them the renewals of leases already held, which could then be lost.
 * Each blocking call borrows a duplicate of the application's client and gives it back. There is
 * no bound on the connections in use: each waiting call has its own, as long as it waits.
 *
 * The pool ends its idle connections when the application closes its client (ioredis's `end`
 * event), since their sockets would otherwise keep the Node.js process alive after the
 * application has let go of everything it opened; connections in use are closed as they come
 * back. A later blocking call on a client the application has connected again opens new ones.
 * An idle connection that loses its link is closed rather than left reconnecting: its retry
 * timers would keep the process alive too, and a later call can open a new one.
 */
export class BlockingPool {
  private readonly idle: Client[] = [];
  private readonly busy = new Set<Client>();
  /** Connections in use when `close()` was called: closed, not kept, when they come back. */
  private readonly retired = new WeakSet<Client>();
  /** What closes each idle connection when its link drops, removed when it is taken. */
  private readonly onDrop = new Map<Client, () => void>();

  constructor(private readonly client: Client) {
    client.on("end", () => this.close());
  }

  async take(): Promise<Client> {
    // A closed client refuses every command the same way; so does the handle's blocking call,
    // rather than open a connection the application no longer knows about.
    if (isClosed(this.client)) {
      throw new Error(CONNECTION_CLOSED);
    }
    const reused = this.idle.pop();
    if (reused !== undefined) {
      this.unwatch(reused);
    }
    const connection = reused ?? (await this.open());
    this.busy.add(connection);
    return connection;
  }

  give(connection: Client): void {
    this.busy.delete(connection);
    // Only a connection that is ready is kept: one that an abort closed, or that is reconnecting,
    // would make the next call wait for it or fail.
    if (
      this.retired.has(connection) ||
      connection.status !== "ready" ||
      isClosed(this.client) ||
      this.idle.length >= MAX_IDLE
    ) {
      connection.disconnect();
      return;
    }
    const drop = (): void => {
      this.unwatch(connection);
      const at = this.idle.indexOf(connection);
      if (at >= 0) {
        this.idle.splice(at, 1);
      }
      connection.disconnect();
    };
    this.onDrop.set(connection, drop);
    connection.once("close", drop);
    this.idle.push(connection);
  }

  /** Closes the idle connections now, and those in use when they come back. */
  close(): void {
    for (const connection of this.busy) {
      this.retired.add(connection);
    }
    for (const connection of this.idle.splice(0)) {
      this.unwatch(connection);
      connection.disconnect();
    }
  }

  private unwatch(connection: Client): void {
    const drop = this.onDrop.get(connection);
    if (drop !== undefined) {
      connection.off("close", drop);
      this.onDrop.delete(connection);
    }
  }

  private async open(): Promise<Client> {
    if (!this.client.isCluster) {
      return (this.client as Redis).duplicate();
    }
    const cluster = (this.client as Cluster).duplicate();
    // A keyless command resolves once the cluster client is ready, that is once it knows which
    // node serves which slot, so that the acquire and its WAIT go to the key's master.
    try {
      await cluster.call("PING");
    } catch (error) {
      cluster.disconnect();
      throw error;
    }
    return cluster;
  }
}
