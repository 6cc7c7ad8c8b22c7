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

  // docs/operations.md's application recipe plus its cluster rules, set on every node (ACL users
  // are per node): CLUSTER SLOTS and CLUSTER INFO for ioredis, PING for the connection of a
  // waiting acquire (CLUSTER NODES and COMMAND are for the other clients). Without PING, a
  // waiting acquire is refused as the docs say.
  const clusterUser = async (name: string, extra: string[]): Promise<Cluster> => {
    for (const node of nodes) {
      const admin = node.client();
      const categories = (await admin.call("ACL", "CAT")) as string[];
      const rules = categories.includes("pathlock")
        ? ["+@pathlock"]
        : ["acquire", "release", "renew", "locks", "check", "waiters"].map((c) => `+pathlock.${c}`);
      await admin.call("ACL", "SETUSER", name, "reset", "on", ">pw", "~proj:*", ...rules, ...extra);
      admin.disconnect();
    }
    // INFO, ioredis's ready check of a node, is refused too: it would log that it skips it.
    return cluster({ redisOptions: { username: name, password: "pw", enableReadyCheck: false } });
  };

  it("runs the documented ACL user of a cluster: acquire, renew, wait and release on every master", async () => {
    const client = await clusterUser("app-cluster", [
      "+cluster|slots",
      "+cluster|nodes",
      "+cluster|info",
      "+command",
      "+ping",
    ]);
    for (let i = 0; i < 4; i += 1) {
      const locks = new PathLocks(client, `proj:acl${i}`, { ttlMs: 300 });
      const holder = await locks.delete("/A");
      setTimeout(() => void holder.release(), 400);
      const waited = await locks.upload("/A/f", { waitMs: 5000 });
      assert.equal(holder.lost, false, "renewed past its TTL");
      await waited.release();
      assert.deepEqual(await locks.locks(), []);
    }
  });

  it("refuses a waiting acquire of the cluster user without PING, and nothing else", async () => {
    const client = await clusterUser("app-cluster-noping", ["+cluster|slots", "+cluster|info"]);
    const locks = new PathLocks(client, "proj:acl-noping");
    const lease = await locks.delete("/A");
    await assert.rejects(locks.upload("/B", { waitMs: 1000 }), /NOPERM.*'ping'/);
    await lease.release();
  });
});
