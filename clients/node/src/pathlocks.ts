// The handle: one project key on one ioredis client, its operations, and inspection.
// Level 3: builds on `lease`, `pool`, `operations`, `errors`, `connection` and `types`.
import { randomUUID } from "node:crypto";
import {
  type Arg,
  type Client,
  CONNECTION_CLOSED,
  isClosed,
  isReplyError,
  isWrongType,
  keyPrefix,
  send,
  sendBlocking,
  sleep,
  waitForReplicas,
} from "./connection";
import { BusyError, LeaseLostError, NotReplicatedError, WrongTypeError } from "./errors";
import { Lease, now } from "./lease";
import { defaultNote, described, into, named, normaliseRequests, read, sibling, write } from "./operations";
import { type BlockingPool, blockingPool } from "./pool";
import type {
  AcquireOptions,
  Blocker,
  LockMoreOptions,
  LockRequest,
  LockRequestLike,
  Mode,
  PathLocksOptions,
  Waiter,
} from "./types";

/** The settings of one acquire: the handle's defaults with the call's overrides applied. */
interface Settings {
  ttlMs: number;
  waitMs: number;
  replicas: number;
  replicasTimeoutMs: number;
  note: string | undefined;
}

const DEFAULTS: Settings = {
  ttlMs: 30000,
  waitMs: 0,
  replicas: 0,
  replicasTimeoutMs: 1000,
  note: undefined,
};

/** Each number an acquire takes: its least value and its unit, for the message that refuses it. */
const LIMITS: Record<Exclude<keyof Settings, "note">, [number, string]> = {
  ttlMs: [1, "a number of milliseconds"],
  waitMs: [0, "a number of milliseconds (0: do not wait)"],
  replicas: [0, "a whole number of replicas"],
  // WAIT with a timeout of 0 would block forever.
  replicasTimeoutMs: [1, "a number of milliseconds"],
};

/**
 * Path locks of one project key on one Redis connection (ioredis `Redis`) or cluster (ioredis
 * `Cluster`). Each operation takes the locks of one cloud-drive operation in a single
 * `PATHLOCK.ACQUIRE` and returns a `Lease`, or throws `BusyError`. The helpers refuse an empty
 * path and the project root; `lock([["WRITE", "/"]])` asks for the whole project in so many words.
 */
export class PathLocks implements AsyncDisposable {
  /** The project key as the application gave it, without the client's `keyPrefix`. */
  readonly key: string;
  readonly options: Readonly<PathLocksOptions>;
  private readonly settings: Settings;
  private readonly client: Client;
  private readonly blocking: BlockingPool;
  /** The key on the server: the client's `keyPrefix`, then `key`. */
  private readonly wire: string;

  constructor(client: Client, key: string, options: PathLocksOptions = {}) {
    if (typeof key !== "string" || key === "") {
      throw new TypeError("the project key must be a non-empty string");
    }
    this.client = client;
    this.key = key;
    this.wire = keyPrefix(client) + key;
    this.settings = resolve(DEFAULTS, options);
    this.options = Object.freeze({ ...this.settings });
    this.blocking = blockingPool(client);
  }

  /** Creating or uploading a file or folder: `WRITE path`. */
  async upload(path: string, options?: AcquireOptions): Promise<Lease> {
    return this.operation([write(named(path))], `upload ${path}`, options);
  }

  /** Same as `upload`. */
  async create(path: string, options?: AcquireOptions): Promise<Lease> {
    return this.operation([write(named(path))], `create ${path}`, options);
  }

  /** Reading or downloading: `READ path`. */
  async read(path: string, options?: AcquireOptions): Promise<Lease> {
    return this.operation([read(named(path))], `read ${path}`, options);
  }

  /**
   * Renaming: `WRITE path`, `WRITE <its folder>/newName`: a new name in the same folder (`move`
   * changes folders). A `newName` with a `/`, empty, `.`, `..` or the current name is refused.
   */
  async rename(path: string, newName: string, options?: AcquireOptions): Promise<Lease> {
    const target = sibling(path, newName);
    return this.operation([write(path), write(target)], `rename ${path} -> ${target}`, options);
  }

  /**
   * Moving `path` into `intoFolder`: `WRITE path`, `WRITE intoFolder/<last segment of path>`.
   * Refused when `intoFolder` is `path`, inside it, or the folder `path` is already in.
   */
  async move(path: string, intoFolder: string, options?: AcquireOptions): Promise<Lease> {
    const locks = [write(path), write(into(intoFolder, path, "move"))];
    return this.operation(locks, `move ${path} -> ${intoFolder}`, options);
  }

