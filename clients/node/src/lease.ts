// A held lease: its watchdog, its loss signals, and the locks it takes under its own token.
// Level 2: builds on `operations`, `errors`, `connection` and `types`.
import { EventEmitter } from "node:events";
import { performance } from "node:perf_hooks";
import { type Client, isWrongType, send } from "./connection";
import { LeaseLostError, type LostReason } from "./errors";
import { normaliseRequests } from "./operations";
import type { LockMoreOptions, LockRequest, LockRequestLike } from "./types";

/** The client's own monotonic clock, in milliseconds. The server's clock is never consulted. */
export const now = (): number => performance.now();

/** Everything a lease needs to know about its grant. Made by `PathLocks`, not by applications. */
export interface Grant {
  client: Client;
  /** The project key as the application gave it. */
  key: string;
  /** The key on the server: the client's `keyPrefix`, then `key`. */
  wire: string;
  token: string;
  fence: number;
  locks: LockRequest[];
  ttlMs: number;
  note: string | undefined;
  /** When the lease's locks certainly still live until, on `now()`'s clock. */
  deadline: number;
  /** When the command that set that deadline was sent. */
  sentAt: number;
  /** Acquires more locks under the lease's token and answers the grant's fence. */
  lockMore: (locks: LockRequest[], options: LockMoreOptions) => Promise<number>;
}

export interface Lease {
  /** Emitted once, at the moment the lease is found lost; never after `release()`. */
  on(event: "lost", listener: (error: LeaseLostError) => void): this;
  once(event: "lost", listener: (error: LeaseLostError) => void): this;
  off(event: "lost", listener: (error: LeaseLostError) => void): this;
}

/**
 * Locks held by one owner (`token`) in one project key, kept alive by a watchdog until released.
 *
 * The watchdog sends `PATHLOCK.RENEW key token ttlMs` every `ttlMs / 3`. The lease is lost when a
 * renewal answers 0, or when no renewal has succeeded before the deadline the client last knew:
 * the time it sent the last successful renewal (or the acquire) plus `ttlMs`. A loss shows at
 * once in `lost`, as the `'lost'` event, and as `signal` aborting with a `LeaseLostError`.
 * `lock(requests)` takes more locks under the same token, which the watchdog renews and
 * `release()` frees.
 */
export class Lease extends EventEmitter implements AsyncDisposable {
  /** The project key. */
  readonly key: string;
  /** The owner's token, a UUID v4 made by the client. */
  readonly token: string;
  /** The fence of the grant: pass it with every write to the storage the locks protect. */
  readonly fence: number;
  /** The lease length the watchdog renews to. */
  readonly ttlMs: number;
  /** The note sent with the grant, shown with the locks to whoever they block. */
  readonly note: string | undefined;

  private readonly client: Client;
  private readonly wire: string;
  private readonly lockMore: Grant["lockMore"];
  private held: readonly LockRequest[];
  /**
   * The most locks a renewal has found: the watchdog's renewals are one at a time, so the count
   * they see only falls when locks of the lease are gone (released by someone with the token, or
   * expired), even while `lock()` grants more.
   */
  private most = 0;
  private readonly period: number;
  private readonly controller = new AbortController();
  private deadline: number;
  private lastSent: number;
  private isLost = false;
  private isReleased = false;
  /** Set once the watchdog must do nothing more: the lease was released or lost. */
  private stopped = false;
  private renewTimer: NodeJS.Timeout | undefined;
  private lossTimer: NodeJS.Timeout | undefined;
  private inflight: Promise<void> | undefined;
  private releasing: Promise<void> | undefined;

