import { randomUUID } from "node:crypto";
import { type Arg, type Client, isReplyError, send, sleep, waitForReplicas } from "./connection";
import { BusyError, LeaseLostError, NotReplicatedError } from "./errors";
import { Lease, now } from "./lease";
import { inside, lastSegment, normaliseRequests, read, write } from "./operations";
import { BlockingPool } from "./pool";
import type { AcquireOptions, Blocker, LockRequest, LockRequestLike, Mode, PathLocksOptions } from "./types";

const DEFAULTS: Required<PathLocksOptions> = {
  ttlMs: 30000,
  waitMs: 0,
  replicas: 0,
  replicasTimeoutMs: 1000,
};

/**
 * Path locks of one project key on one Redis connection (ioredis `Redis`) or cluster (ioredis
 * `Cluster`). Each operation takes the locks of one cloud-drive operation in a single
 * `PATHLOCK.ACQUIRE` and returns a `Lease`, or throws `BusyError`.
 */
export class PathLocks implements AsyncDisposable {
  readonly key: string;
  readonly options: Readonly<Required<PathLocksOptions>>;
  private readonly client: Client;
  private readonly blocking: BlockingPool;

  constructor(client: Client, key: string, options: PathLocksOptions = {}) {
    if (typeof key !== "string" || key === "") {
      throw new TypeError("the project key must be a non-empty string");
    }
    this.client = client;
    this.key = key;
    this.options = Object.freeze(resolve(DEFAULTS, options));
    this.blocking = new BlockingPool(client);
  }

  /** Creating or uploading a file or folder: `WRITE path`. */
  async upload(path: string, options?: AcquireOptions): Promise<Lease> {
    return this.acquire([write(path)], options);
  }

  /** Same as `upload`. */
  async create(path: string, options?: AcquireOptions): Promise<Lease> {
    return this.acquire([write(path)], options);
  }

  /** Reading or downloading: `READ path`. */
  async read(path: string, options?: AcquireOptions): Promise<Lease> {
    return this.acquire([read(path)], options);
  }

  /** Renaming: `WRITE path`, `WRITE newPath`. */
  async rename(path: string, newPath: string, options?: AcquireOptions): Promise<Lease> {
    return this.acquire([write(path), write(newPath)], options);
  }

  /** Moving `path` into `intoFolder`: `WRITE path`, `WRITE intoFolder/<last segment of path>`. */
  async move(path: string, intoFolder: string, options?: AcquireOptions): Promise<Lease> {
    return this.acquire([write(path), write(inside(intoFolder, lastSegment(path)))], options);
  }

  /** Copying `path` into `intoFolder`: `READ path`, `WRITE intoFolder/<last segment of path>`. */
  async copy(path: string, intoFolder: string, options?: AcquireOptions): Promise<Lease> {
    return this.acquire([read(path), write(inside(intoFolder, lastSegment(path)))], options);
  }

  /** Deleting a file or folder: `WRITE path`. */
  async delete(path: string, options?: AcquireOptions): Promise<Lease> {
    return this.acquire([write(path)], options);
  }

  /** Emptying the recycle bin: `WRITE` each path, all or nothing. */
  async purge(paths: readonly string[], options?: AcquireOptions): Promise<Lease> {
    return this.acquire(
      paths.map((p) => write(p)),
      options,
    );
  }

  /** Any `(mode, path)` pairs, all or nothing. */
  async lock(requests: readonly LockRequestLike[], options?: AcquireOptions): Promise<Lease> {
    return this.acquire(requests, options);
  }

  /**
   * The live locks that would block `requests` now (`PATHLOCK.CHECK`); empty when they would be
   * granted, waiters aside. With `token`, that owner's own locks do not count.
   */
  async check(requests: readonly LockRequestLike[], token?: string): Promise<Blocker[]> {
    const words = normaliseRequests(requests).flatMap((r) => [r.mode, r.path]);
    const args: Arg[] = token === undefined ? [this.key, ...words] : [this.key, "TOKEN", token, ...words];
    return parseLocks(await send(this.client, this.key, "PATHLOCK.CHECK", args));
  }

  /** The live locks at or under `path` (the whole project by default), `PATHLOCK.LOCKS`. */
  async locks(path?: string): Promise<Blocker[]> {
    const args: Arg[] = path === undefined ? [this.key] : [this.key, path];
    return parseLocks(await send(this.client, this.key, "PATHLOCK.LOCKS", args));
  }

  /**
   * Closes the extra connections kept for waiting acquires and `replicas`. The application's
   * own client stays open; leases already held keep their watchdogs.
   */
  close(): void {
    this.blocking.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    this.close();
    return Promise.resolve();
  }

  private async acquire(requests: readonly LockRequestLike[], overrides: AcquireOptions = {}): Promise<Lease> {
    const locks = normaliseRequests(requests);
    const options = resolve(this.options, overrides);
    const blocks = options.waitMs > 0 || options.replicas > 0;
    const connection = blocks ? await this.blocking.take() : this.client;
    try {
      const lease = await this.grant(connection, locks, options);
      if (options.replicas > 0) {
        await this.replicate(connection, lease, options);
      }
      return lease;
    } finally {
      if (connection !== this.client) {
        this.blocking.give(connection);
      }
    }
  }

