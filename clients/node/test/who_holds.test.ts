// Notes, nesting under a lease, inspection, a waiter sharing the holder's client, and the requests
// refused before or by the server, on one real server.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type Blocker, BusyError, LeaseLostError, PathLocks, WrongTypeError } from "../dist/index.js";
import { Server, closeClients, sleep } from "./harness";

const SLACK_MS = 150;

const notes = (locks: Blocker[]): [string, string, string | null][] => locks.map((b) => [b.mode, b.path, b.note]);

async function until(condition: () => Promise<boolean>, what: string, limitMs = 5000): Promise<void> {
  const started = performance.now();
  while (!(await condition())) {
    assert.ok(performance.now() - started < limitMs, `timed out waiting for ${what}`);
    await sleep(10);
  }
}

describe("who holds what, and why", () => {
  let server: Server;
  let key = 0;
  const project = (): string => `who:${++key}`;

  before(async () => {
    server = await Server.start();
  });
  after(async () => {
    closeClients();
    await server.stop();
  });

  it("notes what each operation does unless told otherwise", async () => {
    const client = server.client();
    const key = project();
    const locks = new PathLocks(client, key);
    const move = await locks.move("/A/C", "/B");
    assert.deepEqual(notes(await locks.locks()), [
      ["WRITE", "/A/C", "move /A/C -> /B"],
      ["WRITE", "/B/C", "move /A/C -> /B"],
    ]);
    await move.release();
    const cases: [() => Promise<{ release(): Promise<void> }>, string][] = [
      [() => locks.upload("/D/f"), "upload /D/f"],
      [() => locks.create("/D/N"), "create /D/N"],
      [() => locks.read("/D/f"), "read /D/f"],
      [() => locks.rename("/D/f", "/D/g"), "rename /D/f -> /D/g"],
      [() => locks.copy("/A/a.txt", "/B"), "copy /A/a.txt -> /B"],
      [() => locks.delete("/A"), "delete /A"],
      [() => locks.purge(["/bin/1", "/bin/2"]), "purge /bin/1 /bin/2"],
      [() => locks.lock([["READ", "/X"], ["WRITE", "/X/y"]]), "lock READ /X, WRITE /X/y"],
      [() => locks.upload("/E/f", { note: "alice: uploading f" }), "alice: uploading f"],
    ];
    for (const [acquire, note] of cases) {
      const lease = await acquire();
      assert.deepEqual([...new Set((await locks.locks()).map((b) => b.note))], [note]);
      await lease.release();
    }
    // The handle's note replaces the operation's; the call's replaces both; "" sends none.
    const worker = new PathLocks(client, key, { note: "worker-7" });
    for (const [options, note] of [
      [{}, "worker-7"],
      [{ note: "Алиса: f" }, "Алиса: f"],
      [{ note: "" }, null],
    ] as const) {
      const lease = await worker.upload("/F/f", options);
      assert.deepEqual(notes(await locks.locks()), [["WRITE", "/F/f", note]]);
      assert.equal(lease.note, options.note ?? "worker-7");
      await lease.release();
    }
    // A default note stays short, however long the path.
    const long = await locks.upload(`/${"é".repeat(300)}`);
    const [held] = await locks.locks();
    assert.ok(held.note?.startsWith("upload /éé") && held.note.endsWith("..."), String(held.note));
    assert.ok(Buffer.byteLength(held.note ?? "") <= 100);
    await long.release();
  });

  it("names the blockers of a busy request with their notes", async () => {
    const key = project();
    const alice = new PathLocks(server.client(), key, { note: "alice" });
    const bob = new PathLocks(server.client(), key);
    const move = await alice.move("/A/C", "/B", { note: "alice: move /A/C into /B" });
    const refusal = await bob.upload("/A/C/D/new.txt").catch((error: unknown) => error);
    assert.ok(refusal instanceof BusyError);
    assert.deepEqual(
      refusal.blockers.map((b) => [b.path, b.token, b.fence, b.note]),
      [["/A/C", move.token, move.fence, "alice: move /A/C into /B"]],
    );
    assert.match(refusal.message, /alice: move \/A\/C into \/B/);
    await move.release();
  });

  it("lists locks (all, under a path, one owner's), checks, and lists waiters", async () => {
    const key = project();
    const locks = new PathLocks(server.client(), key);
    const other = new PathLocks(server.client(), key);
    const move = await locks.move("/A/C", "/B");
    const beside = await other.upload("/A/CD/notes.txt");
    assert.deepEqual(
      (await locks.locks()).map((b) => [b.path, b.token]),
      [
        ["/A/C", move.token],
        ["/A/CD/notes.txt", beside.token],
        ["/B/C", move.token],
      ],
    );
    assert.deepEqual((await locks.locks("/A")).map((b) => b.path), ["/A/C", "/A/CD/notes.txt"]);
    assert.deepEqual((await locks.locks(undefined, { token: move.token })).map((b) => b.path), ["/A/C", "/B/C"]);
    assert.deepEqual((await locks.locks("/B", { token: move.token })).map((b) => b.path), ["/B/C"]);
    assert.deepEqual((await locks.check([["WRITE", "/A"]])).map((b) => b.token), [move.token, beside.token]);
    assert.deepEqual((await locks.check([["WRITE", "/A"]], { token: move.token })).map((b) => b.token), [beside.token]);
    assert.deepEqual(await locks.check([["READ", "/Z"]]), []);
    assert.deepEqual(await locks.waiters(), []);
    const waiting = other.upload("/B/C/x", { waitMs: 5000, note: "bob waits" });
    await until(async () => (await locks.waiters()).length > 0, "the upload to queue");
    const [queued] = await locks.waiters("/B/C");
    assert.deepEqual([queued.locks, queued.note], [[{ mode: "WRITE", path: "/B/C/x" }], "bob waits"]);
    assert.ok(queued.waitedMs >= 0 && queued.leftMs > 0 && queued.leftMs <= 5000);
    assert.deepEqual(await locks.waiters("/A"), []);
    await move.release();
    const granted = await waiting;
    assert.equal(granted.token, queued.token);
    await granted.release();
    await beside.release();
    assert.deepEqual([await locks.locks(), await locks.waiters()], [[], []]);
    other.close();
  });

  it("takes more locks under a lease's own token, renews and releases them with it", async () => {
    const key = project();
    const locks = new PathLocks(server.client(), key, { ttlMs: 300 });
    const bob = new PathLocks(server.client(), key);
    const move = await locks.move("/A/C", "/B");
    await assert.rejects(bob.upload("/B/C/new.txt"), BusyError);
    const fence = await move.lock([["WRITE", "/B/C/new.txt"]]);
    assert.ok(fence > move.fence);
    assert.deepEqual(move.locks, [
      { mode: "WRITE", path: "/A/C" },
      { mode: "WRITE", path: "/B/C" },
      { mode: "WRITE", path: "/B/C/new.txt" },
    ]);
    assert.deepEqual(notes(await locks.locks("/B/C/new.txt")), [["WRITE", "/B/C/new.txt", "move /A/C -> /B"]]);
    // Beside it too; and again: an idempotent re-acquire, with a new fence and note.
    await move.lock([{ mode: "READ", path: "/R" }]);
    const again = await move.lock([["WRITE", "/B/C/new.txt"]], { note: "move: writing new.txt" });
    assert.ok(again > fence);
    assert.equal((await locks.locks(undefined, { token: move.token })).length, 4);
    assert.deepEqual((await locks.locks("/B/C/new.txt")).map((b) => b.note), ["move: writing new.txt"]);
    // Another owner in the way.
    const other = await bob.upload("/S/x");
    const refusal = await move.lock([["WRITE", "/S"]]).catch((error: unknown) => error);
    assert.ok(refusal instanceof BusyError);
    assert.deepEqual(refusal.blockers.map((b) => b.token), [other.token]);
    await other.release();
    // The watchdog keeps every one of them alive well past the TTL.
    await sleep(1200);
    move.throwIfLost();
    const held = await locks.locks(undefined, { token: move.token });
    assert.equal(held.length, 4);
    assert.ok(held.every((b) => b.ttlMs > 0 && b.ttlMs <= 300));
    // Releasing the lease frees everything its token holds.
    await move.release();
    assert.deepEqual(await locks.locks(), []);
    await assert.rejects(move.lock([["WRITE", "/A/C/x"]]), /released/);
    await (await bob.upload("/B/C/new.txt")).release();
  });

  it("waits for a nested lock on a connection of its own", async () => {
    const key = project();
    // The wait outlasts the TTL more than twice: had it held up the move's renewals, the move
    // would be lost by the time the nested lock is granted.
    const locks = new PathLocks(server.client(), key, { ttlMs: 300 });
    const other = await locks.upload("/Q/x");
    const move = await locks.move("/A/C", "/B");
    setTimeout(() => void other.release(), 800);
    const started = performance.now();
    await move.lock([["WRITE", "/Q"]], { waitMs: 5000 });
    const took = performance.now() - started;
    assert.ok(took > 700 && took < 3000, `waited ${took.toFixed(0)} ms`);
    move.throwIfLost();
    assert.deepEqual((await locks.locks(undefined, { token: move.token })).map((b) => b.path), ["/A/C", "/B/C", "/Q"]);
    await move.release();
    locks.close();
  });

  it("refuses more locks on a lost lease, and loses a lease whose own locks go", async () => {
    const key = project();
    const admin = server.client();
    const locks = new PathLocks(server.client(), key, { ttlMs: 600 });
    // The key deleted under the lease: lock() finds out before it would recreate the key.
    let lease = await locks.move("/A/C", "/B");
    await admin.del(key);
    const lost = await lease.lock([["WRITE", "/B/C/x"]]).catch((error: unknown) => error);
    assert.ok(lost instanceof LeaseLostError);
    assert.equal(lost.reason, "gone");
    assert.equal(lease.lost, true);
    assert.equal(await admin.exists(key), 0);
    await lease.release();
    // Locks of the lease released elsewhere while a nested lock still answers the renewals.
    lease = await locks.move("/A/C", "/B");
    await lease.lock([["WRITE", "/B/C/x"]]);
    await sleep(500); // a renewal has counted the lease's three locks
    const lostAt = new Promise<number>((resolve) => lease.once("lost", () => resolve(performance.now())));
    const releasedAt = performance.now();
    assert.equal(await admin.call("PATHLOCK.RELEASE", key, lease.token, "/A/C"), 1);
    const elapsed = (await lostAt) - releasedAt;
    assert.ok(elapsed <= 200 + SLACK_MS, `lost ${elapsed.toFixed(0)} ms after the release`);
    assert.equal(lease.signal.reason.reason, "gone");
    await lease.release();
    assert.deepEqual(await locks.locks(), []);
  });

  it("refuses the empty path and the root unless the whole project is asked for", async () => {
    const locks = new PathLocks(server.client(), project());
    for (const call of [
      () => locks.upload(""),
      () => locks.upload("/"),
      () => locks.create("//"),
      () => locks.read("/./"),
      () => locks.delete("/"),
      () => locks.rename("/A", ""),
      () => locks.move("/", "/B"),
      () => locks.copy("", "/B"),
      () => locks.purge(["/bin/1", ""]),
    ]) {
      await assert.rejects(call(), (error: Error) => error instanceof TypeError && /whole project/.test(error.message));
    }
    await assert.rejects(locks.move("/A/C", ""), /intoFolder/);
    await assert.rejects(locks.lock([["WRITE", ""]]), /empty/);
    assert.deepEqual(await locks.locks(), []);
    const everything = await locks.lock([["WRITE", "/"]]);
    assert.deepEqual(notes(await locks.locks()), [["WRITE", "/", "lock WRITE /"]]);
    await assert.rejects(locks.upload("/A"), BusyError);
    await everything.release();
    const intoRoot = await locks.move("/A/C", "/");
    assert.deepEqual((await locks.locks()).map((b) => b.path), ["/A/C", "/C"]);
    await intoRoot.release();
  });

  it("checks TTLs and waits with their units", async () => {
    assert.throws(() => new PathLocks(server.client(), project(), { ttlMs: 0 }), /ttlMs must be a whole number of milliseconds, at least 1; got 0/);
    const locks = new PathLocks(server.client(), project());
    for (const [options, shown] of [
      [{ ttlMs: 0 }, "ttlMs must be a whole number of milliseconds, at least 1; got 0"],
      [{ ttlMs: 0.5 }, "ttlMs must be a whole number of milliseconds, at least 1; got 0.5"],
      [{ waitMs: -1 }, "waitMs must be a whole number of milliseconds (0: do not wait), at least 0; got -1"],
      [{ replicas: 1, replicasTimeoutMs: 0 }, "replicasTimeoutMs must be a whole number of milliseconds, at least 1; got 0"],
    ] as const) {
      await assert.rejects(locks.upload("/A", options), (error: Error) => error instanceof RangeError && error.message === shown);
    }
    assert.deepEqual(await locks.locks(), []);
  });

  it("names a key of another type and says it is not a project", async () => {
    const admin = server.client();
    await admin.set("cache:1", "hello");
    const locks = new PathLocks(server.client(), "cache:1");
    for (const call of [() => locks.upload("/A"), () => locks.locks(), () => locks.check([["READ", "/A"]]), () => locks.waiters()]) {
      await assert.rejects(call(), (error: Error) => {
        assert.ok(error instanceof WrongTypeError);
        assert.equal(error.key, "cache:1");
        assert.match(error.message, /^key 'cache:1' is not a pathlock project: it holds another type of value/);
        return true;
      });
    }
    // A project overwritten under a lease: the lease is lost, and says why.
    const key = project();
    const lease = await new PathLocks(server.client(), key, { ttlMs: 600 }).upload("/A");
    const lost = new Promise((resolve) => lease.once("lost", resolve));
    await admin.set(key, "not a project any more");
    await lost;
    assert.equal(lease.signal.reason.reason, "replaced");
    assert.throws(() => lease.throwIfLost(), /another type of value/);
    await lease.release();
  });

  it("keeps a holder's lease while a waiter on the same client waits for it", async () => {
    // A move held for 5 s with a 3 s TTL, and an upload into it that waits on the same handle,
    // one ioredis client: the move keeps its lease for its whole run, the upload comes after it.
    const key = project();
    const locks = new PathLocks(server.client(), key, { ttlMs: 3000 });
    const move = await locks.move("/A/C", "/B");
    const started = performance.now();
    let grantedAt = 0;
    const upload = locks.upload("/B/C/new.txt", { waitMs: 10000 }).then((lease) => {
      grantedAt = performance.now();
      return lease;
    });
    await until(async () => (await locks.waiters()).length > 0, "the upload to queue");
    while (performance.now() - started < 5000) {
      assert.equal(move.lost, false, `lost after ${(performance.now() - started).toFixed(0)} ms`);
      await sleep(50);
    }
    move.throwIfLost();
    assert.equal(grantedAt, 0);
    const endedAt = performance.now();
    await move.release();
    const granted = await upload;
    assert.equal(move.lost, false);
    assert.ok(grantedAt >= endedAt);
    await granted.release();
    locks.close();
    console.log(`# move held ${((endedAt - started) / 1000).toFixed(2)} s with a 3 s TTL; upload granted ${(grantedAt - endedAt).toFixed(0)} ms after its release`);
  });
});
