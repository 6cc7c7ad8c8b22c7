// The errors the client raises, and why a lease can be lost.
// Level 1: builds on `types`.
import type { Blocker, LockRequest } from "./types";

/**
 * The locks were busy: another owner holds a conflicting lock, or an earlier waiter is queued for
 * one (the server serves waiters first come, first served). `blockers` are the live locks that
 * `PATHLOCK.CHECK` reported right after the refusal, with their notes. It is empty when nothing
 * holds the paths any more (the holders let go in between, or only an earlier waiting request was
 * in the way): the message then says so, and trying again is the answer. It is also empty when
 * the `CHECK` itself failed (a connection error, a `NOPERM`): then `checkError` is that error (also
 * the error's `cause`; both undefined otherwise), and the message says the blockers could not be
 * read, never that nothing holds them.
 */
export class BusyError extends Error {
  override readonly name = "BusyError";
  /** The error of the `PATHLOCK.CHECK` that was to name the blockers; undefined when it answered. */
  readonly checkError: Error | undefined;

  constructor(
    readonly key: string,
    readonly locks: LockRequest[],
    readonly blockers: Blocker[],
    checkError?: Error,
  ) {
    super(busyMessage(key, locks, blockers, checkError), checkError === undefined ? undefined : { cause: checkError });
    this.checkError = checkError;
  }
}

/**
 * A key in double quotes for a message, as every client shows it (the contract's rule): `"` and
 * `\\` escaped with a backslash, control characters as `\\xHH`.
 */
export function quoted(key: string): string {
  let out = "";
  for (const char of key) {
    const code = char.codePointAt(0) as number;
    if (char === '"' || char === "\\") {
      out += `\\${char}`;
    } else if (code < 0x20 || code === 0x7f) {
      out += `\\x${code.toString(16).padStart(2, "0")}`;
    } else {
      out += char;
    }
  }
  return `"${out}"`;
}

// The texts are the contract's (clients/contract/contract.json), the same in every client.
function busyMessage(key: string, locks: LockRequest[], blockers: Blocker[], checkError?: Error): string {
  const wanted = locks.map((l) => `${l.mode} ${l.path}`).join(", ");
  if (blockers.length === 0 && checkError !== undefined) {
    // Never "nothing holds these paths": the client does not know who does.
    return `busy: ${wanted} in ${quoted(key)}: the locks in the way could not be read (${checkError.name}: ${checkError.message}); try again`;
  }
  if (blockers.length === 0) {
    return `busy: ${wanted} in ${quoted(key)}: nothing holds these paths now: the holders let go in between, or an earlier waiting request goes first; try again`;
  }
  const held = blockers
    .map((b) => `${b.mode} ${b.path} held by ${b.token}${b.note === null ? "" : ` (${b.note})`} for ${b.ttlMs} ms more`)
    .join("; ");
  return `busy: ${wanted} in ${quoted(key)}: ${held}`;
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

/** What each reason means, in the loss's message. */
export const LOST_REASONS: Record<LostReason, string> = {
  gone: "a renewal answered 0, or fewer locks than the lease held: its locks expired, were released with its token, or the key was deleted",
  expired: "no renewal succeeded before its deadline, counted on the client's own clock",
  replaced: "the key now holds another type of value, and the locks went with the old one",
};

function lostMessage(key: string, token: string, reason: LostReason): string {
  return `lease ${token} on ${quoted(key)} is lost: ${LOST_REASONS[reason]}`;
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
    super(`key ${quoted(key)} is not a pathlock project: it holds another type of value (check the key name)`);
  }
}
