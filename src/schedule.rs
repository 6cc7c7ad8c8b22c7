//! The expiry schedule: when each project key next has a lock due, ordered by that deadline, so
//! the expiry cycle visits only keys with something due; and the one timer that wakes the cycle.
//!
//! Level 2: imports `context`, `clock`. Written by `change` after every change and by `events` for
//! keys that arrive without a command; read by `expiry`'s cycle, whose tick the timer runs. It
//! also keeps the keys with background work (a released big owner's locks to free), which the
//! same tick works off on every server (`pending`).
//!
//! An entry can go stale (the key was deleted or renamed), and it is left early on purpose when a
//! key's earliest deadline moves later; the cycle finds no path-lock key, or nothing due, under
//! that name and drops or reschedules the entry. `SWAPDB` moves every entry with its database
//! (`Slots`).
//!
//! **The wake-up.** There is no periodic timer: one Redis timer is armed for the earliest time
//! something has to be done, and none when nothing is due, so an idle server, or one whose next
//! lease ends in ten minutes, is woken by pathlock no more often than by Redis itself (its `hz`).
//! A deadline that a master's change schedules earlier than the armed one re-arms the timer, and
//! each tick asks for the next one (`expiry`). The wake-up for anyone: **`wake_at(ctx, ms)`**
//! makes sure a tick comes by wall-clock time `ms` (at once when it has passed), at the cost of
//! one comparison when an earlier tick is armed. Background work of any kind runs in the tick
//! (`expiry::tick`) and, when it is not done, asks for its next step with `wake_at` again.
//! `keep_armed`, from `expiry` on Redis's own `serverCron` (which runs anyway), re-arms what no
//! change did: after a promotion to master or an AOF replay (a replica or a replay schedules
//! deadlines without deciding them), and when the wall clock jumped forward past a deadline
//! (a timer counts monotonic time).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis_module::{raw, Context, RedisModuleTimerID};

use crate::clock;
use crate::context::{decides, selected_db};

/// A key: its database and its name.
pub type KeyId = (i32, Vec<u8>);

/// Entries name a key's database by a slot, which is the database's number until a `SWAPDB`
/// swaps two databases' slots: the keys move with their database in one step, however many
/// are scheduled, instead of being left under the number they no longer have.
#[derive(Default)]
struct Slots {
    slot_of_db: HashMap<i32, i32>,
    db_of_slot: HashMap<i32, i32>,
}

impl Slots {
    fn slot(&self, db: i32) -> i32 {
        self.slot_of_db.get(&db).copied().unwrap_or(db)
    }

    fn db(&self, slot: i32) -> i32 {
        self.db_of_slot.get(&slot).copied().unwrap_or(slot)
    }

    fn swap(&mut self, first: i32, second: i32) {
        let (a, b) = (self.slot(first), self.slot(second));
        self.slot_of_db.insert(first, b);
        self.slot_of_db.insert(second, a);
        self.db_of_slot.insert(b, first);
        self.db_of_slot.insert(a, second);
    }
}

#[derive(Default)]
struct Schedule {
    slots: Slots,
    due: BTreeSet<(u64, KeyId)>,
    /// Per database, each key's entry in `due`; looked up by the key's bytes so that the common
    /// case (the earliest deadline did not change) allocates nothing.
    by_key: HashMap<i32, HashMap<Vec<u8>, u64>>,
    /// The key scheduled last and its entry in `due`: a busy project is scheduled again by every
    /// command, nearly always with its entry unchanged, and comparing its name is cheaper than
    /// hashing it.
    last: Option<(i32, Vec<u8>, Option<u64>)>,
    /// Keys with background work (`LockTable::free_some`), on every server, in no order.
    pending: BTreeSet<KeyId>,
}

/// `SWAPDB first second`: the keys scheduled in each database go with it.
pub fn swapped(first: i32, second: i32) {
    with_schedule(|s| {
        s.slots.swap(first, second);
        s.last = None;
    });
}

static SCHEDULE: Mutex<Option<Schedule>> = Mutex::new(None);

fn with_schedule<R>(f: impl FnOnce(&mut Schedule) -> R) -> R {
    let mut guard = SCHEDULE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(Schedule::default))
}

