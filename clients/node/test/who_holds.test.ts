// What this client does beyond the shared contract (contract.test.ts): how long a default note
// gets. Which note each operation sends, and everything else about notes, nesting, inspection
// and refusals, are contract scenarios.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { PathLocks } from "../dist/index.js";
import { oneServer } from "./harness";

describe("notes", () => {
  const server = oneServer();


  it("keeps a default note short, however long the path", async () => {
    const locks = new PathLocks(server().client(), "who:1");
    const long = await locks.upload(`/${"é".repeat(300)}`);
    const [held] = await locks.locks();
    assert.ok(held.note?.startsWith("upload /éé") && held.note.endsWith("..."), String(held.note));
    assert.ok(Buffer.byteLength(held.note ?? "") <= 100);
    await long.release();
  });
});
