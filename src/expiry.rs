//! The active expiry cycle: a timer that reclaims expired locks in keys nobody touches.
//!
//! Every change records when its key's earliest lock expires, in a schedule ordered by that
//! deadline, so a tick visits only keys with something due. Keys that arrive without a command
//! (loaded from RDB, renamed, moved, copied, restored) are scheduled from their keyspace events.
//! An entry can go stale (the key was deleted, or `SWAPDB` moved it); a tick that finds no
//! path-lock key, or nothing due, under that name drops or reschedules the entry.
//!
//! The timer runs on every server, but only a master acts, and not while clients are paused or
//! a failover is in progress (`AvoidReplicaTraffic`), so a replica's locks change only through
//! its master's effects.
//!
//! A tick works for at most `BUDGET` (1 ms), a few owners at a time, and replicates each step as
//! `EXPIRE now token...` naming the owners it reclaimed. A key with more due than a tick can
//! reclaim stays first in the schedule, and the next tick comes after `BUSY_TICK` instead of
//! `TICK`, so a million locks expiring together are reclaimed in about a second of ticks while
//! other clients are served between them.

use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pathlock_core::{Path, Project};
use redis_module::{raw, Context, ContextFlags, NotifyEvent, RedisString};

use crate::effects::Effect;
use crate::keytype::PATHLOCK_TYPE;
use crate::{clock, project, stats, waits};

const TICK: Duration = Duration::from_millis(100);
/// The next tick when the last one ran out of time with locks still due.
const BUSY_TICK: Duration = Duration::from_millis(5);
/// The time one tick may work. Checked between steps, so a tick overruns it by one step.
const BUDGET: Duration = Duration::from_millis(1);
/// Owners reclaimed per step, and named in one `EXPIRE` effect: small enough that a step of
/// one-lock owners takes some tens of microseconds.
const OWNERS_PER_STEP: usize = 32;

type KeyId = (i32, Vec<u8>);

#[derive(Default)]
struct Schedule {
    due: BTreeSet<(u64, KeyId)>,
    /// Per database, each key's entry in `due`; looked up by the key's bytes so that the common
    /// case (the earliest deadline did not change) allocates nothing.
    by_key: HashMap<i32, HashMap<Vec<u8>, u64>>,
    /// The key scheduled last and its entry: a busy project is scheduled again by every
    /// command, nearly always with its entry unchanged, and comparing its name is cheaper than
    /// hashing it.
    last: Option<(i32, Vec<u8>, Option<u64>)>,
}

static SCHEDULE: Mutex<Option<Schedule>> = Mutex::new(None);

fn with_schedule<R>(f: impl FnOnce(&mut Schedule) -> R) -> R {
    let mut guard = SCHEDULE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(Schedule::default))
}

fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: the context is the live one Redis gave this call.
    unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(ctx.ctx)) }
}

/// Records that `key`, in the context's database, next has a lock due at `next` (or none).
pub fn schedule(ctx: &Context, key: &[u8], next: Option<u64>) {
    let db = selected_db(ctx);
    with_schedule(|s| {
        if matches!(&s.last, Some((d, k, n)) if *d == db && *n == next && k.as_slice() == key) {
            return;
        }
        let current = s.by_key.get(&db).and_then(|keys| keys.get(key)).copied();
        match &mut s.last {
            Some((d, k, n)) if *d == db && k.as_slice() == key => *n = next,
            _ => s.last = Some((db, key.to_vec(), next)),
        }
        if current == next {
            return;
        }
        let id = (db, key.to_vec());
        if let Some(old) = current {
            s.due.remove(&(old, id.clone()));
        }
        let keys = s.by_key.entry(db).or_default();
        match next {
            Some(deadline) => {
                keys.insert(id.1.clone(), deadline);
                s.due.insert((deadline, id));
            }
            None => {
                keys.remove(key);
            }
        }
    });
}

/// Keyspace events that bring a path-lock key under a new name or from outside.
pub fn on_keyspace_event(ctx: &Context, _kind: NotifyEvent, event: &str, key: &[u8]) {
    if !matches!(
        event,
        "loaded" | "rename_to" | "move_to" | "copy_to" | "restore"
    ) {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let name = RedisString::create_from_slice(ctx.ctx, key);
        let opened = ctx.open_key(&name);
        if let Ok(Some(project)) = opened.get_value::<Project>(&PATHLOCK_TYPE) {
            schedule(ctx, key, project.locks().next_deadline());
            if project.waiting() > 0 && matches!(event, "rename_to" | "move_to") {
                waits::value_moved(ctx, key);
            }
        }
    }));
}

