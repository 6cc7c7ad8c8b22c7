// What a newcomer writes from the README alone: one client shared by the whole application, a
// waiting upload into a folder being moved, more locks under the move, who holds what, an empty
// path and a wrong TTL.
import assert from "node:assert/strict";
import { it } from "node:test";
import { BusyError, PathLocks, WrongTypeError } from "../dist/index.js";
import { oneServer, sleep } from "./harness";

const server = oneServer();

it("works the way the README says", async () => {
  const client = server().client(); // one client for the whole application
  const locks = new PathLocks(client, "proj:newcomer", { ttlMs: 3000 });
  const said: string[] = [];

  const move = await locks.move("/A/C", "/B", { note: "alice: move /A/C into /B" });
  await move.lock([["WRITE", "/B/C/new.txt"]]);
  // Bob is willing to wait up to 10 s for the move to finish.
  const bob = locks.upload("/B/C/bob.txt", { waitMs: 10000, note: "bob: upload" });
  let bobGranted = false;
  void bob.then(() => (bobGranted = true));
  while ((await locks.waiters()).length === 0) await sleep(10);
  for (const waiter of await locks.waiters()) {
    said.push(`${waiter.note} waits for ${waiter.locks.map((l) => `${l.mode} ${l.path}`).join(", ")}`);
  }
  for (const lock of await locks.locks(undefined, { token: move.token })) {
    said.push(`${lock.path}: ${lock.note}`);
  }
  try {
    await locks.upload("/B/C/new.txt");
  } catch (error) {
    if (!(error instanceof BusyError)) throw error;
    said.push(`busy: ${error.blockers[0].note}`);
  }
  await sleep(4000); // longer than the TTL: the move is still held, bob still waits
  move.throwIfLost();
  assert.equal(bobGranted, false);
  await move.release();
  const upload = await bob;
  assert.ok(upload.fence > move.fence);
  await upload.release();
  assert.deepEqual(said, [
    "bob: upload waits for WRITE /B/C/bob.txt",
    "/A/C: alice: move /A/C into /B",
    "/B/C: alice: move /A/C into /B",
    "/B/C/new.txt: alice: move /A/C into /B",
    "busy: alice: move /A/C into /B",
  ]);
  assert.deepEqual(await locks.locks(), []);

  // Mistakes a newcomer makes are told what to do instead.
  await assert.rejects(locks.upload(""), /lock\(\[\["WRITE", "\/"\]\]\)/);
  // Half a millisecond? The TTL counts whole milliseconds.
  await assert.rejects(locks.upload("/A", { ttlMs: 0.5 }), /milliseconds, at least 1; got 0.5/);
  // A whole path as the new name, as 0.1 took it, is refused: rename takes a name.
  await assert.rejects(locks.rename("/A/C", "/A/C2"), /rename takes a name/);
  await client.set("settings", "{}");
  await assert.rejects(new PathLocks(client, "settings").upload("/A"), (error: Error) => {
    return error instanceof WrongTypeError && /"settings" is not a pathlock project/.test(error.message);
  });
  locks.close();
});
