// `replicas`: a grant is handed out only once a real replica acknowledged it.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { NotReplicatedError, PathLocks } from "../dist/index.js";
import { Server, closeClients, startReplicated } from "./harness";

describe("a master with a replica", () => {
  let master: Server;
  let replica: Server;

  before(async () => {
    ({ master, replica } = await startReplicated());
  });
  after(async () => {
    closeClients();
    await replica.stop();
    await master.stop();
  });

  it("hands out a grant that the replica holds", async () => {
    const locks = new PathLocks(master.client(), "proj:r1", { replicas: 1 });
    const lease = await locks.move("/A/C", "/B");
    // WAIT 1 answered: the replica has the grant, with the same token and fence.
    const onReplica = (await replica.client().call("PATHLOCK.LOCKS", "proj:r1")) as unknown[][];
    assert.deepEqual(
      onReplica.map(([path, mode, token, , fence]) => [path, mode, token, Number(fence)]),
      [
        ["/A/C", "WRITE", lease.token, lease.fence],
        ["/B/C", "WRITE", lease.token, lease.fence],
      ],
    );
    await lease.release();
    // A waiting acquire with replicas also works (both block; neither holds up the watchdog).
    const waited = await locks.upload("/A/C/x", { waitMs: 200 });
    await waited.release();
    locks.close();
  });

  it("raises NotReplicatedError and releases when the replica is gone", async () => {
    await replica.stop();
    const client = master.client();
    const locks = new PathLocks(client, "proj:r2", { replicas: 1, replicasTimeoutMs: 200 });
    const started = performance.now();
    const error = await locks.upload("/A").then(
      () => assert.fail("granted without a replica"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof NotReplicatedError, String(error));
    assert.equal(error.replicas, 1);
    assert.equal(error.acknowledged, 0);
    assert.ok(performance.now() - started >= 190);
    // Released: the path is free for the next owner, who does not ask for replicas.
    assert.deepEqual(await client.call("PATHLOCK.LOCKS", "proj:r2"), []);
    const lease = await locks.upload("/A", { replicas: 0 });
    await lease.release();
    locks.close();
  });
});
