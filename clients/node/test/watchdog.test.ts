// Holding leases beyond the shared contract (contract.test.ts): a short pause and a dropped
// connection, and `await using` scopes.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { PathLocks } from "../dist/index.js";
import { oneServer, sleep } from "./harness";

describe("one server", () => {
  const server = oneServer();
  let key = 0;
  const project = (): string => `proj:${++key}`;


  it("keeps the lease through a pause shorter than its deadline and a dropped connection", async () => {
    const client = server().client({ connectionName: "holder" });
    const locks = new PathLocks(client, project(), { ttlMs: 900 });
    const lease = await locks.upload("/A");
    let lost = false;
    lease.on("lost", () => {
      lost = true;
    });
    await sleep(200);
    await server().client().call("CLIENT", "PAUSE", 300, "WRITE");
    await sleep(500);
    const admin = server().client();
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
    const locks = new PathLocks(server().client(), project());
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
});
