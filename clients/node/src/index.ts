// The package's modules build on one another in levels, without a circle: `types` and
// `connection` (0), `errors`, `operations` and `pool` (1), `lease` (2), `pathlocks` (3).
export { PathLocks } from "./pathlocks";
export { Lease } from "./lease";
export { BusyError, LeaseLostError, NotReplicatedError, WrongTypeError, type LostReason } from "./errors";
export type {
  AcquireOptions,
  Blocker,
  LockMoreOptions,
  LockRequest,
  LockRequestLike,
  Mode,
  PathLocksOptions,
  Waiter,
} from "./types";
export type { Client } from "./connection";