pub fn start(ctx: &Context) {
    ctx.create_timer(TICK, tick, ());
}

fn tick(ctx: &Context, _: ()) {
    let more = catch_unwind(AssertUnwindSafe(|| reclaim_due(ctx))).unwrap_or(false);
    ctx.create_timer(if more { BUSY_TICK } else { TICK }, tick, ());
}

/// Reclaims due locks, key after key in deadline order, for at most `BUDGET`. Returns whether
/// locks were left due.
fn reclaim_due(ctx: &Context) -> bool {
    // SAFETY: takes no arguments and only reads server state.
    let avoid = unsafe { raw::RedisModule_AvoidReplicaTraffic.map_or(0, |f| f()) } != 0;
    if avoid || !ctx.get_flags().contains(ContextFlags::MASTER) {
        return false;
    }
    let started = Instant::now();
    let now = clock::wall_ms();
    let original_db = selected_db(ctx);
    let mut more = false;
    while started.elapsed() < BUDGET {
        let next = with_schedule(|s| {
            let (deadline, _) = s.due.first()?;
            if *deadline > now {
                return None;
            }
            let (_, id) = s.due.pop_first()?;
            s.last = None;
            if let Some(keys) = s.by_key.get_mut(&id.0) {
                keys.remove(&id.1);
            }
            Some(id)
        });
        let Some((db, key)) = next else {
            break;
        };
        // SAFETY: selecting a database on the timer's own context.
        unsafe {
            if let Some(select) = raw::RedisModule_SelectDb {
                select(ctx.ctx, db);
            }
        }
        let name = RedisString::create_from_slice(ctx.ctx, &key);
        if !reclaim_key(ctx, &name, now, started) {
            more = true;
            break;
        }
    }
    // SAFETY: as above.
    unsafe {
        if let Some(select) = raw::RedisModule_SelectDb {
            select(ctx.ctx, original_db);
        }
    }
    more
}

/// Reclaims the locks of one key due by `now`, until done or until the tick's time is up, and
/// reschedules the key. Returns whether nothing due is left. A name that no longer holds a
/// project is done (its schedule entry is dropped).
fn reclaim_key(ctx: &Context, name: &RedisString, now: u64, started: Instant) -> bool {
    let key = ctx.open_key_writable(name);
    let Ok(Some(project)) = key.get_value::<Project>(&PATHLOCK_TYPE) else {
        return true;
    };
    let before = project.locks().len();
    if project.waiting() > 0 {
        let grants = waits::purge_cancelled(ctx, name.as_slice(), project, now);
        waits::deliver(ctx, name, grants);
    }
    let done = reclaim_until(ctx, name, project, now, started + BUDGET);
    stats::track(&stats::LOCKS_HELD, before, project.locks().len());
    schedule(ctx, name.as_slice(), project.locks().next_deadline());
    done
}

/// Reclaims a project's locks due by `now`, a step of a few owners at a time, until none is due
/// or `until` has passed; replicates each step, wakes the waiters near what it freed, and
/// raises the keyspace event. Returns whether nothing due is left. The expiry cycle's work on
/// one key. A command's lazy reclamation could call it too, to bound its own pause; a lock it
/// left due would then still count in that command's decision.
pub fn reclaim_until(
    ctx: &Context,
    name: &RedisString,
    project: &mut Project,
    now: u64,
    until: Instant,
) -> bool {
    let mut reclaimed = 0;
    let mut done = false;
    while Instant::now() < until {
        let (tokens, locks) = project
            .locks_mut()
            .reclaim_some_expired(now, OWNERS_PER_STEP);
        if tokens.is_empty() {
            done = true;
            break;
        }
        Effect::ExpireOf { now, tokens }.replicate(ctx, name);
        reclaimed += locks.len();
        if project.waiting() > 0 {
            let freed: Vec<Path> = locks.into_iter().map(|lock| lock.path).collect();
            let grants = project.wake(now, &freed);
            waits::deliver(ctx, name, grants);
        }
    }
    if reclaimed > 0 {
        stats::count(&stats::EXPIRATIONS, reclaimed);
        project::notify(ctx, "pathlock.expired", name);
    }
    done
}