/// Records that `key`, in the context's database, next has a lock due at `next` (or none), and
/// makes sure the cycle comes by then when this call decides (a replica's and a replay's
/// deadlines are its master's to meet; `keep_armed` takes them over after a promotion).
pub fn schedule(ctx: &Context, key: &[u8], next: Option<u64>) {
    let db = selected_db(ctx);
    let earlier = with_schedule(|s| {
        let db = s.slots.slot(db);
        let current = match &s.last {
            Some((d, k, entry)) if *d == db && k.as_slice() == key => *entry,
            _ => s.by_key.get(&db).and_then(|keys| keys.get(key)).copied(),
        };
        // An entry that comes no later than the key's earliest deadline stays: when it comes,
        // the cycle finds nothing due and files the key again at its real deadline. So a key
        // whose deadlines only move later (a lock handed from waiter to waiter, each with a new
        // lease) costs the schedule nothing per change, and one visit of the cycle per lease.
        let entry = match (current, next) {
            (Some(current), Some(next)) if current <= next => current,
            (Some(current), None) => current,
            (None, None) => {
                remember(s, db, key, None);
                return None;
            }
            (current, Some(deadline)) => {
                let id = (db, key.to_vec());
                if let Some(old) = current {
                    s.due.remove(&(old, id.clone()));
                }
                s.by_key
                    .entry(db)
                    .or_default()
                    .insert(id.1.clone(), deadline);
                s.due.insert((deadline, id));
                remember(s, db, key, Some(deadline));
                return Some(deadline);
            }
        };
        remember(s, db, key, Some(entry));
        None
    });
    if let Some(deadline) = earlier {
        if decides(ctx) {
            wake_at(ctx, deadline);
        }
    }
}

/// Keeps `key`'s entry as the last one scheduled, copying the key's name only when another key
/// was the last.
fn remember(s: &mut Schedule, db: i32, key: &[u8], entry: Option<u64>) {
    match &mut s.last {
        Some((d, k, e)) if *d == db && k.as_slice() == key => *e = entry,
        _ => s.last = Some((db, key.to_vec(), entry)),
    }
}

/// Takes out of the schedule the key with the earliest deadline, if that deadline is not after
/// `now`. The change that reclaims it schedules it again.
pub fn pop_due(now: u64) -> Option<KeyId> {
    with_schedule(|s| {
        let (deadline, _) = s.due.first()?;
        if *deadline > now {
            return None;
        }
        let (_, (slot, key)) = s.due.pop_first()?;
        s.last = None;
        if let Some(keys) = s.by_key.get_mut(&slot) {
            keys.remove(&key);
        }
        Some((s.slots.db(slot), key))
    })
}

/// Records that `key`, in the context's database, has background work, and makes sure a tick
/// comes for it, on any server (it changes nothing anyone sees).
pub fn pending(ctx: &Context, key: &[u8]) {
    let db = selected_db(ctx);
    let new = with_schedule(|s| {
        let id = (s.slots.slot(db), key.to_vec());
        s.pending.insert(id)
    });
    if new {
        wake_at(ctx, clock::wall_ms());
    }
}

/// Takes a key with background work out of the set; whoever works on it records it again with
/// `still_pending` if work is left.
pub fn pop_pending() -> Option<KeyId> {
    with_schedule(|s| {
        let (slot, key) = s.pending.pop_first()?;
        Some((s.slots.db(slot), key))
    })
}

pub fn still_pending((db, key): KeyId) {
    with_schedule(|s| s.pending.insert((s.slots.slot(db), key)));
}

pub fn has_pending() -> bool {
    with_schedule(|s| !s.pending.is_empty())
}

pub fn pending_count() -> usize {
    with_schedule(|s| s.pending.len())
}

/// The earliest deadline in the schedule, if any.
pub fn next_due() -> Option<u64> {
    with_schedule(|s| s.due.first().map(|(deadline, _)| *deadline))
}

/// The bytes the schedule keeps for one key with a lock due, whose name is `name_len` bytes
/// long, for `MEMORY USAGE` (`keytype`): its entry in `due` and in `by_key`, each with a copy
/// of the name. It follows the structures above, and `tests/memory.rs` holds `MEMORY USAGE` to
/// `used_memory` on every server, so a change to them that forgets it fails there.
pub fn bytes_per_key(name_len: usize) -> usize {
    use pathlock_core::alloc::allocation;
    use std::mem::size_of;
    // A leaf of the B-tree holds up to 11 entries; deadlines come mostly in increasing order,
    // and a full leaf splits in two, the later entries going on past the left half: leaves
    // hold 6 on average (measured against `used_memory`).
    let leaf = allocation(size_of::<usize>() + 11 * size_of::<(u64, KeyId)>() + 4);
    let ordered = leaf / 6;
    // A hash table is between 7/16 and 7/8 full: 1.7 slots (and control bytes) per entry.
    let hashed = (size_of::<(Vec<u8>, u64)>() + 1) * 17 / 10;
    ordered + hashed + 2 * allocation(name_len)
}

