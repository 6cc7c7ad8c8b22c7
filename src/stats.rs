//! The figures behind `INFO pathlock`. Gauges (locks held, keys) follow the data the module
//! holds in memory: a project counts from its creation or load until its `free` callback, so they
//! are right after `DEL`, `FLUSHALL`, reloads and full syncs; totals count this server's work
//! since it started, like Redis's own `total_*` fields.
//!
//! Atomics, because the server may free a value in its lazy-free thread. Where it does (`UNLINK`,
//! `FLUSHALL ASYNC`, and on Valkey 8 and later also `DEL`, `FLUSHALL` and `DEBUG RELOAD` by
//! default), the gauges drop when that thread has freed the project, shortly after the command
//! returned, like `used_memory`; `lazyfree_pending_objects` in `INFO memory` is 0 once they have.
//! Counting at `unlink` instead would be wrong: `RENAME` and `MOVE` call it on a value that lives
//! on under another name, and no callback says so.
//!
//! Level 0: imports nothing of the crate. Counted by everything that changes locks or waiters;
//! read by `info`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

pub static LOCKS_HELD: AtomicI64 = AtomicI64::new(0);
/// Locks released or reclaimed whole that the background is still freeing.
pub static LOCKS_FREEING: AtomicI64 = AtomicI64::new(0);
pub static KEYS: AtomicI64 = AtomicI64::new(0);
pub static CLIENTS_WAITING: AtomicI64 = AtomicI64::new(0);

pub static GRANTS: AtomicU64 = AtomicU64::new(0);
pub static CONFLICTS: AtomicU64 = AtomicU64::new(0);
pub static RELEASES: AtomicU64 = AtomicU64::new(0);
pub static RENEWALS: AtomicU64 = AtomicU64::new(0);
pub static EXPIRATIONS: AtomicU64 = AtomicU64::new(0);
pub static WAITS_GRANTED: AtomicU64 = AtomicU64::new(0);
pub static WAIT_TIMEOUTS: AtomicU64 = AtomicU64::new(0);
/// Projects the server evicted while they held locks (`eviction`).
pub static EVICTED_PROJECTS: AtomicU64 = AtomicU64::new(0);

/// The expiry cycle's ticks (`expiry`), finer than the latency monitor's whole milliseconds: how
/// many ran, how many held the server over 1 ms, and the longest, in microseconds of wall time
/// (what clients waited) and of the main thread's CPU time (the module's own work, which a
/// busy machine's preemptions do not stretch). Since the server started, like the totals.
pub static CYCLES: AtomicU64 = AtomicU64::new(0);
pub static CYCLES_OVER_1MS: AtomicU64 = AtomicU64::new(0);
pub static CYCLE_LONGEST_US: AtomicU64 = AtomicU64::new(0);
pub static CYCLE_LONGEST_CPU_US: AtomicU64 = AtomicU64::new(0);

pub fn count(total: &AtomicU64, n: usize) {
    total.fetch_add(n as u64, Ordering::Relaxed);
}

/// Raises a high-water mark to `value`.
pub fn peak(mark: &AtomicU64, value: u64) {
    mark.fetch_max(value, Ordering::Relaxed);
}

/// Moves a gauge by the difference between two sizes of one table.
pub fn track(gauge: &AtomicI64, before: usize, after: usize) {
    let delta = after as i64 - before as i64;
    if delta != 0 {
        gauge.fetch_add(delta, Ordering::Relaxed);
    }
}

pub fn get(gauge: &AtomicI64) -> i64 {
    gauge.load(Ordering::Relaxed)
}

pub fn total(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}
