// The shared contract (clients/contract/): every scenario, against real servers. The steps are
// defined in clients/contract/README.md; this runner follows the Python one's shape.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { after, describe, it } from "node:test";
import type { Cluster, Redis } from "ioredis";
import {
  BusyError,
  type Lease,
  LeaseLostError,
  NotReplicatedError,
  PathLocks,
  type PathLocksOptions,
  WrongTypeError,
} from "../dist/index.js";
import { Server, closeClients, sleep, startCluster, startReplicated } from "./harness";

type Json = any; // eslint-disable-line @typescript-eslint/no-explicit-any
type Step = Record<string, Json>;

const CONTRACT = path.resolve(__dirname, "../../contract");
const SETTINGS = JSON.parse(readFileSync(path.join(CONTRACT, "contract.json"), "utf8"));
const SLACK_MS: number = SETTINGS.slack_ms;
const TASK_TIMEOUT_MS: number = SETTINGS.task_timeout_ms;
const SCENARIOS: Json[] = readdirSync(path.join(CONTRACT, "scenarios"))
  .filter((file) => file.endsWith(".json"))
  .sort()
  .flatMap((file) => JSON.parse(readFileSync(path.join(CONTRACT, "scenarios", file), "utf8")).scenarios);
const ME = "node";

// The servers of each topology, shared by the scenarios and started again after one stops them.
class Topology {
  stopped = false;
  private constructor(
    readonly name: string,
    readonly masters: Server[],
    readonly replica: Server | undefined,
    readonly newClient: () => Redis | Cluster,
    readonly admin: Redis | Cluster,
  ) {}

  static async start(name: string): Promise<Topology> {
    if (name === "cluster") {
      const { nodes, cluster } = await startCluster();
      return new Topology(name, nodes, undefined, cluster, cluster());
    }
    if (name === "replica") {
      const { master, replica } = await startReplicated();
      return new Topology(name, [master], replica, () => master.client(), master.client());
    }
    const server = await Server.start();
    return new Topology(name, [server], undefined, () => server.client(), server.client());
  }

  on(where: string | undefined): Redis | Cluster {
    if (where === "replica") {
      assert.ok(this.replica, "this topology has no replica");
      return this.replica.client();
    }
    return this.admin;
  }

  async flush(): Promise<void> {
    for (const server of this.masters) {
      const client = server.client();
      await client.flushall();
      await client.call("CONFIG", "RESETSTAT");
      client.disconnect();
    }
  }

  async stop(which: string): Promise<void> {
    this.stopped = true;
    await (which === "replica" ? (this.replica as Server) : this.masters[0]).stop();
  }

  async close(): Promise<void> {
    for (const server of [...this.masters, ...(this.replica ? [this.replica] : [])]) {
      await server.stop();
    }
  }
}

const live = new Map<string, Topology>();

async function topology(name: string): Promise<Topology> {
  const known = live.get(name);
  if (known?.stopped) {
    live.delete(name);
    await known.close();
  }
  if (!live.has(name)) {
    live.set(name, await Topology.start(name));
  }
  const ready = live.get(name) as Topology;
  await ready.flush();
  return ready;
}

/** Whether `message` is `pattern`, each `{n}` in it standing for one or more digits. */
function matches(pattern: string, message: string): boolean {
  const pieces = pattern.split("{n}");
  if (!message.startsWith(pieces[0])) {
    return false;
  }
  let at = pieces[0].length;
  for (const piece of pieces.slice(1)) {
    let digits = at;
    while (digits < message.length && message[digits] >= "0" && message[digits] <= "9") {
      digits += 1;
    }
    if (digits === at || !message.startsWith(piece, digits)) {
      return false;
    }
    at = digits + piece.length;
  }
  return at === message.length;
}

const pairs = (locks: readonly { mode: string; path: string }[]): string[][] => locks.map((l) => [l.mode, l.path]);

function entryMatches(want: Json, got: Json): boolean {
  return Object.entries(want).every(([field, value]) => {
    switch (field) {
      case "ttl_ms_at_most":
        return got.ttlMs > 0 && got.ttlMs <= (value as number);
      case "fence":
        return got.fence === Number(value);
      case "locks":
        return JSON.stringify(pairs(got.locks)) === JSON.stringify(value);
      default:
        return got[field] === value;
    }
  });
}

