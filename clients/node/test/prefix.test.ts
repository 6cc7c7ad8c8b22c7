// ioredis's keyPrefix: the project key lives where the application's other keys do.
import assert from "node:assert/strict";
import { it } from "node:test";
import { PathLocks } from "../dist/index.js";
import { oneServer, sleep } from "./harness";

const server = oneServer();

it("puts the client's keyPrefix before the project key", async () => {
  const client = server().client({ keyPrefix: "app:" });
  const admin = server().client();
  const locks = new PathLocks(client, "proj:pfx", { ttlMs: 600 });
  assert.equal(locks.key, "proj:pfx");
  const lease = await locks.move("/A/C", "/B");
  // The application's own commands on the same client see the key, unprefixed as they write it.
  assert.equal(await client.exists("proj:pfx"), 1);
  assert.equal(await admin.exists("app:proj:pfx"), 1);
  assert.equal(await admin.exists("proj:pfx"), 0);
  assert.equal(lease.key, "proj:pfx");
  // A waiting acquire (on a duplicate of the client) and its inspection find the same locks.
  const waiting = locks.upload("/A/C/x", { waitMs: 5000 });
  while ((await locks.waiters()).length === 0) await sleep(5);
  assert.deepEqual(
    (await locks.locks()).map((l) => l.path),
    ["/A/C", "/B/C"],
  );
  await sleep(700); // past the TTL: the watchdog renews the prefixed key
  assert.equal(lease.lost, false);
  await lease.release();
  const upload = await waiting;
  const held = (await admin.call("PATHLOCK.LOCKS", "app:proj:pfx")) as unknown[][];
  assert.deepEqual(
    held.map((l) => [l[0], l[2]]),
    [["/A/C/x", upload.token]],
  );
  await upload.release();
  assert.equal(await admin.exists("app:proj:pfx"), 0);
});