  /** Copying `path` into `intoFolder`: `READ path`, `WRITE intoFolder/<last segment of path>`, refused as `move` is. */
  async copy(path: string, intoFolder: string, options?: AcquireOptions): Promise<Lease> {
    const locks = [read(path), write(into(intoFolder, path, "copy"))];
    return this.operation(locks, `copy ${path} -> ${intoFolder}`, options);
  }

  /** Deleting a file or folder: `WRITE path`. */
  async delete(path: string, options?: AcquireOptions): Promise<Lease> {
    return this.operation([write(named(path))], `delete ${path}`, options);
  }

  /** Emptying the recycle bin: `WRITE` each path, all or nothing. */
  async purge(paths: readonly string[], options?: AcquireOptions): Promise<Lease> {
    const locks = normaliseRequests(paths.map((p) => write(named(p))));
    return this.operation(locks, `purge ${paths.join(" ")}`, options);
  }

  /** Any `(mode, path)` pairs, all or nothing; `"/"` is the whole project. */
  async lock(requests: readonly LockRequestLike[], options?: AcquireOptions): Promise<Lease> {
    const locks = normaliseRequests(requests);
    return this.operation(locks, described(locks), options);
  }

  /**
   * The live locks that would block `requests` now (`PATHLOCK.CHECK`); empty when they would be
   * granted, waiters aside. With `token`, that owner's own locks do not count.
   */
  async check(requests: readonly LockRequestLike[], options: { token?: string } = {}): Promise<Blocker[]> {
    const words = normaliseRequests(requests).flatMap((r) => [r.mode, r.path]);
    const { token } = options;
    const args: Arg[] = token === undefined ? [this.wire, ...words] : [this.wire, "TOKEN", token, ...words];
    return parseLocks(await this.call("PATHLOCK.CHECK", args));
  }

  /**
   * The live locks at or under `path` (the whole project by default), only `token`'s when it is
   * given (`PATHLOCK.LOCKS`).
   */
  async locks(path?: string, options: { token?: string } = {}): Promise<Blocker[]> {
    const args: Arg[] = [this.wire];
    if (path !== undefined) {
      args.push(path);
    }
    if (options.token !== undefined) {
      args.push("TOKEN", options.token);
    }
    return parseLocks(await this.call("PATHLOCK.LOCKS", args));
  }

  /** The waiting acquires for paths at or under `path`, in queue order (`PATHLOCK.WAITERS`). */
  async waiters(path?: string): Promise<Waiter[]> {
    const args: Arg[] = path === undefined ? [this.wire] : [this.wire, path];
    return parseWaiters(await this.call("PATHLOCK.WAITERS", args));
  }

  /**
   * Closes the extra connections kept for waiting acquires and `replicas` (those in use as their
   * calls end), which every handle on the same client shares. The application's own client stays
   * open; leases already held keep their watchdogs, and a later waiting acquire opens new ones.
   * Closing the application's client closes them too.
   */
  close(): void {
    this.blocking.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    this.close();
    return Promise.resolve();
  }

  private async call(
    command: string,
    args: Arg[],
    connection: Client = this.client,
    signal?: AbortSignal,
  ): Promise<unknown> {
    try {
      return await sendBlocking(connection, this.wire, command, args, signal);
    } catch (error) {
      throw isWrongType(error) ? new WrongTypeError(this.key) : error;
    }
  }

  private async operation(locks: LockRequest[], name: string, overrides: AcquireOptions = {}): Promise<Lease> {
    const settings = resolve(this.settings, overrides);
    const signal = signalOf(overrides);
    if (overrides.note === undefined && this.settings.note === undefined) {
      settings.note = defaultNote(name);
    }
    // The client makes the token, so that a retry after a lost reply is the same owner: the
    // server then refreshes the grant instead of refusing or doubling it.
    const token = randomUUID();
    const granted = await this.take(token, locks, settings, true, signal);
    return new Lease({
      client: this.client,
      key: this.key,
      wire: this.wire,
      token,
      fence: granted.fence,
      locks,
      ttlMs: settings.ttlMs,
      note: settings.note,
      deadline: granted.sentAt + settings.ttlMs,
      sentAt: granted.sentAt,
      lockMore: async (more: LockRequest[], options: LockMoreOptions) =>
        (await this.take(token, more, resolve(settings, options), false, signalOf(options))).fence,
    });
  }

