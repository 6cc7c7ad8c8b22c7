//! The active expiry cycle: reclaims expired locks in keys nobody touches, from a tick that comes
//! only when something is due, and works off the keys' background work (freeing the locks of a
//! big owner that was released or lapsed whole, whose locks stopped counting at once; see the
//! engine's `big`). Background work runs on every server, replicas included, since it changes
//! nothing anyone sees; when there is some it keeps a quarter of each tick.
//!
//! Level 7: imports `change`, `clock`, `contain`, `context`, `schedule`, `slot`, `stats`,
//! `store`. Started by `lib.rs`.
//!
//! It knows only "reclaim what is due in this key": `change::expire_until` does the reclaiming,
//! replicates it and reschedules the key. Only a master acts, and not while clients are paused or
//! a failover is in progress (`AvoidReplicaTraffic`), so a replica's locks change only through
//! its master's effects. Likewise, the projects of a slot that an atomic slot migration is
//! importing change only through the source's effects: their keys stay scheduled, looked at
//! again every `IMPORTING_RETRY`, and are visited once the import is over.
//!
//! The tick is `schedule`'s one timer, armed for the earliest deadline and never when nothing is
//! due (see `schedule`'s header). **Anyone with work for the tick calls `schedule::wake_at(ctx,
//! ms)`**, which makes sure a tick comes by then, and does the work in `tick` below; work that is
//! not done when its step ends asks again. Redis's `serverCron`, which runs anyway, calls
//! `schedule::keep_armed` on a master, so deadlines that arrived without a decision (a replica
//! promoted, an AOF replayed) and a wall clock that jumped forward are caught within `1/hz`.
//!
//! A tick works for at most its budget, a few owners at a time, and replicates each step as
//! `EXPIRE now token...` naming the owners it reclaimed. While more is due than a tick can
//! reclaim, the next tick comes the next millisecond (`BUSY_TICK`), and clients are served
//! between its ticks. The cycle holds the server half the time at most, as Redis's own fast
//! expire cycle does (1 ms, started at most every 2 ms): the budget is the pause since the last
//! tick ended, at least `BUDGET` (1 ms) and at most `LONGEST_BUDGET` (1.5 ms). The timer's pause
//! is a millisecond and some (the event loop waits in whole milliseconds, rounded up, and the
//! kernel wakes it a little late), so a fixed 1 ms held the server only about 43% of the time.
//! A million projects lapsing together are reclaimed, and their keys deleted, in seconds
//! (`make bench-projects`).

use std::os::raw::c_void;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis_module::{raw, Context, ContextFlags};

use crate::change::{expire_until, free_until};
use crate::contain::contained;
use crate::context::{latency_threshold, remembering_work_flags};
use crate::store::ServerKey;
use crate::{clock, schedule, slot, stats};

/// How long after a tick that ran out of time with work left the next one is asked for: at once,
/// which the timer makes the next millisecond (a tick asking for a time already past is not run
/// again inside the same pass of the server's timers; see `schedule::delay`).
const BUSY_TICK: Duration = Duration::ZERO;
/// Free slots of the schedule's storage given back per step (some microseconds).
const TRIMMED_PER_STEP: usize = 256;
/// The least time a tick may work (see `budget`). Checked between steps, so a tick overruns its
/// budget by one step.
const BUDGET: Duration = Duration::from_millis(1);
/// The longest a tick may work, after a pause at least as long: within the 2 ms of the module's
/// own work a tick may hold the server, with room for the step that overruns it.
const LONGEST_BUDGET: Duration = Duration::from_micros(1500);
/// When the last tick ended, for the next one's budget (`budget`). Only the main thread ticks.
static LAST_TICK_END: Mutex<Option<Instant>> = Mutex::new(None);
/// How long a due key of a slot being imported waits before the cycle looks at it again.
const IMPORTING_RETRY: Duration = Duration::from_millis(100);
/// The latency monitor's name for a tick, as Redis's own active expiry reports `expire-cycle`:
/// with `latency-monitor-threshold` set, `LATENCY LATEST` and `LATENCY HISTORY` show the ticks
/// that took that long, so an operator sees what the module's background work holds the server.
const LATENCY_EVENT: &std::ffi::CStr = c"pathlock-cycle";

