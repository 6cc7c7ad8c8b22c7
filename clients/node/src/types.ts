/** A lock's mode: `READ` is shared, `WRITE` is exclusive; both cover the path's subtree. */
export type Mode = "READ" | "WRITE";

/** One `(mode, path)` pair of a request. */
export interface LockRequest {
  mode: Mode;
  path: string;
}

/** A request as an object or as a `[mode, path]` pair. */
export type LockRequestLike = LockRequest | readonly [Mode, string];

/** A live lock as `PATHLOCK.LOCKS` and `PATHLOCK.CHECK` report it. */
export interface Blocker {
  /** Normalised path, e.g. `/A/C`; the root is `/`. */
  path: string;
  mode: Mode;
  token: string;
  /** Milliseconds left on the lock's lease when the server answered. */
  ttlMs: number;
  fence: number;
}

/** Defaults of a `PathLocks` handle. */
export interface PathLocksOptions {
  /** Lease length; the watchdog renews every third of it. Default 30000. */
  ttlMs?: number;
  /** How long an acquire waits for busy locks (server-side, first come first served). Default 0: fail at once. */
  waitMs?: number;
  /** Replicas that must acknowledge a grant (`WAIT`) before it is handed out. Default 0. */
  replicas?: number;
  /** How long to wait for those acknowledgements. Default 1000. */
  replicasTimeoutMs?: number;
}

/** Per-call overrides of the handle's defaults. */
export type AcquireOptions = PathLocksOptions;