function options(given: Json = {}): PathLocksOptions {
  const names: Record<string, string> = {
    ttl_ms: "ttlMs",
    wait_ms: "waitMs",
    replicas: "replicas",
    replicas_timeout_ms: "replicasTimeoutMs",
    note: "note",
  };
  // "NaN" and "Infinity", which JSON lacks, as numbers.
  return Object.fromEntries(
    Object.entries(given).map(([k, v]) => [names[k], k !== "note" && typeof v === "string" ? Number(v) : v]),
  );
}

/** The lease's wait for a loss: true once it is lost, false once the signal aborts for a release. */
function lossWait(lease: Lease): Promise<boolean> {
  if (lease.signal.aborted) {
    return Promise.resolve(lease.lost);
  }
  return new Promise((resolve) => lease.signal.addEventListener("abort", () => resolve(lease.lost), { once: true }));
}

const lostReason = (lease: Lease): string | undefined =>
  lease.lost ? (lease.signal.reason as LeaseLostError).reason : undefined;

interface Outcome {
  value?: unknown;
  error?: unknown;
}

interface Task {
  promise: Promise<Outcome>;
  done: boolean;
  as: string | Lease | undefined;
}

class Run {
  readonly key: string;
  readonly handles = new Map<string, PathLocks>();
  readonly leases = new Map<string, Lease>();
  readonly tasks = new Map<string, Task>();
  readonly marks = new Map<string, number>();
  readonly client: Redis | Cluster;

  constructor(
    scenario: Json,
    readonly topology: Topology,
  ) {
    this.key = scenario.key ?? "proj:contract";
    this.client = topology.newClient();
  }

