//! The expiry schedule: when each project key next has a lock due, ordered by that deadline, so
//! the expiry cycle visits only keys with something due; and the one timer that wakes the cycle.
//!
//! Level 2: imports `context`, `clock`, `timetable`, `lazyfree`. Written by `store` after every change, by
//! `events` for keys that arrive without a command and for flushes, and by `keytype` when a value
//! leaves its key; read by `expiry`'s cycle, whose tick the timer runs. It also keeps the keys
//! with background work (a released big owner's locks to free), which the same tick works off on
//! every server (`pending`).
//!
//! **An entry per key, found through the value.** Each database's entries live in a
//! `Timetable` (see there: 32 bytes an entry with a name of up to 15 bytes, storage that never
//! grows or shrinks in one step, capacity that comes back as keys go), and each project keeps
//! its entry's handle (`Project::tag`: the database's slot and the entry), so no map from names
//! to entries exists: a change finds its key's entry at once, and the value leaving its key
//! (`DEL`, `UNLINK`, an eviction, an overwrite, `RENAME`, `MOVE`, `MIGRATE`) takes its entry
//! with it (`unscheduled`, from `keytype`'s `unlink`), so nothing is left for a deleted key. A
//! flush drops its databases' entries in one step (`flushed`; in the background for `FLUSHALL
//! ASYNC`), and `SWAPDB` moves every entry with its database (`Slots`). A value the server frees
//! without either (a replica's load that swaps databases) leaves an entry that the cycle finds
//! stale, naming a key whose value does not hold it, and removes.
//!
//! An entry is left early on purpose when a key's earliest deadline moves later: the cycle
//! finds nothing due and files the key again at its real deadline. While the cycle visits a
//! key, its entry is parked (never due, still the key's); the change files it again at the key's
//! next deadline, or removes it when there is none, and an entry still parked after the visit
//! belongs to no value and goes (`visited`).
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

use pathlock_core::Project;
use redis_module::{raw, Context, RedisModuleTimerID};

use crate::clock;
use crate::context::{decides, selected_db};
use crate::timetable::{Timetable, PARKED};

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
    /// Each slot's entries, by slot.
    tables: Vec<Timetable>,
    /// Keys with background work (`LockTable::free_some`), on every server, in no order.
    pending: BTreeSet<KeyId>,
}

/// A project's entry as its tag holds it: the slot and the entry's handle, 0 for none.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Tag(u64);

// A database's index is below the server's `databases`, itself at most `INT_MAX`, so the
// largest tag has a slot of `INT_MAX - 1`; it must fit in what a project keeps.
const _: () = assert!((((i32::MAX - 1) as u64 + 1) << 32 | u32::MAX as u64) <= Project::MAX_TAG);

impl Tag {
    const NONE: Tag = Tag(0);

    fn new(slot: i32, handle: u32) -> Tag {
        Tag(((slot as u64 + 1) << 32) | u64::from(handle))
    }

    fn of(project: &Project) -> Tag {
        Tag(project.tag())
    }

    /// The slot and the handle, unless this is no entry.
    fn parts(self) -> Option<(i32, u32)> {
        let slot = i32::try_from((self.0 >> 32).checked_sub(1)?).ok()?;
        Some((slot, self.0 as u32))
    }
}

impl Schedule {
    fn table(&mut self, slot: i32) -> Option<&mut Timetable> {
        let at = usize::try_from(slot).ok()?;
        if at >= self.tables.len() {
            self.tables.resize_with(at + 1, Timetable::default);
        }
        self.tables.get_mut(at)
    }

    /// The deadline of the entry `tag` names in `slot` ([`PARKED`] when parked); `None` when it
    /// names none there.
    fn deadline(&self, tag: Tag, slot: i32) -> Option<u64> {
        let (at, handle) = tag.parts().filter(|(at, _)| *at == slot)?;
        self.tables.get(usize::try_from(at).ok()?)?.deadline(handle)
    }

    /// The slot whose earliest deadline comes first, with that deadline.
    fn earliest(&self) -> Option<(i32, u64)> {
        self.tables
            .iter()
            .enumerate()
            .filter_map(|(slot, table)| Some((slot as i32, table.next_deadline()?)))
            .min_by_key(|(_, deadline)| *deadline)
    }
}

/// `SWAPDB first second`: the keys scheduled in each database go with it.
pub fn swapped(first: i32, second: i32) {
    with_schedule(|s| s.slots.swap(first, second));
}

/// A flush of database `db` (of every database when `None`) starts: their entries go, to the
/// module's lazy-free thread when the server frees the keys in the background (`async`), since
/// a database's entries are a step per chunk of 2,048 to drop.
pub fn flushed(db: Option<i32>, background: bool) {
    let dropped: Vec<Timetable> = with_schedule(|s| {
        let slots: Vec<i32> = match db {
            Some(db) => vec![s.slots.slot(db)],
            None => (0..s.tables.len() as i32).collect(),
        };
        s.pending.retain(|(slot, _)| !slots.contains(slot));
        slots
            .into_iter()
            .filter_map(|slot| s.table(slot).map(std::mem::take))
            .filter(|table| table.slots() > 0)
            .collect()
    });
    if background && !dropped.is_empty() {
        crate::lazyfree::free(Box::new(dropped));
    }
}

static SCHEDULE: Mutex<Option<Schedule>> = Mutex::new(None);

fn with_schedule<R>(f: impl FnOnce(&mut Schedule) -> R) -> R {
    let mut guard = SCHEDULE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(Schedule::default))
}

