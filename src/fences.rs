//! Where a new project key's fences start, so that fences for a key name never go back: not
//! after `DEL`, `UNLINK`, eviction, `FLUSHALL`, a restart, a failover or a reshard.
//!
//! While a key exists, the engine gives each grant the previous fence + 1. When a master creates
//! a project key, its counter starts at the larger of two floors:
//!
//! - **The server's high-water mark**: the highest fence counter this server has seen on any
//!   project key, by granting, by applying a master's effects (a replica), by replaying its AOF
//!   or by loading a value (RDB, `RESTORE`). It lives in memory, is saved in the RDB as the
//!   type's aux data (and so reaches replicas with a full sync, and the AOF's RDB preamble), and
//!   every replayed or replicated grant raises it again. It makes fences monotonic on one server
//!   and its replicas whatever the clock does.
//! - **A floor from the clock**: [`PER_MS`] times the time in milliseconds. It covers what the
//!   high-water mark cannot see: an AOF without the RDB preamble rewritten after the last
//!   project key was deleted, and a key deleted on one shard and created again on another after
//!   a reshard. Fences handed out before time `t` stay below `PER_MS * t` as long as keys are
//!   granted fewer than [`PER_MS`] times per millisecond on average since their creation (a
//!   server answers a few hundred commands per millisecond); a new key created later, on any
//!   server whose clock is not behind, starts above them. With today's clock (1.8e12 ms) fences
//!   start near 1.8e15, and `PER_MS * t` stays below 2^53 until the year 2255.
//!
//! Replicas and AOF replay never compute a floor: the `GRANT` effect that creates the key on them
//! carries the master's fence, and applying it sets the counter to that fence + 1.
//!
//! Level 0: imports nothing of the crate. Used by `store` (creation), `change` and `keytype`
//! (what is seen), and the ACQUIRE handler (the 2^53 bound).

use std::sync::atomic::{AtomicU64, Ordering};

/// Fences a key may take per millisecond of its life before the clock floor no longer covers it.
pub const PER_MS: u64 = 1000;

/// Fences stay below 2^53, the largest integer JavaScript represents exactly.
pub const LIMIT: u64 = 1 << 53;

/// The highest fence counter (the fence the next grant would take) seen on any project key.
static HIGH: AtomicU64 = AtomicU64::new(1);

/// Records a project's fence counter; the mark never goes down.
pub fn observe(next_fence: u64) {
    HIGH.fetch_max(next_fence, Ordering::Relaxed);
}

/// The mark, for the RDB's aux data and for tests through `INFO`.
pub fn high() -> u64 {
    HIGH.load(Ordering::Relaxed)
}

/// The counter a project key created now by a master starts at.
pub fn first(now_ms: u64) -> u64 {
    high().max(now_ms.saturating_mul(PER_MS)).min(LIMIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_starts_above_both_floors() {
        observe(5);
        assert_eq!(first(0), high());
        assert_eq!(first(1_800_000_000_000), 1_800_000_000_000_000);
        observe(2_000_000_000_000_000);
        assert_eq!(first(1_800_000_000_000), 2_000_000_000_000_000);
        observe(3);
        assert_eq!(high(), 2_000_000_000_000_000, "the mark never goes down");
        assert_eq!(first(u64::MAX), LIMIT);
    }
}