pub fn start(ctx: &Context) {
    schedule::set_tick(tick);
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_CRON_LOOP,
        dataver: 1,
    };
    // SAFETY: subscribing with a callback that lives as long as the module.
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            subscribe(ctx.ctx, event, Some(on_cron));
        }
    }
}

/// The expiry cycle's tick, from `schedule`'s timer: reclaims what is due and works off the
/// background work, within its budget (`budget`), and arms the timer for the next tick.
fn tick(ctx: &Context) {
    let started = Instant::now();
    let cpu = thread_cpu_us();
    stats::start_timing();
    let budget = budget(started);
    let next = remembering_work_flags(ctx, || {
        contained("the expiry cycle", None, || {
            tick_work(ctx, started + budget)
        })
    });
    if let Some(at) = next {
        schedule::wake_at(ctx, at);
    }
    let timed = stats::stop_timing();
    // The CPU time is read inside the wall time's interval, so it never exceeds it.
    let cpu = thread_cpu_us().saturating_sub(cpu);
    let spent = started.elapsed();
    let in_server = timed.of(spent) / 1000;
    report_latency(spent);
    count_tick(spent, cpu, in_server);
    *LAST_TICK_END.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
}

/// The time a tick starting at `started` may work: as long as the server was left to itself
/// since the last tick ended, between `BUDGET` and `LONGEST_BUDGET`, so that ticks that come one
/// after the other hold it half the time.
fn budget(started: Instant) -> Duration {
    let last = *LAST_TICK_END.lock().unwrap_or_else(|p| p.into_inner());
    let pause = last.map_or(LONGEST_BUDGET, |end| started.saturating_duration_since(end));
    pause.clamp(BUDGET, LONGEST_BUDGET)
}

/// A tick's work, until `until`: returns when the next tick should come, if any should.
fn tick_work(ctx: &Context, until: Instant) -> Option<u64> {
    // Background work, when there is some, keeps a quarter of the tick, so that a steady
    // expiry does not starve the freeing of a released owner's locks or the schedule's
    // giving back of its storage.
    let background = schedule::has_pending() || schedule::has_slack();
    let expiry_until = if background {
        until - until.saturating_duration_since(Instant::now()) / 4
    } else {
        until
    };
    let due = reclaim_due(ctx, expiry_until);
    let soon = clock::wall_ms() + BUSY_TICK.as_millis() as u64;
    let more = background && (free_pending(ctx, until) | trim_schedule(until));
    if more {
        Some(due.map_or(soon, |at| at.min(soon)))
    } else {
        due
    }
}

/// Counts a tick in `INFO` (`stats`): its wall time and the CPU time it took, whole and without
/// the `in_server_us` its calls into the server took (`stats::in_server`).
fn count_tick(spent: Duration, cpu_us: u64, in_server_us: u64) {
    let us = u64::try_from(spent.as_micros()).unwrap_or(u64::MAX);
    stats::count(&stats::CYCLES, 1);
    if us > 1000 {
        stats::count(&stats::CYCLES_OVER_1MS, 1);
    }
    stats::peak(&stats::CYCLE_LONGEST_US, us);
    stats::peak(&stats::CYCLE_LONGEST_CPU_US, cpu_us);
    stats::peak(
        &stats::CYCLE_OWN_LONGEST_US,
        us.saturating_sub(in_server_us),
    );
    // The module's work is its CPU time, which a busy machine's preemptions do not stretch.
    let own_cpu_us = cpu_us.saturating_sub(in_server_us);
    if own_cpu_us > 1000 {
        stats::count(&stats::CYCLES_OWN_OVER_1MS, 1);
    }
    stats::peak(&stats::CYCLE_OWN_LONGEST_CPU_US, own_cpu_us);
}

/// The CPU time of the calling thread so far, in microseconds (0 where it cannot be read).
fn thread_cpu_us() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the thread's CPU clock into the struct it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return 0;
    }
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(now.tv_nsec).unwrap_or(0) / 1000
}

/// Gives the schedule's free storage back until `until`, in steps (on any server: it changes
/// nothing anyone sees). Returns whether some is left.
fn trim_schedule(until: Instant) -> bool {
    while Instant::now() < until {
        if !schedule::trim_some(TRIMMED_PER_STEP) {
            return false;
        }
    }
    schedule::has_slack()
}

