// The client's own connections and the application's client: a process that quits its client
// exits without locks.close(), and a grant made on the client's connection after the
// application quit its client is released there, not left until its TTL.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import path from "node:path";
import { it } from "node:test";
import { promisify } from "node:util";
import { PathLocks } from "../dist/index.js";
import { oneServer, sleep } from "./harness";

const server = oneServer();

it("lets a process exit once it quits its client, without locks.close()", async () => {
  // What a script writes: a waiting acquire and one with replicas (each on a connection of the
  // client's pool), a release, then quit() of its own client and nothing else.
  const script = `
    const { Redis } = require(${JSON.stringify(require.resolve("ioredis"))});
    const { PathLocks } = require(${JSON.stringify(path.resolve(__dirname, "../dist/index.js"))});
    (async () => {
      const client = new Redis({ port: ${server().port} });
      const locks = new PathLocks(client, "proj:exit");
      const leases = await Promise.all([
        locks.upload("/a", { waitMs: 1000 }),
        locks.upload("/b", { waitMs: 1000 }),
        locks.upload("/c", { replicas: 1, replicasTimeoutMs: 1 }).catch((error) => error.name),
      ]);
      await leases[0].release();
      await leases[1].release();
      await client.quit();
      console.log("quit", leases[2]);
    })();
  `;
  const started = performance.now();
  const { stdout } = await promisify(execFile)(process.execPath, ["-e", script], { timeout: 10000 });
  assert.equal(stdout.trim(), "quit NotReplicatedError");
  assert.ok(performance.now() - started < 5000, "the process did not exit on its own");
});

it("releases a grant made on the pool after the application quit its client", async () => {
  const admin = server().client();
  const holder = await new PathLocks(admin, "proj:quit").upload("/a");
  const client = server().client();
  const locks = new PathLocks(client, "proj:quit");
  const waiting = locks.upload("/a/x", { waitMs: 10000 });
  while ((await locks.waiters()).length === 0) await sleep(5);
  await client.quit();
  await holder.release();
  // The waiter was granted on its own connection; with no client to renew it, the call fails
  // as ioredis fails a command on a closed client, and the grant is gone at once.
  await assert.rejects(waiting, { message: "Connection is closed." });
  assert.deepEqual(await admin.call("PATHLOCK.LOCKS", "proj:quit"), []);
  // A waiting acquire on the closed client is refused before it opens a connection.
  await assert.rejects(locks.upload("/b", { waitMs: 1000 }), { message: "Connection is closed." });
});
