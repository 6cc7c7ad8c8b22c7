// The errors the client raises, and why a lease can be lost.
// Level 1: builds on `types`.
import type { Blocker, LockRequest } from "./types";

/**
 * The locks were busy: another owner holds a conflicting lock, or an earlier waiter is queued for
 * one (the server serves waiters first come, first served). `blockers` are the live locks that
 * `PATHLOCK.CHECK` reported right after the refusal, with their notes; it is empty when only a
 * queued waiter stood in the way or the holder let go in between.
 */
export class BusyError extends Error {
  override readonly name = "BusyError";

  constructor(
    readonly key: string,
    readonly locks: LockRequest[],
    readonly blockers: Blocker[],
  ) {
    super(busyMessage(key, locks, blockers));
  }
}

function busyMessage(key: string, locks: LockRequest[], blockers: Blocker[]): string {
  const wanted = locks.map((l) => `${l.mode} ${l.path}`).join(", ");
  if (blockers.length === 0) {
    return `busy: ${wanted} in ${key} (an earlier request is waiting for it)`;
  }
  const held = blockers
    .map((b) => `${b.path} (${b.mode}, owner ${b.token}${b.note === null ? "" : `: ${b.note}`})`)
    .join(", ");
  return `busy: ${wanted} in ${key} is blocked by ${held}`;
}

/** Why a lease was lost. */
export type LostReason =
  /** A renewal answered 0 (or fewer locks than before): locks expired, were released with the token, or the key was deleted. */
  | "gone"
  /** No renewal succeeded before the deadline the client last knew, counted on its own clock. */
  | "expired"
  /** The key now holds another type of value (a renewal answered WRONGTYPE). */
  | "replaced";

/** The lease is no longer held; work under it must stop, and its fence must not be used again. */
export class LeaseLostError extends Error {
  override readonly name = "LeaseLostError";

  constructor(
    readonly key: string,
    readonly token: string,
    readonly reason: LostReason,
  ) {
    super(lostMessage(key, token, reason));
  }
}

function lostMessage(key: string, token: string, reason: LostReason): string {
  switch (reason) {
    case "gone":
      return `lease ${token} on ${key} is lost: a renewal answered 0, or fewer locks than the lease held (its locks expired, were released with its token, or the key was deleted)`;
    case "expired":
      return `lease ${token} on ${key} is lost: no renewal succeeded before its deadline`;
    case "replaced":
      return `lease ${token} on ${key} is lost: the key now holds another type of value`;
  }
}

/**
 * Fewer replicas than asked acknowledged the grant within the timeout (`WAIT`). The lease has
 * been released, because a failover could hand the same paths to someone else.
 */
export class NotReplicatedError extends Error {
  override readonly name = "NotReplicatedError";

  constructor(
    readonly key: string,
    readonly replicas: number,
    readonly acknowledged: number,
  ) {
    super(
      `grant on ${key} reached ${acknowledged} of ${replicas} replicas in time; it was released`,
    );
  }
}

/** The key holds another type of value than a pathlock project (the server's `WRONGTYPE`). */
export class WrongTypeError extends Error {
  override readonly name = "WrongTypeError";

  constructor(readonly key: string) {
    super(`key '${key}' is not a pathlock project: it holds another type of value (check the key name)`);
  }
}
