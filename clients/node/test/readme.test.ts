// The README's example, run as written against a real server.
import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import { BusyError, PathLocks } from "../dist/index.js";
import { Server, closeClients } from "./harness";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  closeClients();
  await server.stop();
});

it("runs the README's move example, and its busy branch", async () => {
  const moved: string[] = [];
  const messages: string[] = [];
  const moveFolder = async (from: string, to: string, o: { fence: number; signal: AbortSignal }) => {
    o.signal.throwIfAborted();
    moved.push(`${from} -> ${to} @${o.fence}`);
  };
  const example = async (locks: PathLocks): Promise<void> => {
    try {
      await using lease = await locks.move("/A/C", "/B");
      lease.on("lost", (error) => console.warn(error.message));
      await moveFolder("/A/C", "/B/C", { fence: lease.fence, signal: lease.signal });
    } catch (error) {
      if (!(error instanceof BusyError)) throw error;
      messages.push(`busy: ${error.blockers.map((b) => `${b.path} (${b.mode})`).join(", ")}`);
    }
  };
  const locks = new PathLocks(server.client(), "proj:42", { ttlMs: 30000 });
  await example(locks);
  // One move, with the grant's fence: a safe integer (fences start above every earlier one).
  assert.equal(moved.length, 1);
  const [, fence] = moved[0].split(" @");
  assert.ok(Number.isSafeInteger(Number(fence)) && Number(fence) > 0, moved[0]);
  assert.equal(moved[0], `/A/C -> /B/C @${fence}`);
  assert.deepEqual(await locks.locks(), []);
  const other = await locks.delete("/A");
  await example(locks);
  assert.deepEqual(messages, ["busy: /A (WRITE)"]);
  await other.release();
});
