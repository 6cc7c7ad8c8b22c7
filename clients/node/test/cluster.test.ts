// A real 3-master Redis Cluster through ioredis's Cluster client.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Cluster, ClusterOptions } from "ioredis";
import { PathLocks } from "../dist/index.js";
import { Server, closeClients, sleep, startCluster } from "./harness";

describe("a 3-master cluster", () => {
  let nodes: Server[];
  let cluster: (options?: ClusterOptions) => Cluster;

  before(async () => {
    ({ nodes, cluster } = await startCluster());
  });
  after(async () => {
    closeClients();
    for (const node of nodes) {
      await node.stop();
    }
  });

  it("locks projects on every shard, each on the master of its slot, without redirects", async () => {
    const client = cluster();
    // Until the cluster client has its slot map, a command may take one redirect.
    await client.call("PING");
    const admins = nodes.map((n) => n.client());
    for (const admin of admins) {
      await admin.config("RESETSTAT");
    }
    const leases = [];
    for (let i = 0; i < 30; i += 1) {
      const locks = new PathLocks(client, `proj:${i}`, { ttlMs: 600 });
      leases.push(await locks.move("/A/C", "/B"));
    }
    // The watchdogs keep the 600 ms leases for 1.5 s, on whichever node holds each.
    await sleep(1500);
    assert.ok(leases.every((l) => !l.lost));
    // Commands went straight to the right master: no node refused one with -MOVED.
    for (const admin of admins) {
      const stats = String(await admin.info("errorstats"));
      assert.doesNotMatch(stats, /errorstat_MOVED/, stats);
    }
    // Every project's locks live on exactly one node (asking the others answers -MOVED), and every node has some.
    const perNode = await Promise.all(
      admins.map(async (admin) => {
        let held = 0;
        for (let i = 0; i < 30; i += 1) {
          const locks = (await admin.call("PATHLOCK.LOCKS", `proj:${i}`).catch(() => null)) as unknown[] | null;
          held += locks !== null && locks.length > 0 ? 1 : 0;
        }
        return held;
      }),
    );
    assert.equal(perNode.reduce((a, b) => a + b, 0), 30);
    assert.ok(perNode.every((n) => n > 0), `projects per node: ${perNode}`);
    await Promise.all(leases.map((l) => l.release()));
    for (let i = 0; i < 30; i += 1) {
      assert.deepEqual(await new PathLocks(client, `proj:${i}`).locks(), []);
    }
  });

  it("puts the cluster's keyPrefix before the project key, in the slot of the prefixed key", async () => {
    // ioredis takes a Cluster's redisOptions.keyPrefix when it has no keyPrefix of its own.
    for (const options of [{ keyPrefix: "app:" }, { redisOptions: { keyPrefix: "app:" } }]) {
      const client = cluster(options);
      const admin = cluster();
      const locks = new PathLocks(client, "proj:pfx");
      const lease = await locks.upload("/A", { waitMs: 1000 });
      assert.equal(await client.exists("proj:pfx"), 1);
      assert.equal(await admin.exists("app:proj:pfx"), 1);
      assert.equal(await admin.exists("proj:pfx"), 0);
      assert.equal((await locks.locks()).length, 1);
      await lease.release();
      assert.equal(await admin.exists("app:proj:pfx"), 0);
    }
  });
});