  /**
   * Sends the ACQUIRE (and the replicas' WAIT). A call that blocks on the server holds its
   * connection up, so it runs on one of its own and the renewals of other leases never queue
   * behind it; WAIT counts the writes of its own connection, so it follows the ACQUIRE there.
   *
   * `fresh` is a new owner's first grant, whose token holds nothing else: every way out of this
   * call after the grant but a lease handed out releases it (an abort, too few replicas, the
   * application's client closed meanwhile, a failed renewal), so that no lock is left for
   * nobody. A lease's own further locks (`fresh` false) are never released that way, since that
   * would free the lease too: they stay the lease's, renewed and released with it.
   */
  private async take(
    token: string,
    locks: LockRequest[],
    settings: Settings,
    fresh: boolean,
    signal: AbortSignal | undefined,
  ): Promise<{ fence: number; sentAt: number }> {
    // An aborted signal refuses the call before anything is sent, as Node.js APIs do.
    signal?.throwIfAborted();
    const blocks = settings.waitMs > 0 || settings.replicas > 0;
    const connection = blocks ? await this.blocking.take() : this.client;
    let holds = false;
    try {
      const granted = await this.grant(connection, token, locks, settings, fresh, signal);
      holds = fresh;
      signal?.throwIfAborted();
      if (settings.replicas > 0) {
        const { replicas, replicasTimeoutMs } = settings;
        const acknowledged = await waitForReplicas(connection, this.wire, replicas, replicasTimeoutMs, signal);
        signal?.throwIfAborted();
        if (acknowledged < replicas) {
          throw new NotReplicatedError(this.key, replicas, acknowledged);
        }
      }
      if (connection !== this.client && isClosed(this.client)) {
        // The application closed its client while the call waited on the pool's connection: a
        // lease on that client could neither renew nor release its locks.
        throw new Error(CONNECTION_CLOSED);
      }
      if (fresh && (connection !== this.client || now() - granted.sentAt > settings.ttlMs / 3)) {
        // A grant made on the pool has not been near the application's client, which may be
        // closing (a quit() still on its way does not show in its status): a renewal through it
        // proves it open, or fails, and the grant is released here. A grant that waited on the
        // server cannot tell when in that wait it was made: the renewal dates its deadline.
        granted.sentAt = now();
        const renewed = Number(await this.call("PATHLOCK.RENEW", [this.wire, token, settings.ttlMs]));
        if (renewed <= 0) {
          holds = false;
          throw new LeaseLostError(this.key, token, "gone");
        }
        signal?.throwIfAborted();
      }
      holds = false;
      return granted;
    } catch (error) {
      if (holds) {
        await this.releaseOn(connection, token, settings.ttlMs);
      }
      throw error;
    } finally {
      if (connection !== this.client) {
        this.blocking.give(connection);
      }
    }
  }

  private async grant(
    connection: Client,
    token: string,
    locks: LockRequest[],
    settings: Settings,
    fresh: boolean,
    signal: AbortSignal | undefined,
  ): Promise<{ fence: number; sentAt: number }> {
    const { ttlMs, waitMs, note } = settings;
    const words = locks.flatMap((l) => [l.mode, l.path]);
    const budgetEnd = now() + waitMs;
    let attempt = 0;
    let reply: unknown;
    let sentAt: number;
    for (;;) {
      if (signal?.aborted) {
        if (fresh && attempt > 0) {
          // An earlier attempt failed with its fate unknown, and may have been granted.
          this.releaseLater(token, ttlMs);
        }
        throw signal.reason;
      }
      attempt += 1;
      const waitLeft = Math.max(0, Math.ceil(budgetEnd - now()));
      const args: Arg[] = [this.wire, "TOKEN", token, "TTL", ttlMs];
      if (waitLeft > 0) {
        args.push("WAIT", waitLeft);
      }
      if (note !== undefined) {
        args.push("NOTE", note);
      }
      args.push(...words);
      sentAt = now();
      try {
        // Only a request that waits on the server needs taking off its queue at an abort; one
        // that does not is answered within a round trip, and its grant released below.
        reply = await this.call("PATHLOCK.ACQUIRE", args, connection, waitLeft > 0 ? signal : undefined);
        break;
      } catch (error) {
        if (isReplyError(error) || error instanceof WrongTypeError) {
          throw error;
        }
        if (signal?.aborted) {
          // The abort closed the connection, or it failed on its own: either way the request
          // may have been granted before, and must not be left behind.
          if (fresh) {
            await this.releaseOn(connection, token, ttlMs);
          }
          throw signal.reason;
        }
        // The connection failed with the command's fate unknown: it may have been granted.
        // Retry as the same owner at least once, and for as long as the wait budget lasts.
        if (attempt >= 2 && now() >= budgetEnd) {
          if (fresh) {
            this.releaseLater(token, waitMs + ttlMs);
          }
          throw error;
        }
        await sleep(Math.min(20 * attempt, 200), signal);
      }
    }
    if (reply === null || reply === undefined) {
      if (signal?.aborted) {
        // Taken off the queue by the abort (or its wait ran out meanwhile): not granted.
        if (fresh && attempt > 1) {
          this.releaseLater(token, ttlMs);
        }
        throw signal.reason;
      }
      if (fresh && attempt > 1) {
        // An earlier attempt may have been granted before its reply was lost; a waiter that
        // queued since can make the retry fail. Do not leave that grant behind.
        this.releaseLater(token, ttlMs);
      }
      throw await this.busy(locks, token);
    }
    const [, fence] = reply as [string, number | string];
    return { fence: Number(fence), sentAt };
  }

