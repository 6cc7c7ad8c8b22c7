// Cancelling an acquire with an AbortSignal: before it is sent, while it waits on the server,
// racing the grant, during the replicas' WAIT, and a lease's own lock(). Whatever the moment,
// nothing of the call is left queued (PATHLOCK.WAITERS) or held (PATHLOCK.LOCKS) once it rejects.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Redis } from "ioredis";
import { PathLocks } from "../dist/index.js";
import { Proxy, Server, closeClients, sleep } from "./harness";

describe("an AbortSignal", () => {
  let server: Server;
  let admin: Redis;
  let key = 0;
  const project = (): string => `proj:signal:${++key}`;

  before(async () => {
    server = await Server.start();
    admin = server.client();
  });
  after(async () => {
    closeClients();
    await server.stop();
  });

  /** Waits until the key has `n` waiters. */
  const queued = async (locks: PathLocks, n: number): Promise<void> => {
    const started = performance.now();
    while ((await locks.waiters()).length !== n) {
      assert.ok(performance.now() - started < 5000, `never ${n} waiters`);
      await sleep(5);
    }
  };

  /** Nothing queued and nothing held but `holders`' locks, on the server itself. */
  const onlyHeldBy = async (key: string, holders: string[]): Promise<void> => {
    assert.deepEqual(await admin.call("PATHLOCK.WAITERS", key), []);
    const held = (await admin.call("PATHLOCK.LOCKS", key)) as unknown[][];
    assert.deepEqual([...new Set(held.map((l) => String(l[2])))].sort(), [...holders].sort());
  };

  it("refuses at once, without sending anything, when it is already aborted", async () => {
    const key = project();
    const locks = new PathLocks(server.client(), key);
    await admin.config("RESETSTAT");
    const reason = new Error("the user went away");
    await assert.rejects(locks.upload("/a", { signal: AbortSignal.abort(reason) }), (e) => e === reason);
    await assert.rejects(locks.upload("/a", { waitMs: 1000, signal: AbortSignal.abort() }), { name: "AbortError" });
    const stats = String(await admin.info("commandstats"));
    assert.doesNotMatch(stats, /pathlock/i, stats);
    await assert.rejects(locks.upload("/a", { signal: "no" as unknown as AbortSignal }), TypeError);
  });

  it("takes a waiting acquire off the server's queue, and rejects with the signal's reason", async () => {
    const key = project();
    const locks = new PathLocks(server.client(), key);
    const holder = await locks.upload("/a");
    const controller = new AbortController();
    const waiting = locks.upload("/a/x", { waitMs: 30000, signal: controller.signal });
    await queued(locks, 1);
    const abortedAt = performance.now();
    controller.abort();
    await assert.rejects(waiting, (e: Error) => e instanceof DOMException && e.name === "AbortError");
    assert.ok(performance.now() - abortedAt < 1000, "the abort did not end the wait promptly");
    await onlyHeldBy(key, [holder.token]);
    // The holder lets go: nobody is granted the path, so it is free at once.
    await holder.release();
    await sleep(100);
    await onlyHeldBy(key, []);
    const next = await locks.upload("/a/x");
    await next.release();
  });

  it("ends the wait with AbortSignal.timeout as Promise.race could not", async () => {
    const key = project();
    const locks = new PathLocks(server.client(), key);
    const holder = await locks.upload("/a");
    await assert.rejects(locks.upload("/a/x", { waitMs: 30000, signal: AbortSignal.timeout(200) }), {
      name: "TimeoutError",
    });
    await onlyHeldBy(key, [holder.token]);
    await holder.release();
    await sleep(100);
    await onlyHeldBy(key, []);
    // Its connection went back to the pool unblocked: the next waiting acquire on it is granted
    // by a release, not ended by a stray CLIENT UNBLOCK.
    const again = await locks.upload("/a");
    const next = locks.upload("/a/x", { waitMs: 5000, signal: AbortSignal.timeout(5000) });
    await queued(locks, 1);
    await sleep(300);
    await again.release();
    await (await next).release();
  });

  it("releases a grant that raced the abort", async () => {
    // The waiter reaches the server through a proxy that holds its replies back: the server
    // grants it, the grant's reply is still on its way, and then the signal aborts.
    const proxy = await Proxy.start(server.port);
    try {
      for (let round = 0; round < 3; round += 1) {
        const key = project();
        const client = server.client({ port: proxy.port });
        await client.ping();
        const locks = new PathLocks(client, key);
        const holder = await new PathLocks(admin, key).upload("/a");
        const controller = new AbortController();
        const waiting = locks.upload("/a/x", { waitMs: 30000, signal: controller.signal });
        await queued(new PathLocks(admin, key), 1);
        proxy.delayMs = 300;
        await holder.release();
        // The server granted the waiter: its lock is there, its reply held back by the proxy.
        const held = (await admin.call("PATHLOCK.LOCKS", key)) as unknown[][];
        assert.equal(held.length, 1);
        assert.equal(held[0][0], "/a/x");
        await sleep(round * 100);
        controller.abort();
        await assert.rejects(waiting, { name: "AbortError" });
        proxy.delayMs = 0;
        await onlyHeldBy(key, []);
      }
    } finally {
      proxy.close();
    }
  });

  it("ends the replicas' WAIT, and releases the grant it waited for", async () => {
    const key = project();
    const locks = new PathLocks(server.client(), key);
    // No replica ever acknowledges on a lone server: WAIT would block for its whole timeout.
    const controller = new AbortController();
    const waiting = locks.upload("/a", { replicas: 1, replicasTimeoutMs: 30000, signal: controller.signal });
    const started = performance.now();
    while (((await admin.call("PATHLOCK.LOCKS", key)) as unknown[]).length === 0) {
      assert.ok(performance.now() - started < 5000, "never granted");
      await sleep(5);
    }
    await sleep(50);
    const abortedAt = performance.now();
    controller.abort();
    await assert.rejects(waiting, { name: "AbortError" });
    assert.ok(performance.now() - abortedAt < 1000, "the abort did not end the WAIT promptly");
    await onlyHeldBy(key, []);
  });

  it("ends a lease's waiting lock(), whose locks stay the lease's", async () => {
    const key = project();
    const locks = new PathLocks(server.client(), key);
    const other = await locks.upload("/b");
    const lease = await locks.upload("/a");
    const controller = new AbortController();
    const more = lease.lock([["WRITE", "/b/x"]], { waitMs: 30000, signal: controller.signal });
    await queued(locks, 1);
    controller.abort();
    await assert.rejects(more, { name: "AbortError" });
    await onlyHeldBy(key, [other.token, lease.token]);
    assert.equal(lease.lost, false);
    await assert.rejects(lease.lock([["WRITE", "/c"]], { signal: AbortSignal.abort() }), { name: "AbortError" });
    await lease.release();
    await other.release();
    await onlyHeldBy(key, []);
  });
});