  /** @internal Leases come from the operations of `PathLocks`. */
  constructor(grant: Grant) {
    super();
    this.client = grant.client;
    this.key = grant.key;
    this.wire = grant.wire;
    this.token = grant.token;
    this.fence = grant.fence;
    this.held = Object.freeze(grant.locks.map((l) => Object.freeze({ ...l })));
    this.ttlMs = grant.ttlMs;
    this.note = grant.note;
    this.lockMore = grant.lockMore;
    this.period = Math.max(1, Math.floor(grant.ttlMs / 3));
    this.deadline = grant.deadline;
    this.lastSent = grant.sentAt;
    this.armLossTimer();
    this.scheduleRenewal(this.lastSent + this.period);
  }

  /** Every lock the lease holds: the operation's, then those `lock()` added. */
  get locks(): readonly LockRequest[] {
    return this.held;
  }

  /** True once the lease is known lost. Stays false after a plain release. */
  get lost(): boolean {
    return this.isLost;
  }

  /** True once `release()` was called. */
  get released(): boolean {
    return this.isReleased;
  }

  /**
   * Aborts when the lease ends: with a `LeaseLostError` as its reason when it is lost, with an
   * `AbortError` once it is released, so that nothing waits on it for ever. Pass it to work under
   * the lease.
   */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Milliseconds for which the locks are certainly still held by the client's clock (0 once lost or released). */
  get remainingMs(): number {
    if (this.stopped) {
      return 0;
    }
    return Math.max(0, this.deadline - now());
  }

  /** Throws the `LeaseLostError` if the lease is lost. */
  throwIfLost(): void {
    if (this.isLost) {
      throw this.controller.signal.reason;
    }
  }

  /**
   * Takes more locks under this lease's token, inside or beside what it holds, and resolves to
   * the fence of that grant. They have the lease's TTL and replicas, are renewed by its watchdog
   * and freed by its release; `note` defaults to the lease's. Locking what the lease already
   * holds is an idempotent re-acquire (a new fence; `note` replaces theirs). Rejects with
   * `BusyError` when another owner is in the way, `LeaseLostError` once the lease is lost, and
   * `options.signal.reason` when that signal aborts; locks granted in the same instant as the
   * abort stay the lease's, and go with its release.
   */
  async lock(requests: readonly LockRequestLike[], options: LockMoreOptions = {}): Promise<number> {
    const locks = normaliseRequests(requests);
    options.signal?.throwIfAborted();
    await this.proveHeld();
    const fence = await this.lockMore(locks, options);
    if (this.stopped) {
      // The lease ended while the grant was on its way: nobody renews those locks now.
      await this.sendRelease().catch(() => undefined);
      this.throwIfUnusable();
    }
    const added = locks.filter(
      (l, i) =>
        locks.findIndex((m) => m.mode === l.mode && m.path === l.path) === i &&
        !this.held.some((h) => h.mode === l.mode && h.path === l.path),
    );
    this.held = Object.freeze([...this.held, ...added.map((l) => Object.freeze({ ...l }))]);
    return fence;
  }

  /**
   * Renews the lease before it takes more locks: once its own locks are gone (its key deleted,
   * its token released elsewhere), an ACQUIRE under its token would make new ones that keep
   * answering its renewals, and the loss would go unseen.
   */
  private async proveHeld(): Promise<void> {
    this.throwIfUnusable();
    const sentAt = now();
    try {
      const renewed = Number(await send(this.client, this.wire, "PATHLOCK.RENEW", [this.wire, this.token, this.ttlMs]));
      if (renewed <= 0) {
        this.markLost("gone");
      } else if (!this.stopped) {
        this.deadline = Math.max(this.deadline, sentAt + this.ttlMs);
        this.armLossTimer();
      }
    } catch (error) {
      if (!isWrongType(error)) {
        throw error;
      }
      this.markLost("replaced");
    }
    this.throwIfUnusable();
  }

  private throwIfUnusable(): void {
    this.throwIfLost();
    if (this.isReleased) {
      throw new Error(`lease ${this.token} is released: it can take no more locks`);
    }
  }