  /**
   * The `BusyError` of a refused request, with the blockers `PATHLOCK.CHECK` reports now. When
   * the `CHECK` fails, it says so (`checkError`): an empty list would claim that nothing holds
   * them. A key now of another type is a `WrongTypeError`, as for any other call.
   */
  private async busy(locks: LockRequest[], token: string): Promise<Error> {
    try {
      return new BusyError(this.key, locks, await this.check(locks, { token }));
    } catch (error) {
      if (error instanceof WrongTypeError) {
        return error;
      }
      return new BusyError(this.key, locks, [], error instanceof Error ? error : new Error(String(error)));
    }
  }

  /**
   * Releases `token` on `connection`, the one that made its grant, which is open even when the
   * application has closed its own client meanwhile; else through the application's client, now
   * or in the background if the server cannot be reached.
   */
  private async releaseOn(connection: Client, token: string, ttlMs: number): Promise<void> {
    if (connection !== this.client && !isClosed(connection)) {
      try {
        await send(connection, this.wire, "PATHLOCK.RELEASE", [this.wire, token]);
        return;
      } catch {
        // Tried again below, as any release that cannot reach the server.
      }
    }
    try {
      await send(this.client, this.wire, "PATHLOCK.RELEASE", [this.wire, token]);
    } catch {
      this.releaseLater(token, ttlMs);
    }
  }

  /**
   * Releases `token` in the background as soon as the server answers, for a grant that may have
   * happened without the client learning of it. After `lifeMs` there is nothing left to free.
   */
  private releaseLater(token: string, lifeMs: number): void {
    const giveUpAt = now() + lifeMs;
    const attempt = async (): Promise<void> => {
      for (;;) {
        try {
          await send(this.client, this.wire, "PATHLOCK.RELEASE", [this.wire, token]);
          return;
        } catch (error) {
          if (isReplyError(error) || now() >= giveUpAt) {
            return;
          }
          await sleep(Math.min(200, Math.max(10, Math.floor(lifeMs / 3))));
        }
      }
    };
    void attempt();
  }
}

/** The call's `signal`, checked to be an `AbortSignal`. */
function signalOf(options: { signal?: AbortSignal }): AbortSignal | undefined {
  const { signal } = options;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new TypeError(`signal must be an AbortSignal, not ${typeof signal}`);
  }
  return signal;
}

function resolve(base: Settings, overrides: PathLocksOptions): Settings {
  const merged = { ...base };
  for (const name of Object.keys(LIMITS) as (keyof typeof LIMITS)[]) {
    const value = overrides[name];
    if (value === undefined) {
      continue;
    }
    const [least, unit] = LIMITS[name];
    const whole = name === "replicas" ? Number.isInteger(value) : Number.isFinite(value);
    if (typeof value !== "number" || !whole || value < least) {
      throw new RangeError(`${name} must be ${unit}, at least ${least}; got ${value}`);
    }
    // A fraction of a millisecond is rounded up, as in every client: never shorter than asked.
    merged[name] = Math.ceil(value);
  }
  if (overrides.note !== undefined) {
    if (typeof overrides.note !== "string") {
      throw new TypeError(`note must be a string, not ${typeof overrides.note}`);
    }
    merged.note = overrides.note;
  }
  return merged;
}

const noteOf = (value: unknown): string | null => (value === null || value === undefined ? null : String(value));

function parseLocks(reply: unknown): Blocker[] {
  return (reply as unknown[][]).map(([path, mode, token, ttl, fence, note]) => ({
    path: String(path),
    mode: String(mode) as Mode,
    token: String(token),
    ttlMs: Number(ttl),
    fence: Number(fence),
    note: noteOf(note),
  }));
}

function parseWaiters(reply: unknown): Waiter[] {
  return (reply as unknown[][]).map(([token, pairs, waited, left, note]) => {
    const words = (pairs as unknown[]).map(String);
    const locks: LockRequest[] = [];
    for (let i = 0; i + 1 < words.length; i += 2) {
      locks.push({ mode: words[i] as Mode, path: words[i + 1] });
    }
    return { token: String(token), locks, waitedMs: Number(waited), leftMs: Number(left), note: noteOf(note) };
  });
}
