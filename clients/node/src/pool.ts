// The extra connections of the calls that block a connection on the server.
// Level 1: builds on `connection`.
import type { Cluster, Redis } from "ioredis";
import type { Client } from "./connection";

/** Idle connections kept for later blocking acquires; more are closed when they come back. */
const MAX_IDLE = 4;

/**
 * Extra connections for the calls that block a connection on the server: `ACQUIRE ... WAIT` and
 * `WAIT` for replicas. On the application's own connection they would hold up every command
 * queued behind them, among them the renewals of leases already held, which could then be lost.
 * Each blocking call borrows a duplicate of the application's client and gives it back.
 */
export class BlockingPool {
  private readonly idle: Client[] = [];
  private closed = false;

  constructor(private readonly client: Client) {}

  async take(): Promise<Client> {
    const reused = this.idle.pop();
    if (reused !== undefined) {
      return reused;
    }
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

  give(connection: Client): void {
    if (this.closed || this.idle.length >= MAX_IDLE) {
      connection.disconnect();
      return;
    }
    this.idle.push(connection);
  }

  close(): void {
    this.closed = true;
    for (const connection of this.idle.splice(0)) {
      connection.disconnect();
    }
  }
}
