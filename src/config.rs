//! The module's configuration: `pathlock.*` module configs, settable in redis.conf after
//! `loadmodule` and with `CONFIG SET`. Redis checks each value against the range registered in
//! `lib.rs` and refuses the change with its own error otherwise.
//!
//! Level 0: imports nothing of the crate. Read by `args` and the commands.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use pathlock_core::{PathLimits, NOTE_CEILING};

pub const DEFAULT_TTL_MS: i64 = 30_000;
pub const MAX_TTL_MS: i64 = 86_400_000;
pub const MAX_PATH_BYTES: i64 = 4096;
pub const MAX_DEPTH: i64 = 256;
pub const MAX_PATHS_PER_CALL: i64 = 64;
pub const MAX_NOTE_BYTES: i64 = 256;

/// The largest value any of the limits may be set to: ten years of TTL, and limits far above
/// what a file system uses.
pub const TTL_CEILING_MS: i64 = 315_360_000_000;
pub const LIMIT_CEILING: i64 = PathLimits::CEILING.max_bytes as i64;
/// Listings walk the tree recursively, one stack frame per level; this bound keeps that far
/// inside the server's stack.
pub const DEPTH_CEILING: i64 = PathLimits::CEILING.max_depth as i64;
/// The longest note any server takes: what an RDB value or an effect may carry at most.
pub const NOTE_CEILING_BYTES: i64 = NOTE_CEILING as i64;

pub static DEFAULT_TTL: AtomicI64 = AtomicI64::new(DEFAULT_TTL_MS);
pub static MAX_TTL: AtomicI64 = AtomicI64::new(MAX_TTL_MS);
pub static PATH_BYTES: AtomicI64 = AtomicI64::new(MAX_PATH_BYTES);
pub static DEPTH: AtomicI64 = AtomicI64::new(MAX_DEPTH);
pub static PATHS_PER_CALL: AtomicI64 = AtomicI64::new(MAX_PATHS_PER_CALL);
/// `pathlock.max-note-bytes`: the longest `NOTE` an `ACQUIRE` may give; 0 refuses every note
/// but the empty one.
pub static NOTE_BYTES: AtomicI64 = AtomicI64::new(MAX_NOTE_BYTES);
/// `pathlock.accept-eviction`: grant locks even where the `maxmemory` policy can evict project
/// keys (`eviction`).
pub static ACCEPT_EVICTION: AtomicBool = AtomicBool::new(false);
/// `pathlock.lower-impossible-fences`: while loading (a restart, `DEBUG RELOAD`, a full sync, an
/// AOF replay), lower a fence mark or counter above the ceiling to the admissible one instead of
/// refusing the file (`fences`, `keytype`). Off by default: it is the operator's recovery of a
/// server whose files an older version let a forged value into.
pub static LOWER_IMPOSSIBLE_FENCES: AtomicBool = AtomicBool::new(false);

pub fn lower_impossible_fences() -> bool {
    LOWER_IMPOSSIBLE_FENCES.load(Ordering::Relaxed)
}

pub fn max_ttl() -> i64 {
    MAX_TTL.load(Ordering::Relaxed)
}

/// The TTL of an acquire that names none. A default above `max-ttl` is capped there, so
/// lowering `max-ttl` alone is enough to bound every lease.
pub fn default_ttl() -> i64 {
    DEFAULT_TTL.load(Ordering::Relaxed).min(max_ttl())
}

pub fn max_paths_per_call() -> i64 {
    PATHS_PER_CALL.load(Ordering::Relaxed)
}

pub fn max_note_bytes() -> i64 {
    NOTE_BYTES.load(Ordering::Relaxed)
}

pub fn path_limits() -> PathLimits {
    // The registered ranges keep both values positive and small, so the casts are exact.
    PathLimits {
        max_bytes: PATH_BYTES.load(Ordering::Relaxed) as usize,
        max_depth: DEPTH.load(Ordering::Relaxed) as usize,
    }
}