/// Gives the latency monitor a tick's time, in whole milliseconds as Redis counts its own events,
/// when it reaches `latency-monitor-threshold`, and nothing while that is 0 (the monitor off),
/// as the server does for its own `expire-cycle`. The module API keeps every sample at or above
/// the threshold, so with the monitor off it kept each tick, of 0 ms too: `LATENCY LATEST` listed
/// `pathlock-cycle` and `LATENCY DOCTOR` reported spikes on a server that never asked.
fn report_latency(spent: Duration) {
    let ms = u64::try_from(spent.as_millis()).unwrap_or(u64::MAX);
    let threshold = latency_threshold();
    if threshold == 0 || ms < threshold {
        return;
    }
    // SAFETY: the function pointer is the server's, called on the main thread with a C string
    // that lives as long as the module.
    unsafe {
        if let Some(add) = raw::RedisModule_LatencyAddSample {
            add(LATENCY_EVENT.as_ptr(), ms as raw::mstime_t);
        }
    }
}

/// Works off the keys with background work (freeing buried owners' locks, see
/// `change::free_until`) until `until`, on any server: it changes nothing a client or a replica
/// can see. Returns whether work is left.
fn free_pending(ctx: &Context, until: Instant) -> bool {
    while Instant::now() < until {
        let Some((db, key)) = schedule::pop_pending() else {
            return false;
        };
        let more = ServerKey::visit(ctx, db, &key, |key| free_until(key, until));
        if more {
            schedule::still_pending((db, key));
            return true;
        }
    }
    schedule::has_pending()
}

/// Redis's `serverCron`: where this server reclaims, the tick is armed for the earliest deadline.
extern "C" fn on_cron(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    contained("the cron event", (), || {
        let ctx = Context::new(ctx);
        // Storage left free by keys that went (a mass release, a flush) is given back by the
        // tick, on any server.
        if schedule::has_slack() {
            schedule::wake_at(&ctx, clock::wall_ms());
        }
        // Nothing scheduled is the idle server's case, and costs no more than this look.
        if schedule::next_due().is_none() {
            return;
        }
        if reclaims(&ctx) {
            schedule::keep_armed(&ctx);
        }
    });
}

/// Whether this server reclaims expired locks now: a master whose clients are not paused.
fn reclaims(ctx: &Context) -> bool {
    // SAFETY: takes no arguments and only reads server state.
    let avoid = unsafe { raw::RedisModule_AvoidReplicaTraffic.map_or(0, |f| f()) } != 0;
    !avoid && ctx.get_flags().contains(ContextFlags::MASTER)
}

/// Reclaims due locks, key after key in deadline order, until `until`. Returns when the next
/// tick should come: soon when locks were left due, else at the next deadline, and none when
/// nothing is scheduled or this server does not reclaim (the cron event re-arms it when it does
/// again).
fn reclaim_due(ctx: &Context, until: Instant) -> Option<u64> {
    if !reclaims(ctx) {
        return None;
    }
    let now = clock::wall_ms();
    let later = now + IMPORTING_RETRY.as_millis() as u64;
    let mut busy = true;
    while Instant::now() < until {
        let Some(visit) = schedule::pop_due(now) else {
            busy = false;
            break;
        };
        if slot::IMPORTING.holds_key(&visit.key) {
            schedule::retry_at(&visit, later);
            continue;
        }
        let done = ServerKey::visit(ctx, visit.db, &visit.key, |key| {
            expire_until(key, now, until)
        });
        schedule::visited(visit);
        if !done {
            break;
        }
    }
    if busy {
        Some(clock::wall_ms() + BUSY_TICK.as_millis() as u64)
    } else {
        schedule::next_due()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_works_as_long_as_the_pause_before_it_between_1_and_1_5_ms() {
        let now = Instant::now();
        let after = |pause: Duration| {
            *LAST_TICK_END.lock().unwrap_or_else(|p| p.into_inner()) = Some(now - pause);
            budget(now)
        };
        assert_eq!(
            after(Duration::from_micros(1_250)),
            Duration::from_micros(1_250)
        );
        assert_eq!(after(Duration::from_micros(300)), BUDGET);
        assert_eq!(after(Duration::from_millis(100)), LONGEST_BUDGET);
        // A tick that ended after this one started (a clock read out of order) gives the least.
        *LAST_TICK_END.lock().unwrap_or_else(|p| p.into_inner()) = Some(now + BUDGET);
        assert_eq!(budget(now), BUDGET);
    }
}
