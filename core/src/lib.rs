//! The pathlock engine: hierarchical path locks with leases and fences, in plain Rust.
//!
//! Nothing here knows about Redis. Time is passed in by the caller in milliseconds, so the
//! engine is deterministic and the Redis layer decides which clock to use: the master's for
//! decisions, the master's recorded deadlines when a replica applies them.
//!
//! * [`path`]: parsing and normalising client paths into trie keys.
//! * [`lock`]: modes, tokens and the view of a lock.
//! * [`alloc`]: how the allocator rounds an allocation, for the memory estimates.
//! * [`lazyfree`]: where large storage the engine gives up is freed (the embedder's thread).
//! * `bytes`: short byte strings kept without an allocation, for segments and tokens.
//! * [`table`]: the lock table of one project, where conflicts are decided.
//! * [`persist`]: a lock table as the items of its RDB encoding, and back, checked.
//! * [`queue`]: the path index of a project's waiting requests, which finds the front of the
//!   queue near a path.
//! * [`project`]: a lock table with its queue of waiting requests, served in arrival order.

pub mod alloc;
mod bytes;
pub mod lazyfree;
pub mod lock;
pub mod path;
pub mod persist;
pub mod project;
pub mod queue;
pub mod table;

pub use lock::{
    Freed, Items, LockInfo, Mode, Note, Token, TokenError, MAX_TOKEN_BYTES, NOTE_CEILING,
};
pub use path::{Path, PathError, PathLimits};
pub use project::{Grant, Lapsed, Project, Waiter};
pub use queue::WaitIndex;
pub use table::{Acquired, LockTable, Progress, Released, Relocate, Request};
