export { PathLocks } from "./pathlocks";
export { Lease } from "./lease";
export { BusyError, LeaseLostError, NotReplicatedError, type LostReason } from "./errors";
export type { AcquireOptions, Blocker, LockRequest, LockRequestLike, Mode, PathLocksOptions } from "./types";
export type { Client } from "./connection";
