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

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

pub static LOCKS_HELD: AtomicI64 = AtomicI64::new(0);
/// Locks released or reclaimed whole that the background is still freeing.
pub static LOCKS_FREEING: AtomicI64 = AtomicI64::new(0);
pub static KEYS: AtomicI64 = AtomicI64::new(0);
/// Storage given to the module's lazy-free thread (`lazyfree`) and not yet freed.
pub static LAZYFREE_PENDING: AtomicI64 = AtomicI64::new(0);
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
/// Storage the module's lazy-free thread freed.
pub static LAZYFREED: AtomicU64 = AtomicU64::new(0);

/// The expiry cycle's ticks (`expiry`), finer than the latency monitor's whole milliseconds: how
/// many ran, how many held the server over 1 ms, and the longest, in microseconds of wall time
/// (what clients waited) and of the main thread's CPU time (which a busy machine's preemptions
/// do not stretch; the server's work inside the tick's calls included). Since the server
/// started, like the totals.
pub static CYCLES: AtomicU64 = AtomicU64::new(0);
pub static CYCLES_OVER_1MS: AtomicU64 = AtomicU64::new(0);
pub static CYCLE_LONGEST_US: AtomicU64 = AtomicU64::new(0);
pub static CYCLE_LONGEST_CPU_US: AtomicU64 = AtomicU64::new(0);
/// The same of the module's own work in a tick (the count: ticks whose own CPU time went over
/// 1 ms): its time less the time of the tick's calls into the server that do the server's work
/// or can hold it (see [`in_server`]): looking a key up, deleting it, replicating, unblocking a
/// granted waiter, freeing memory, and allocating 1 KiB or more (`defrag`'s allocator). A tick's
/// whole time includes the server's work inside those calls, such as its key table finishing a
/// resize and freeing the old buckets, or glibc malloc consolidating its freed small blocks; the
/// own figures leave it out. The small calls of constant cost (creating a name, reading a value,
/// closing a key, raising a keyspace event, allocating less than 1 KiB) are not timed, as timing
/// costs as much as they do, and count as the module's. The calls are timed by the wall clock
/// only (the thread's CPU clock is a system call), so the own CPU time is the tick's CPU time
/// less the calls' wall time; on x86-64 that clock is the processor's time-stamp counter (see
/// [`stamp`]).
pub static CYCLES_OWN_OVER_1MS: AtomicU64 = AtomicU64::new(0);
pub static CYCLE_OWN_LONGEST_US: AtomicU64 = AtomicU64::new(0);
pub static CYCLE_OWN_LONGEST_CPU_US: AtomicU64 = AtomicU64::new(0);

/// Whether an expiry tick is running, so that [`in_server`] times the calls it makes.
static TIMING: AtomicBool = AtomicBool::new(false);
/// The thread running the tick (`pthread_self`): calls on other threads (the server's lazy-free
/// thread freeing a project, with the module's allocator) are not the tick's.
static TICK_THREAD: AtomicU64 = AtomicU64::new(0);
/// Whether the tick's thread is inside a timed call, whose time already counts.
static INSIDE: AtomicBool = AtomicBool::new(false);
/// The [`stamp`] units the running tick spent in calls into the server so far.
static IN_SERVER: AtomicU64 = AtomicU64::new(0);
/// The [`stamp`] at which the running tick started.
static STARTED: AtomicU64 = AtomicU64::new(0);

