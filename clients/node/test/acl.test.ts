// The application user of docs/operations.md's ACL recipe (the lock commands on proj:* keys,
// nothing else; named one by one, as Redis 7.0 needs) uses every feature of the client but
// `replicas`, which needs WAIT: an abort, refused CLIENT ID and CLIENT UNBLOCK, closes the
// waiting connection instead, which takes the request off the server's queue; without WAIT an
// acquire with replicas rejects with the server's NOPERM and holds nothing.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Redis } from "ioredis";
import { PathLocks } from "../dist/index.js";
import { Server, closeClients, sleep } from "./harness";

describe("the documented ACL recipe user", () => {
  let server: Server;
  let admin: Redis;

  before(async () => {
    server = await Server.start();
    admin = server.client();
    const categories = (await admin.call("ACL", "CAT")) as string[];
    const rules = categories.includes("pathlock")
      ? ["+@pathlock"]
      : ["acquire", "release", "renew", "locks", "check", "waiters"].map((c) => `+pathlock.${c}`);
    await admin.call("ACL", "SETUSER", "app", "reset", "on", ">pw", "~proj:*", ...rules);
  });
  after(async () => {
    closeClients();
    await server.stop();
  });

  const waiters = async (key: string): Promise<unknown[]> => (await admin.call("PATHLOCK.WAITERS", key)) as unknown[];

  it("locks, waits, gives up a wait, and is refused replicas without holding anything", async () => {
    const key = "proj:acl";
    // The ready check's INFO is refused too: ioredis would log that it skips it.
    const locks = new PathLocks(server.client({ username: "app", password: "pw", enableReadyCheck: false }), key);
    const holder = await locks.delete("/A", { ttlMs: 300 });
    await sleep(500);
    assert.equal(holder.lost, false, "renewed past its TTL");
    setTimeout(() => void holder.release(), 300);
    const waited = await locks.upload("/A/f", { waitMs: 5000 });

    const controller = new AbortController();
    const waiting = locks.upload("/A/f", { waitMs: 30000, signal: controller.signal });
    while ((await waiters(key)).length !== 1) {
      await sleep(5);
    }
    controller.abort();
    await assert.rejects(waiting, { name: "AbortError" });
    assert.deepEqual(await waiters(key), []);

    await assert.rejects(locks.upload("/B", { replicas: 1, replicasTimeoutMs: 100 }), /NOPERM/);
    const held = (await admin.call("PATHLOCK.LOCKS", key)) as unknown[][];
    assert.deepEqual(
      held.map((l) => String(l[0])),
      ["/A/f"],
    );
    await waited.release();
  });
});