  sub(value: Json): Json {
    if (Array.isArray(value)) {
      return value.map((v) => this.sub(v));
    }
    if (value !== null && typeof value === "object") {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, this.sub(v)]));
    }
    if (typeof value !== "string") {
      return value;
    }
    let text = value.split("{key}").join(this.key);
    for (const [name, lease] of this.leases) {
      text = text.split(`{token:${name}}`).join(lease.token).split(`{fence:${name}}`).join(String(lease.fence));
    }
    assert.ok(!text.includes("{token:") && !text.includes("{fence:"), `unknown lease in ${text}`);
    return text;
  }

  async outcome(call: () => Promise<unknown>): Promise<Outcome> {
    try {
      return { value: await call() };
    } catch (error) {
      return { error };
    }
  }

  check({ value, error }: Outcome, given: Json, as: string | Lease | undefined): void {
    const expect = this.sub(given ?? {});
    if (expect.error === undefined) {
      assert.equal(error, undefined, `expected success, got ${String(error)}`);
      if (typeof as === "string") {
        this.leases.set(as, value as Lease);
      }
      if ("lost" in expect || "released" in expect) {
        assert.equal(value, Boolean(expect.lost), `the loss wait answered ${String(value)}`);
        assert.equal(lostReason(as as Lease), expect.lost);
        return;
      }
      const lease = value as Lease;
      const fence = typeof value === "number" ? value : lease.fence;
      if ("fence_above" in expect) {
        assert.ok(fence > (this.leases.get(expect.fence_above) as Lease).fence, "fence not above");
      }
      if ("locks" in expect) {
        assert.deepEqual(pairs(lease.locks), expect.locks);
      }
      if ("ttl_ms" in expect) {
        assert.equal(lease.ttlMs, expect.ttl_ms);
      }
      if ("note" in expect) {
        assert.equal(lease.note || null, expect.note);
      }
      return;
    }
    const kinds: Record<string, (e: unknown) => boolean> = {
      invalid: (e) => e instanceof TypeError || e instanceof RangeError,
      busy: (e) => e instanceof BusyError,
      lost: (e) => e instanceof LeaseLostError,
      not_replicated: (e) => e instanceof NotReplicatedError,
      wrong_type: (e) => e instanceof WrongTypeError,
    };
    assert.ok(kinds[expect.error](error), `expected ${expect.error}, got ${String(error)} / ${String(value)}`);
    const message = (error as Error).message;
    for (const piece of expect.contains ?? []) {
      assert.ok(message.includes(piece), `${JSON.stringify(piece)} not in ${JSON.stringify(message)}`);
    }
    if ("message" in expect) {
      assert.ok(matches(expect.message, message), `message ${JSON.stringify(message)}`);
    }
    if ("blockers" in expect) {
      const got = (error as BusyError).blockers;
      assert.equal(got.length, expect.blockers.length, `blockers ${JSON.stringify(got)}`);
      expect.blockers.forEach((want: Json, i: number) =>
        assert.ok(entryMatches(want, got[i]), `${JSON.stringify(got[i])} is not ${JSON.stringify(want)}`),
      );
    }
    if ("reason" in expect) {
      assert.equal((error as LeaseLostError).reason, expect.reason);
    }
  }

  async runOrSpawn(s: Step, call: () => Promise<unknown>, as: string | undefined): Promise<void> {
    if (s.task !== undefined) {
      const task: Task = { done: false, as, promise: this.outcome(call) };
      void task.promise.then(() => {
        task.done = true;
      });
      this.tasks.set(s.task, task);
    } else {
      this.check(await this.outcome(call), s.expect, as);
    }
  }

  // The steps, one method each, named as in the contract.
  readonly steps: Record<string, (s: Step) => Promise<void>> = {
    handle: async (s) => {
      this.handles.set(s.name, new PathLocks(this.client, this.sub(s.key ?? this.key), options(this.sub(s.options))));
    },
    acquire: async (s) => {
      const handle = this.handles.get(s.handle) as PathLocks;
      const args = this.sub(s.args);
      const opts = options(this.sub(s.options));
      const call = (): Promise<Lease> => {
        switch (s.op) {
          case "purge":
          case "lock":
            return handle[s.op as "purge"](args, opts);
          default:
            return (handle[s.op as "move"] as (...a: unknown[]) => Promise<Lease>)(...args, opts);
        }
      };
      await this.runOrSpawn(s, call, s.as);
    },
    lock: async (s) => {
      const lease = this.leases.get(s.lease) as Lease;
      const requests = this.sub(s.requests);
      await this.runOrSpawn(s, () => lease.lock(requests, options(this.sub(s.options))), undefined);
    },
    await: async (s) => {
      const task = this.tasks.get(s.task) as Task;
      const outcome = await Promise.race([task.promise, sleep(TASK_TIMEOUT_MS).then(() => undefined)]);
      assert.ok(outcome, `task ${s.task} did not finish`);
      this.check(outcome, s.expect, task.as);
    },
    pending: async (s) => {
      assert.ok(!(this.tasks.get(s.task) as Task).done, `task ${s.task} has finished`);
    },
    release: async (s) => {
      try {
        await (this.leases.get(s.lease) as Lease).release();
      } catch (error) {
        if (!s.may_fail) {
          throw error;
        }
      }
    },
    sleep: async (s) => sleep(s.ms),
    mark: async (s) => {
      this.marks.set(s.name, performance.now());
    },
    held: async (s) => {
      const lease = this.leases.get(s.lease) as Lease;
      assert.ok(!lease.lost, `lost: ${lostReason(lease)}`);
      lease.throwIfLost();
      if ("locks" in s) {
        assert.deepEqual(pairs(lease.locks), this.sub(s.locks));
      }
    },
    lost: async (s) => {
      const lease = this.leases.get(s.lease) as Lease;
      const since = s.since === undefined ? performance.now() : (this.marks.get(s.since) as number);
      const limit = s.within_ms === undefined ? TASK_TIMEOUT_MS : s.within_ms + SLACK_MS;
      const left = Math.max(0, since + limit - performance.now());
      const lost = await Promise.race([lossWait(lease), sleep(left).then(() => false)]);
      const took = performance.now() - since;
      assert.ok(lost, `not reported lost within ${limit} ms`);
      assert.ok(took <= limit + 50, `reported lost after ${took.toFixed(0)} ms, limit ${limit} ms`);
      if (s.at_least_ms !== undefined) {
        assert.ok(took >= s.at_least_ms, `reported lost after only ${took.toFixed(0)} ms`);
      }
      assert.equal(lostReason(lease), s.reason);
      let error: unknown;
      try {
        lease.throwIfLost();
      } catch (raised) {
        error = raised;
      }
      const expect: Json = { error: "lost", reason: s.reason };
      if (s.message !== undefined) {
        expect.message = s.message;
      }
      this.check({ error }, expect, undefined);
    },
    loss_wait: async (s) => {
      const lease = this.leases.get(s.lease) as Lease;
      const task: Task = { done: false, as: lease, promise: lossWait(lease).then((value) => ({ value })) };
      void task.promise.then(() => {
        task.done = true;
      });
      this.tasks.set(s.task, task);
    },
    redis: async (s) => {
      const [command, ...args] = this.sub(s.command) as string[];
      const reply = await this.topology.on(s.on).call(command, ...args);
      if ("reply" in s) {
        assert.deepEqual(reply, this.sub(s.reply), `${s.command} answered ${JSON.stringify(reply)}`);
      }
    },
    stop: async (s) => this.topology.stop(s.server),
    server_locks: async (s) => {
      const reply = (await this.topology.on(s.on).call("PATHLOCK.LOCKS", this.sub(s.key ?? this.key))) as string[][];
      const got = reply.map(([p, mode, token]) => [mode, p, token].join(" ")).sort();
      const want = (this.sub(s.locks) as string[][]).map((l) => l.join(" ")).sort();
      assert.deepEqual(got, want);
    },
    inspect: async (s) => {
      const handle = this.handles.get(s.handle) as PathLocks;
      const token = this.sub(s.token);
      const where = this.sub(s.path);
      const call = (): Promise<unknown[]> =>
        s.call === "locks"
          ? handle.locks(where, { token })
          : s.call === "check"
            ? handle.check(this.sub(s.requests), { token })
            : handle.waiters(where);
      const expect = this.sub(s.expect);
      if (!Array.isArray(expect)) {
        this.check(await this.outcome(call), expect, undefined);
        return;
      }
      const got = await call();
      assert.equal(got.length, expect.length, `${s.call} answered ${JSON.stringify(got)}`);
      expect.forEach((want: Json, i: number) =>
        assert.ok(entryMatches(want, got[i]), `${JSON.stringify(got[i])} is not ${JSON.stringify(want)}`),
      );
    },
    waiting: async (s) => {
      const started = performance.now();
      for (;;) {
        const waiters = (await this.topology.on("master").call("PATHLOCK.WAITERS", this.key)) as unknown[];
        if (waiters.length >= s.count) {
          return;
        }
        assert.ok(performance.now() - started < TASK_TIMEOUT_MS, `timed out waiting for ${s.count} waiters`);
        await sleep(10);
      }
    },
    calls: async (s) => {
      const admin = this.topology.masters[0].client();
      const info = String(await admin.info("commandstats"));
      admin.disconnect();
      const line = info
        .split("\n")
        .find((l) => l.toLowerCase().startsWith(`cmdstat_${String(s.command).toLowerCase()}:`));
      const calls = line === undefined ? 0 : Number(/calls=(\d+)/.exec(line)?.[1]);
      assert.equal(calls, s.count, `${calls} calls of ${s.command}`);
    },
  };

  async cleanUp(): Promise<void> {
    const leases = [...this.leases.values()];
    for (const task of this.tasks.values()) {
      const outcome = await Promise.race([task.promise, sleep(TASK_TIMEOUT_MS).then(() => ({}) as Outcome)]);
      const value = outcome.value as Lease | undefined;
      if (value !== null && typeof value === "object" && "release" in value) {
        leases.push(value);
      }
    }
    for (const lease of leases) {
      await lease.release().catch(() => undefined);
    }
    for (const handle of this.handles.values()) {
      handle.close();
    }
    this.client.disconnect();
  }
}

describe("the shared contract", () => {
  after(async () => {
    for (const topology of live.values()) {
      await topology.close();
    }
    closeClients();
  });

  for (const scenario of SCENARIOS) {
    const skip = scenario.except?.[ME];
    it(scenario.name, { skip, timeout: 120000 }, async () => {
      const run = new Run(scenario, await topology(scenario.topology));
      try {
        for (const [number, step] of (scenario.steps as Step[]).entries()) {
          if (step.except?.[ME] !== undefined) {
            continue;
          }
          try {
            await run.steps[step.do](step);
          } catch (error) {
            throw new Error(`step ${number + 1} ${JSON.stringify(step)}: ${(error as Error).message}`, { cause: error });
          }
        }
      } finally {
        await run.cleanUp();
      }
    });
  }
});
