// The plain values of the client: lock requests, the locks and waiters the server lists, options.
// Level 0: imports nothing of the package.

/** A lock's mode: `READ` is shared, `WRITE` is exclusive; both cover the path's subtree. */
export type Mode = "READ" | "WRITE";

/** One `(mode, path)` pair of a request. */
export interface LockRequest {
  mode: Mode;
  path: string;
}

/** A request as an object or as a `[mode, path]` pair. */
export type LockRequestLike = LockRequest | readonly [Mode, string];

/** A live lock as `PATHLOCK.LOCKS` and `PATHLOCK.CHECK` report it: who holds what, and why. */
export interface Blocker {
  /** Normalised path, e.g. `/A/C`; the root is `/`. */
  path: string;
  mode: Mode;
  token: string;
  /** Milliseconds left on the lock's lease when the server answered. */
  ttlMs: number;
  fence: number;
  /** What the holder said it is doing (`"move /A/C -> /B"` by default), or null. */
  note: string | null;
}

/** A request queued by a waiting acquire, as `PATHLOCK.WAITERS` reports it. */
export interface Waiter {
  token: string;
  locks: LockRequest[];
  /** Milliseconds it has waited so far. */
  waitedMs: number;
  /** Milliseconds it will still wait before it times out. */
  leftMs: number;
  note: string | null;
}

/** Defaults of a `PathLocks` handle. */
export interface PathLocksOptions {
  /** Lease length in milliseconds; the watchdog renews every third of it. Default 30000. */
  ttlMs?: number;
  /** How long an acquire waits for busy locks (server-side, first come first served), in milliseconds. Default 0: fail at once. */
  waitMs?: number;
  /** Replicas that must acknowledge a grant (`WAIT`) before it is handed out. Default 0. */
  replicas?: number;
  /** How long to wait for those acknowledgements, in milliseconds. Default 1000. */
  replicasTimeoutMs?: number;
  /**
   * Shown with the locks to whoever they block (`NOTE`). Default: each operation names itself,
   * e.g. `"move /A/C -> /B"`; a handle's note replaces that, a call's replaces both; `""` sends none.
   */
  note?: string;
}

/** Per-call overrides of the handle's defaults, and the call's cancellation. */
export interface AcquireOptions extends PathLocksOptions {
  /**
   * Ends the call when it aborts: an aborted signal refuses it before anything is sent; an abort
   * during a wait takes the request off the server's queue, releases a grant that raced it, and
   * rejects with `signal.reason`.
   */
  signal?: AbortSignal;
}

/** What `lease.lock()` takes: the lease's TTL and replicas are its own. */
export interface LockMoreOptions {
  /** How long to wait for busy locks, in milliseconds. Default: the lease's. */
  waitMs?: number;
  /** The note of these locks. Default: the lease's. */
  note?: string;
  /** Ends the call when it aborts, as `AcquireOptions.signal` does. */
  signal?: AbortSignal;
}
