// The README's example, run as written against a real server.
import assert from "node:assert/strict";
import { it } from "node:test";
import type { Redis } from "ioredis";
import { BusyError, PathLocks } from "../dist/index.js";
import { oneServer } from "./harness";

const server = oneServer();

it("runs the README's example, and its busy branch", async () => {
  const printed: string[] = [];
  const console = { log: (value: unknown) => printed.push(typeof value === "string" ? value : JSON.stringify(value)) };
  const moveFolder = async (from: string, to: string, o: { fence: number; signal: AbortSignal }) => {
    o.signal.throwIfAborted();
    printed.push(`${from} -> ${to} @${o.fence}`);
  };
  // The README's example, from `const locks` on; `client` is its `new Redis()`.
  const example = async (client: Redis): Promise<void> => {
    const locks = new PathLocks(client, "proj:42");
    try {
      await using move = await locks.move("/A/C", "/B", { note: "alice: move /A/C into /B" });
      await move.lock([["WRITE", "/B/C/new.txt"]]);
      await moveFolder("/A/C", "/B/C", { fence: move.fence, signal: move.signal });
      console.log(await locks.locks("/B"));
    } catch (error) {
      if (!(error instanceof BusyError)) throw error;
      for (const b of error.blockers) console.log(`${b.path} is locked (${b.mode}) by ${b.note ?? b.token}`);
      if (error.blockers.length === 0) console.log("the folders were busy a moment ago; try again");
    }
  };
  const client = server().client();
  await example(client);
  assert.match(printed[0], /^\/A\/C -> \/B\/C @\d+$/);
  const listed = JSON.parse(printed[1]) as { path: string; note: string }[];
  assert.deepEqual(
    listed.map((b) => [b.path, b.note]),
    [
      ["/B/C", "alice: move /A/C into /B"],
      ["/B/C/new.txt", "alice: move /A/C into /B"],
    ],
  );
  const locks = new PathLocks(client, "proj:42");
  assert.deepEqual(await locks.locks(), []);
  const bob = await locks.rename("/A/C", "D", { note: "bob: rename /A/C to /A/D" });
  printed.length = 0;
  await example(client);
  assert.deepEqual(printed, ["/A/C is locked (WRITE) by bob: rename /A/C to /A/D"]);
  // Nothing holds /B/C, but a request waiting for /A and /B goes first: the busy branch says to
  // try again instead of naming nobody.
  const waiting = locks.lock([["WRITE", "/A"], ["WRITE", "/B"]], { waitMs: 10000 });
  while ((await locks.waiters()).length === 0) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const onlyB = new PathLocks(client, "proj:42");
  printed.length = 0;
  try {
    await onlyB.upload("/B/C");
  } catch (error) {
    if (!(error instanceof BusyError)) throw error;
    for (const b of error.blockers) console.log(`${b.path} is locked (${b.mode}) by ${b.note ?? b.token}`);
    if (error.blockers.length === 0) console.log("the folders were busy a moment ago; try again");
  }
  assert.deepEqual(printed, ["the folders were busy a moment ago; try again"]);
  await bob.release();
  await (await waiting).release();
  locks.close();
});