/// Records that `project`, the value of `key` in the context's database, next has a lock due
/// at its earliest deadline (or none), and makes sure the cycle comes by then when this call
/// decides (a replica's and a replay's deadlines are its master's to meet; `keep_armed` takes
/// them over after a promotion).
pub fn schedule(ctx: &Context, key: &[u8], project: &Project) {
    // An empty project is due at once: where this server decides, the cycle deletes its key
    // (one loaded from an RDB written before empty projects went, or left on a replica promoted
    // before its master's deletion came); elsewhere the master's deletion takes the entry.
    let next = project
        .locks()
        .next_deadline()
        .or_else(|| project.is_empty().then_some(0));
    let db = selected_db(ctx);
    let earlier = with_schedule(|s| {
        let slot = s.slots.slot(db);
        let tag = Tag::of(project);
        // An entry that comes no later than the key's earliest deadline stays: when it comes,
        // the cycle finds nothing due and files the key again at its real deadline. So a key
        // whose deadlines only move later (a lock handed from waiter to waiter, each with a new
        // lease, a renewal) costs the schedule nothing per change, and one visit of the cycle
        // per lease.
        match (s.deadline(tag, slot), next) {
            (Some(current), Some(next)) if current <= next => None,
            (Some(PARKED), None) => {
                // The cycle's visit found nothing left to schedule.
                if let Some((at, handle)) = tag.parts() {
                    if let Some(table) = s.table(at) {
                        table.remove(handle);
                    }
                }
                project.set_tag(Tag::NONE.0);
                None
            }
            (Some(_), None) | (None, None) => None,
            (Some(_), Some(deadline)) => {
                let (at, handle) = tag.parts()?;
                s.table(at)?.refile(handle, deadline);
                Some(deadline)
            }
            (None, Some(deadline)) => {
                let handle = s.table(slot)?.insert(deadline, key);
                project.set_tag(Tag::new(slot, handle).0);
                Some(deadline)
            }
        }
    });
    if let Some(deadline) = earlier {
        if decides(ctx) {
            wake_at(ctx, deadline);
        }
    }
}

/// `project` leaves its key (deleted, overwritten, renamed, moved, migrated): its entry goes. A
/// value that arrives under a new name is scheduled again by the event that announces it.
pub fn unscheduled(project: &Project) {
    let Some((slot, handle)) = Tag::of(project).parts() else {
        return;
    };
    project.set_tag(Tag::NONE.0);
    with_schedule(|s| {
        if let Some(table) = s.table(slot) {
            table.remove(handle);
        }
    });
}

/// A key the cycle visits, with its entry, parked meanwhile; see `visited`.
pub struct Visit {
    pub db: i32,
    pub key: Vec<u8>,
    slot: i32,
    handle: u32,
}

/// The key with the earliest deadline, if that deadline is not after `now`: its entry is parked
/// while the cycle visits it, and the change that reclaims it files it again.
pub fn pop_due(now: u64) -> Option<Visit> {
    with_schedule(|s| {
        let (slot, deadline) = s.earliest()?;
        if deadline > now {
            return None;
        }
        let table = s.table(slot)?;
        let handle = table.first_due(now)?;
        let key = table.name(handle)?.to_vec();
        table.refile(handle, PARKED);
        Some(Visit {
            db: s.slots.db(slot),
            key,
            slot,
            handle,
        })
    })
}

/// After the cycle's visit: an entry still parked belongs to no value (the key was not a
/// project, or its value holds another entry), and goes.
pub fn visited(visit: Visit) {
    with_schedule(|s| {
        if let Some(table) = s.table(visit.slot) {
            if table.deadline(visit.handle) == Some(PARKED)
                && table.name(visit.handle) == Some(visit.key.as_slice())
            {
                table.remove(visit.handle);
            }
        }
    });
}

/// Files a visited key's entry again at `at` without visiting it (its slot is being imported).
pub fn retry_at(visit: &Visit, at: u64) {
    with_schedule(|s| {
        if let Some(table) = s.table(visit.slot) {
            table.refile(visit.handle, at);
        }
    });
}

/// Whether an arena of the schedule has free slots at its tail to give back (`trim_some`).
pub fn has_slack() -> bool {
    with_schedule(|s| s.tables.iter().any(Timetable::has_slack))
}

/// Gives back up to `budget` free slots at the tails of the schedule's arenas; returns whether
/// some are left.
pub fn trim_some(budget: usize) -> bool {
    with_schedule(|s| {
        let mut left = budget;
        for table in &mut s.tables {
            left -= table.trim_some(left);
        }
        s.tables.iter().any(Timetable::has_slack)
    })
}

/// Keys in the schedule, for `INFO`.
pub fn len() -> usize {
    with_schedule(|s| s.tables.iter().map(Timetable::len).sum())
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
    with_schedule(|s| s.earliest().map(|(_, deadline)| deadline))
}

/// The bytes the schedule keeps for one key, whose name is `name_len` bytes long, for `MEMORY
/// USAGE` (`keytype`): its timetable entry ([`crate::timetable::entry_bytes`]).
/// `tests/memory.rs` holds `MEMORY USAGE` to `used_memory` on every server, so a change to the
/// timetable that forgets it fails there.
pub fn bytes_per_key(name_len: usize) -> usize {
    crate::timetable::entry_bytes(name_len)
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

/// The longest a timer is armed for ([`clock::MAX_TIMER_DELAY`], which says why). A later
/// deadline (a lease of hours, or one a hostile payload put beyond any clock) is met by a tick
/// that finds nothing due and arms the timer again.
const MAX_DELAY: Duration = clock::MAX_TIMER_DELAY;

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