  /**
   * Stops the watchdog, then frees the locks with `PATHLOCK.RELEASE key token`. Calling it again,
   * or on a lost lease, is not an error. A renewal still in flight is allowed to finish first
   * and its answer is ignored, so it can neither outlive the release nor report a loss.
   */
  release(): Promise<void> {
    if (this.releasing === undefined) {
      this.releasing = this.doRelease();
    }
    return this.releasing;
  }

  /** `await using lease = await locks.move(...)` releases the lease when the scope ends. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }

  private async doRelease(): Promise<void> {
    const wasLost = this.isLost;
    this.isReleased = true;
    this.stop();
    if (!wasLost) {
      // Whatever waits on the signal for a loss ends with the lease: it aborts, with a reason
      // that is not a LeaseLostError (the lease is not lost: `lost` stays false).
      this.controller.abort(new DOMException(`lease ${this.token} was released`, "AbortError"));
    }
    if (wasLost) {
      // The server may still hold locks the client gave up on by its own clock; free them when
      // the server can be reached, without making the caller wait for a server that may be down.
      this.sendRelease().catch(() => undefined);
      return;
    }
    if (this.inflight !== undefined) {
      await this.inflight;
    }
    await this.sendRelease().catch((error: unknown) => {
      // A key overwritten by another value took the locks with it: nothing left to free.
      if (!isWrongType(error)) {
        throw error;
      }
    });
  }

  private sendRelease(): Promise<unknown> {
    return send(this.client, this.wire, "PATHLOCK.RELEASE", [this.wire, this.token]);
  }

  private stop(): void {
    this.stopped = true;
    clearTimeout(this.renewTimer);
    clearTimeout(this.lossTimer);
  }

  private armLossTimer(): void {
    clearTimeout(this.lossTimer);
    this.lossTimer = setTimeout(() => this.markLost("expired"), Math.max(0, this.deadline - now()));
    this.lossTimer.unref();
  }

  private scheduleRenewal(at: number): void {
    clearTimeout(this.renewTimer);
    this.renewTimer = setTimeout(() => this.renew(), Math.max(0, at - now()));
    this.renewTimer.unref();
  }

  private renew(): void {
    // One renewal at a time: a renewal stuck behind a dead connection is not helped by more
    // queued behind it, and the loss timer does not depend on it answering.
    if (this.stopped || this.inflight !== undefined) {
      return;
    }
    const sentAt = now();
    this.lastSent = sentAt;
    this.inflight = send(this.client, this.wire, "PATHLOCK.RENEW", [this.wire, this.token, this.ttlMs])
      .then(
        (renewed) => this.onRenewed(sentAt, Number(renewed)),
        (error: unknown) => this.onRenewFailed(error),
      )
      .finally(() => {
        this.inflight = undefined;
      });
  }

  private onRenewed(sentAt: number, renewed: number): void {
    if (this.stopped) {
      // Released (or already lost) while the renewal was in flight: its answer means nothing now.
      return;
    }
    if (renewed <= 0 || renewed < this.most) {
      this.markLost("gone");
      return;
    }
    this.most = renewed;
    // The server set the deadline at some moment after sentAt; sentAt + ttl is the earliest it
    // can be, so the client never believes in a lease longer than the server keeps it.
    this.deadline = Math.max(this.deadline, sentAt + this.ttlMs);
    this.armLossTimer();
    this.scheduleRenewal(sentAt + this.period);
  }

  private onRenewFailed(error: unknown): void {
    if (this.stopped) {
      return;
    }
    if (isWrongType(error)) {
      this.markLost("replaced");
      return;
    }
    // A connection error (or a cluster that is reconfiguring): try again soon. The lease stays
    // held while its deadline is ahead; the loss timer reports it when the deadline passes.
    this.scheduleRenewal(now() + Math.max(1, Math.floor(this.period / 3)));
  }

  private markLost(reason: LostReason): void {
    if (this.stopped) {
      return;
    }
    this.stop();
    this.isLost = true;
    const error = new LeaseLostError(this.key, this.token, reason);
    this.controller.abort(error);
    this.emit("lost", error);
  }
}