/// A reading of a clock that only ever goes forward, in units of its own, for timing the tick's
/// calls into the server. A tick makes some ten of these calls for each project it reclaims (a
/// free is one), and two readings of the monotonic clock (`Instant::now`, 35 ns each in a virtual
/// machine, through the vDSO) took a tenth of a tick's CPU time while a million projects lapsed.
/// On x86-64 it is the time-stamp counter, which the kernel's own clock is built on where it is
/// the clock source (a third of the cost). Its units are turned into nanoseconds by the tick's
/// wall time (`stop_timing`), so no frequency has to be known. Elsewhere it is the monotonic
/// clock in nanoseconds.
#[inline]
fn stamp() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` reads a register every x86-64 processor has, and changes nothing.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes the monotonic clock into the struct it is given.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000
            + u64::try_from(now.tv_nsec).unwrap_or(0)
    }
}

fn this_thread() -> u64 {
    // SAFETY: takes no arguments and only reads the calling thread's handle.
    unsafe { libc::pthread_self() as u64 }
}

/// Starts timing the server's calls for an expiry tick on this thread, from zero.
pub fn start_timing() {
    IN_SERVER.store(0, Ordering::Relaxed);
    INSIDE.store(false, Ordering::Relaxed);
    TICK_THREAD.store(this_thread(), Ordering::Relaxed);
    STARTED.store(stamp(), Ordering::Relaxed);
    TIMING.store(true, Ordering::Relaxed);
}

/// Stops timing the server's calls: what they took since `start_timing`, to be turned into time
/// by the tick's wall time read after this ([`Timed::of`]).
pub fn stop_timing() -> Timed {
    TIMING.store(false, Ordering::Relaxed);
    Timed {
        inside: IN_SERVER.load(Ordering::Relaxed),
        whole: stamp().wrapping_sub(STARTED.load(Ordering::Relaxed)),
    }
}

/// A tick's calls into the server, in [`stamp`] units, and the whole tick's.
pub struct Timed {
    inside: u64,
    whole: u64,
}

impl Timed {
    /// The nanoseconds the calls took, the tick having taken `spent` (read after `stop_timing`,
    /// so that it spans at least the units counted): their share of the units, of `spent`. A
    /// counter that went back (one not kept in step across cores) gives a sum or a span
    /// "below zero", which counts as nothing in the server; the figure stays within `spent`.
    pub fn of(&self, spent: Duration) -> u64 {
        let spent = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        let (inside, whole) = (self.inside, self.whole);
        if inside == 0 || (inside as i64) < 0 || (whole as i64) <= 0 {
            return 0;
        }
        if inside >= whole {
            return spent;
        }
        u64::try_from(u128::from(spent) * u128::from(inside) / u128::from(whole)).unwrap_or(spent)
    }
}

/// Whether a call made now belongs to the running tick.
#[inline]
fn timing() -> bool {
    TIMING.load(Ordering::Relaxed) && TICK_THREAD.load(Ordering::Relaxed) == this_thread()
}

/// Runs `call`, a call into the server (or a run of them with next to nothing of the module's
/// between), and adds its wall time to the running tick's (`start_timing`); outside a tick it
/// costs one load. Two readings of [`stamp`] (some 12 ns each on x86-64), so only
/// for calls that do the server's work or can hold it. A call inside another timed one (the
/// module's allocator inside a deletion that frees a project) is already counted.
#[inline]
pub fn in_server<R>(call: impl FnOnce() -> R) -> R {
    if !timing() || INSIDE.load(Ordering::Relaxed) {
        return call();
    }
    INSIDE.store(true, Ordering::Relaxed);
    let started = stamp();
    let result = call();
    let took = stamp().wrapping_sub(started);
    INSIDE.store(false, Ordering::Relaxed);
    // Only the tick's thread gets here, so a load and a store serve.
    IN_SERVER.store(
        IN_SERVER.load(Ordering::Relaxed).wrapping_add(took),
        Ordering::Relaxed,
    );
    result
}

/// Runs `work`, the module's own work in a callback the server makes from inside a call that
/// [`in_server`] times (the `unlink` of a project the tick deletes), and takes its time out of
/// the server's; the calls it makes into the server count again.
#[inline]
pub fn own<R>(work: impl FnOnce() -> R) -> R {
    if !timing() || !INSIDE.load(Ordering::Relaxed) {
        return work();
    }
    INSIDE.store(false, Ordering::Relaxed);
    let started = stamp();
    let result = work();
    let took = stamp().wrapping_sub(started);
    INSIDE.store(true, Ordering::Relaxed);
    // The enclosing call adds its whole time when it returns, this part included.
    IN_SERVER.store(
        IN_SERVER.load(Ordering::Relaxed).wrapping_sub(took),
        Ordering::Relaxed,
    );
    result
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread::sleep;
    use std::time::Instant;

    #[test]
    fn the_calls_time_is_their_share_of_the_tick_in_nanoseconds() {
        let wait = Duration::from_millis(5);
        let started = Instant::now();
        start_timing();
        in_server(|| sleep(wait));
        // A call inside a timed one is already counted, and `own` work inside it is not.
        in_server(|| {
            in_server(|| sleep(wait));
            own(|| sleep(wait));
        });
        sleep(wait);
        let timed = stop_timing();
        let spent = started.elapsed();
        let ns = timed.of(spent);
        // A busy machine only stretches the sleeps, so the bounds hold under load: the timed
        // calls slept 10 ms at least, and the rest of the tick (the `own` work and the last
        // sleep) 10 ms at least.
        let least = Duration::from_micros(9_500).as_nanos() as u64;
        let spent = spent.as_nanos() as u64;
        assert!(ns >= least, "{ns} ns in the server's calls");
        assert!(
            ns <= spent - least,
            "{ns} ns of {spent} ns in the server's calls"
        );
        // Outside a tick nothing is timed.
        let before = IN_SERVER.load(Ordering::Relaxed);
        in_server(|| sleep(wait));
        assert_eq!(IN_SERVER.load(Ordering::Relaxed), before);
    }
}