  private async grant(connection: Client, locks: LockRequest[], options: Required<PathLocksOptions>): Promise<Lease> {
    const { ttlMs, waitMs } = options;
    // The client makes the token, so that a retry after a lost reply is the same owner: the
    // server then refreshes the grant instead of refusing or doubling it.
    const token = randomUUID();
    const words = locks.flatMap((l) => [l.mode, l.path]);
    const budgetEnd = now() + waitMs;
    let attempt = 0;
    let reply: unknown;
    let sentAt: number;
    for (;;) {
      attempt += 1;
      const waitLeft = Math.max(0, Math.ceil(budgetEnd - now()));
      const args: Arg[] = [this.key, "TOKEN", token, "TTL", ttlMs];
      if (waitLeft > 0) {
        args.push("WAIT", waitLeft);
      }
      args.push(...words);
      sentAt = now();
      try {
        reply = await send(connection, this.key, "PATHLOCK.ACQUIRE", args);
        break;
      } catch (error) {
        if (isReplyError(error)) {
          throw error;
        }
        // The connection failed with the command's fate unknown: it may have been granted.
        // Retry as the same owner at least once, and for as long as the wait budget lasts.
        if (attempt >= 2 && now() >= budgetEnd) {
          this.releaseLater(token, ttlMs);
          throw error;
        }
        await sleep(Math.min(20 * attempt, 200));
      }
    }
    if (reply === null || reply === undefined) {
      if (attempt > 1) {
        // An earlier attempt may have been granted before its reply was lost; a waiter that
        // queued since can make the retry fail. Do not leave that grant behind.
        this.releaseLater(token, ttlMs);
      }
      throw new BusyError(this.key, locks, await this.check(locks, token));
    }
    const [grantedToken, fence] = reply as [string, number | string];
    let deadline = sentAt + ttlMs;
    if (deadline - now() < ttlMs / 3) {
      // The grant waited long on the server: the client cannot tell when in that wait it was
      // made, so it proves the lease alive with a renewal before handing it out.
      sentAt = now();
      const renewed = Number(await send(this.client, this.key, "PATHLOCK.RENEW", [this.key, token, ttlMs]));
      if (renewed <= 0) {
        throw new LeaseLostError(this.key, token, "expired");
      }
      deadline = sentAt + ttlMs;
    }
    return new Lease({
      client: this.client,
      key: this.key,
      token: String(grantedToken),
      fence: Number(fence),
      locks,
      ttlMs,
      deadline,
      sentAt,
    });
  }

  private async replicate(connection: Client, lease: Lease, options: Required<PathLocksOptions>): Promise<void> {
    let acknowledged: number;
    try {
      acknowledged = await waitForReplicas(connection, this.key, options.replicas, options.replicasTimeoutMs);
    } catch (error) {
      await lease.release().catch(() => this.releaseLater(lease.token, lease.ttlMs));
      throw error;
    }
    if (acknowledged < options.replicas) {
      await lease.release().catch(() => this.releaseLater(lease.token, lease.ttlMs));
      throw new NotReplicatedError(this.key, options.replicas, acknowledged);
    }
  }

  /**
   * Releases `token` in the background as soon as the server answers, for a grant that may have
   * happened without the client learning of it. After the lease's TTL there is nothing left to free.
   */
  private releaseLater(token: string, ttlMs: number): void {
    const giveUpAt = now() + ttlMs;
    const attempt = async (): Promise<void> => {
      for (;;) {
        try {
          await send(this.client, this.key, "PATHLOCK.RELEASE", [this.key, token]);
          return;
        } catch (error) {
          if (isReplyError(error) || now() >= giveUpAt) {
            return;
          }
          await sleep(Math.min(200, Math.max(10, Math.floor(ttlMs / 3))));
        }
      }
    };
    void attempt();
  }
}

function resolve(base: Required<PathLocksOptions>, overrides: PathLocksOptions): Required<PathLocksOptions> {
  const merged = { ...base };
  for (const name of Object.keys(DEFAULTS) as (keyof PathLocksOptions)[]) {
    const value = overrides[name];
    if (value === undefined) {
      continue;
    }
    // A TTL of 0 is refused by the server, and WAIT with a timeout of 0 would block forever.
    const least = name === "ttlMs" || name === "replicasTimeoutMs" ? 1 : 0;
    if (!Number.isInteger(value) || value < least) {
      throw new RangeError(`${name} must be an integer of at least ${least}, not ${value}`);
    }
    merged[name] = value;
  }
  return merged;
}

function parseLocks(reply: unknown): Blocker[] {
  return (reply as unknown[][]).map(([path, mode, token, ttl, fence]) => ({
    path: String(path),
    mode: String(mode) as Mode,
    token: String(token),
    ttlMs: Number(ttl),
    fence: Number(fence),
  }));
}