/// The timer armed now: its id, the wall-clock time it was armed for, and when it fires.
struct Armed {
    id: RedisModuleTimerID,
    at: u64,
    fires: Instant,
}

static ARMED: Mutex<Option<Armed>> = Mutex::new(None);
/// What a tick runs; set once by `expiry` at load.
static TICK: OnceLock<fn(&Context)> = OnceLock::new();

/// How much later than wanted an armed timer may fire before `keep_armed` arms another: a
/// timer's own precision, so that checking never replaces a timer that is on time.
const SLACK: Duration = Duration::from_millis(2);

/// Registers what a tick runs; called once, at load.
pub fn set_tick(tick: fn(&Context)) {
    let _ = TICK.set(tick);
}

/// Makes sure a tick comes by wall-clock time `at` (in ms, as lock deadlines are): nothing when
/// a tick is armed for `at` or earlier, else the timer is armed (again) for `at`.
pub fn wake_at(ctx: &Context, at: u64) {
    let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
    if armed.as_ref().is_some_and(|a| a.at <= at) {
        return;
    }
    arm(ctx, &mut armed, at, clock::wall_ms());
}

/// Arms the timer for the earliest deadline where no change did (see the header), and again
/// when the armed one would fire more than `SLACK` after it because the wall clock jumped. For
/// a server that decides; O(1).
pub fn keep_armed(ctx: &Context) {
    let Some(earliest) = next_due() else {
        return;
    };
    let now = clock::wall_ms();
    let mut armed = ARMED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(a) = armed.as_ref() {
        if a.at <= earliest && a.fires <= Instant::now() + delay(earliest, now) + SLACK {
            return;
        }
    }
    arm(ctx, &mut armed, earliest, now);
}

/// The longest a timer is armed for. A later deadline (a lease of days, or one a hostile payload
/// put beyond any clock) is met by a tick that finds nothing due and arms the timer again, so
/// the timer's period always fits the server's.
const MAX_DELAY: Duration = Duration::from_secs(3600);

/// The timer's delay for wall-clock time `at`: one millisecond more than the distance, so that
/// the tick finds the clock at `at` or later (the wall clock is read in whole milliseconds), and
/// at least one, so that a tick that asks for a time already past is not run again at once
/// inside the same pass of Redis's timer handler.
fn delay(at: u64, now: u64) -> Duration {
    Duration::from_millis(at.saturating_sub(now).saturating_add(1)).min(MAX_DELAY)
}

fn arm(ctx: &Context, armed: &mut Option<Armed>, at: u64, now: u64) {
    if let Some(old) = armed.take() {
        // SAFETY: stops this module's own timer; its data is zero-sized (`fire` takes `()`), so
        // there is nothing to take back and free.
        unsafe {
            if let Some(stop) = raw::RedisModule_StopTimer {
                stop(ctx.ctx, old.id, std::ptr::null_mut());
            }
        }
    }
    let wait = delay(at, now);
    let id = ctx.create_timer(wait, fire, ());
    *armed = Some(Armed {
        id,
        at,
        fires: Instant::now() + wait,
    });
}

/// The one timer of the expiry cycle fired: runs the tick `expiry` registered (`set_tick`).
fn fire(ctx: &Context, (): ()) {
    *ARMED.lock().unwrap_or_else(|p| p.into_inner()) = None;
    if let Some(tick) = TICK.get() {
        tick(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_waits_just_past_its_time_at_least_a_millisecond_and_at_most_an_hour() {
        let ms = Duration::from_millis;
        assert_eq!(delay(1_250, 1_000), ms(251));
        assert_eq!(delay(1_000, 1_000), ms(1));
        assert_eq!(delay(900, 1_000), ms(1), "a time already past");
        assert_eq!(delay(u64::MAX, 0), MAX_DELAY, "a deadline beyond any clock");
    }
}
