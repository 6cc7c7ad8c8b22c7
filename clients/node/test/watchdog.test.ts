// Holding, refusing, losing and releasing leases on one real server.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { BusyError, type Lease, LeaseLostError, PathLocks } from "../dist/index.js";
import { Server, closeClients, sleep } from "./harness";

/** Slack on top of one renewal period for "reported within one renewal period" on a busy machine. */
const SLACK_MS = 150;

/** Resolves with the time 'lost' fired, on the same clock as `performance.now()`. */
function lostAt(lease: Lease): Promise<number> {
  return new Promise((resolve) => lease.once("lost", () => resolve(performance.now())));
}

describe("one server", () => {
  let server: Server;
  let key = 0;
  const project = (): string => `proj:${++key}`;

  before(async () => {
    server = await Server.start();
  });
  after(async () => {
    closeClients();
    await server.stop();
  });

  it("keeps a 300 ms lease alive for 3 s, then releases it", async () => {
    const locks = new PathLocks(server.client(), project(), { ttlMs: 300 });
    const admin = server.client();
    await admin.config("RESETSTAT");
    const lease = await locks.upload("/A/f.txt");
    await sleep(3000);
    assert.equal(lease.lost, false);
    assert.equal(lease.signal.aborted, false);
    const [held] = await locks.locks();
    assert.equal(held.token, lease.token);
    assert.ok(held.ttlMs > 0 && held.ttlMs <= 300, `ttl left ${held.ttlMs}`);
    const stats = String(await admin.info("commandstats"));
    const renewals = Number(/cmdstat_pathlock\.renew:calls=(\d+)/i.exec(stats)?.[1]);
    // One renewal per ttl/3 = 100 ms: about 30 in 3 s, never a flood.
    assert.ok(renewals >= 20 && renewals <= 33, `renewals in 3 s: ${renewals}`);
    console.log(`# 300 ms lease held 3 s with ${renewals} renewals`);
    await lease.release();
    assert.deepEqual(await locks.locks(), []);
  });

  it("refuses a second owner with the blockers, and grants it after release", async () => {
    const key = project();
    const alice = new PathLocks(server.client(), key);
    const bob = new PathLocks(server.client(), key);
    const move = await alice.move("/A/C", "/B");
    assert.deepEqual(move.locks, [
      { mode: "WRITE", path: "/A/C" },
      { mode: "WRITE", path: "/B/C" },
    ]);
    const refusal = await bob.upload("/A/C/D/new.txt").then(
      () => assert.fail("granted while /A/C is being moved"),
      (error: unknown) => error,
    );
    assert.ok(refusal instanceof BusyError);
    assert.equal(refusal.blockers.length, 1);
    const [blocker] = refusal.blockers;
    assert.equal(blocker.path, "/A/C");
    assert.equal(blocker.mode, "WRITE");
    assert.equal(blocker.token, move.token);
    assert.equal(blocker.fence, move.fence);
    assert.ok(blocker.ttlMs > 29000);
    assert.match(refusal.message, /\/A\/C \(WRITE/);
    // Beside the moved folder, work goes on.
    const beside = await bob.upload("/A/CD/notes.txt");
    assert.equal(beside.fence, move.fence + 1);
    await beside.release();
    await move.release();
    const upload = await bob.upload("/A/C/D/new.txt");
    assert.equal(upload.fence, move.fence + 2);
    assert.equal(upload.lost, false);
    await upload.release();
  });

  it("asks for exactly the locks of each operation", async () => {
    const locks = new PathLocks(server.client(), project());
    const cases: [Promise<Lease>, [string, string][]][] = [
      [locks.create("/D/N"), [["/D/N", "WRITE"]]],
      [locks.read("/R/f"), [["/R/f", "READ"]]],
      [locks.rename("/E/f", "/E/g"), [["/E/f", "WRITE"], ["/E/g", "WRITE"]]],
      [locks.copy("/F/a.txt", "/G/"), [["/F/a.txt", "READ"], ["/G/a.txt", "WRITE"]]],
      [locks.delete("/H"), [["/H", "WRITE"]]],
      [locks.purge(["/bin/1", "/bin/2"]), [["/bin/1", "WRITE"], ["/bin/2", "WRITE"]]],
      [locks.lock([["READ", "/S"], { mode: "WRITE", path: "/S/x" }]), [["/S", "READ"], ["/S/x", "WRITE"]]],
    ];
    for (const [pending, expected] of cases) {
      const lease = await pending;
      const held = (await locks.locks()).filter((l) => l.token === lease.token);
      assert.deepEqual(held.map((l) => [l.path, l.mode]).sort(), expected.slice().sort());
      await lease.release();
    }
    assert.deepEqual(await locks.locks(), []);
    // Requests that cannot be right fail before anything is sent.
    await assert.rejects(locks.lock([]), TypeError);
    await assert.rejects(locks.move("/", "/B"), TypeError);
    await assert.rejects(locks.upload("/A", { ttlMs: 0 }), RangeError);
    await assert.rejects(locks.upload("/A", { replicas: 1, replicasTimeoutMs: 0 }), RangeError);
    // The server's own refusals come through as they are.
    await assert.rejects(locks.upload("/A/../B"), /ERR/);
  });

  it("reports the loss within one renewal period when the token is released elsewhere", async () => {
    const key = project();
    const locks = new PathLocks(server.client(), key, { ttlMs: 600 });
    const lease = await locks.move("/A/C", "/B");
    const lost = lostAt(lease);
    await sleep(250);
    const releasedAt = performance.now();
    assert.equal(await server.client().call("PATHLOCK.RELEASE", key, lease.token), 2);
    const elapsed = (await lost) - releasedAt;
    assert.ok(elapsed <= 200 + SLACK_MS, `lost ${elapsed.toFixed(0)} ms after the release`);
    assert.equal(lease.lost, true);
    assert.ok(lease.signal.aborted);
    assert.ok(lease.signal.reason instanceof LeaseLostError);
    assert.equal(lease.signal.reason.reason, "gone");
    assert.throws(() => lease.throwIfLost(), LeaseLostError);
    // Releasing a lost lease, and releasing twice, are not errors.
    await lease.release();
    await lease.release();
    console.log(`# token released elsewhere: lost after ${elapsed.toFixed(0)} ms (period 200 ms)`);
  });

  it("reports the loss within one renewal period when the key is deleted", async () => {
    const key = project();
    const locks = new PathLocks(server.client(), key, { ttlMs: 600 });
    const lease = await locks.upload("/A");
    const lost = lostAt(lease);
    await sleep(120);
    const deletedAt = performance.now();
    assert.equal(await server.client().del(key), 1);
    const elapsed = (await lost) - deletedAt;
    assert.ok(elapsed <= 200 + SLACK_MS, `lost ${elapsed.toFixed(0)} ms after DEL`);
    assert.equal(lease.signal.reason.reason, "gone");
    await lease.release();
    console.log(`# key deleted: lost after ${elapsed.toFixed(0)} ms (period 200 ms)`);
  });

  it("reports the loss at the deadline when the server is paused past it", async () => {
    const locks = new PathLocks(server.client(), project(), { ttlMs: 600 });
    const lease = await locks.upload("/A");
    await sleep(100);
    const lost = lostAt(lease);
    const pausedAt = performance.now();
    const expectedBy = pausedAt + lease.remainingMs;
    await server.client().call("CLIENT", "PAUSE", 1500, "WRITE");
    const at = await lost;
    // The deadline is the send time of the last renewal that succeeded plus the TTL, so loss
    // comes after at least the part of the lease that had not yet run when the pause began.
    assert.ok(at >= expectedBy - 5, `lost ${(expectedBy - at).toFixed(0)} ms before its deadline`);
    assert.ok(at - expectedBy <= SLACK_MS, `lost ${(at - expectedBy).toFixed(0)} ms after its deadline`);
    assert.equal(lease.signal.reason.reason, "expired");
    await lease.release();
    await sleep(1500 - (performance.now() - pausedAt) + 50);
    console.log(`# paused: lost ${(at - pausedAt).toFixed(0)} ms into the pause, ${(at - expectedBy).toFixed(0)} ms after the deadline`);
  });

  it("keeps the lease through a pause shorter than its deadline and a dropped connection", async () => {
    const client = server.client({ connectionName: "holder" });
    const locks = new PathLocks(client, project(), { ttlMs: 900 });
    const lease = await locks.upload("/A");
    let lost = false;
    lease.on("lost", () => {
      lost = true;
    });
    await sleep(200);
    await server.client().call("CLIENT", "PAUSE", 300, "WRITE");
    await sleep(500);
    const admin = server.client();
    const list = String(await admin.call("CLIENT", "LIST"));
    const id = /id=(\d+) [^\n]*name=holder/.exec(list)?.[1];
    assert.ok(id !== undefined);
    await admin.call("CLIENT", "KILL", "ID", id);
    await sleep(1500);
    assert.equal(lost, false);
    assert.equal(lease.lost, false);
    const [held] = await locks.locks();
    assert.equal(held.token, lease.token);
    await lease.release();
  });

  it("releases at the end of an `await using` scope, also when it throws", async () => {
    const locks = new PathLocks(server.client(), project());
    let token = "";
    {
      await using lease = await locks.move("/A/C", "/B");
      token = lease.token;
      assert.equal((await locks.locks()).length, 2);
    }
    assert.deepEqual(await locks.locks(), []);
    await assert.rejects(async () => {
      await using lease = await locks.delete("/A");
      assert.notEqual(lease.token, token);
      throw new Error("the delete failed");
    }, /the delete failed/);
    assert.deepEqual(await locks.locks(), []);
  });

  it("does not stall renewals while another acquire waits on the server", async () => {
    const key = project();
    const locks = new PathLocks(server.client(), key, { ttlMs: 300 });
    const held = await locks.upload("/A");
    const other = await locks.upload("/B");
    // This waits on the server for /A for 1.5 s on a connection of its own; /B's watchdog
    // keeps renewing meanwhile.
    const waiting = locks.upload("/A/x", { waitMs: 1500 });
    await sleep(1000);
    assert.equal(other.lost, false);
    assert.equal(held.lost, false);
    await held.release();
    const granted = await waiting;
    assert.equal(granted.lost, false);
    await sleep(400);
    assert.equal(granted.lost, false);
    await granted.release();
    await other.release();
    locks.close();
    assert.deepEqual(await locks.locks(), []);
  });
});
