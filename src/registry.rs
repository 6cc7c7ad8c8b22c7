//! The registry of waiting clients and the queue of signals about them.
//!
//! Level 1: imports `stats`, `slot`. Written by `waits` (a client starts waiting), `blocked` (a client
//! gave up), `keytype` (a value left its key) and `events` (a flush); worked off by `waits`;
//! read by `WAITERS` (how long each waiter has waited and has left).
//!
//! As in Redis's own `db.c`, code that learns that waiters are affected never calls into the
//! waiting machinery: it only queues a signal here. The queue is worked off from the top, by the
//! worker that `lib.rs` registers at load time (`waits::work_off_signals`), from a zero-delay
//! timer, where keys can be opened and effects replicated. The signals:
//!
//! * **cancelled**: a waiter disconnected or was `CLIENT UNBLOCK`ed; it leaves its key's queue,
//!   which may let later waiters through, and a change to that key purges it first, so it is
//!   never granted;
//! * **resubmit**: the waiters' key was deleted, overwritten or flushed; they are queued again on
//!   the key name they asked for, in their original order;
//! * **unlinked**: the value of the waiters' key left the keyspace; the worker tells a `DEL` (the
//!   key is gone: they are queued again on their key name, where the next acquire finds no
//!   locks) from an overwrite (another value holds the name: they are answered an error);
//! * **moved**: a value holding waiters arrived under a new name (`RENAME`, `MOVE`); the waiters
//!   that asked for another key are taken out of it and answered that the project moved;
//! * **moved away**: waiters to answer that their project left: `MIGRATE` took it to another
//!   server (known from the command filter in `events`), `SWAPDB` swapped its database, or an
//!   atomic slot migration handed its slot to another node (`slots_left`; the server's trim of
//!   the slot's keys that follows is a move too, never a `DEL`).
//!
//! While the server pauses replication (`CLIENT PAUSE WRITE`, a manual failover, the last step of
//! an atomic slot migration), nothing the module does outside a command may change a project:
//! what it would propagate then is lost to a failover or to the slot's new owner, and the
//! server refuses it. The worker waits for the pause to end (`retry_later`), and a waiter whose
//! time runs out meanwhile is answered at once, its leaving the queue put off like a
//! disconnection's (`cancel_later`).
//!
//! Redis runs command filters when a command arrives (from a client, a script or a module's
//! call), not when `EXEC` runs what `MULTI` queued. So the filter's word alone would take a
//! `MIGRATE` run by `EXEC` for a `DEL`, and grant its waiters on the name left behind. What every
//! `MIGRATE` does, however it runs, is serialize each value (`rdb_save`) and then unlink it in
//! the same command, which no `DEL` does: a value with waiters that was serialized since the
//! last command arrived and is now unlinked left by `MIGRATE`, for the destination that the
//! filter saw a `MIGRATE` name for its key when it was queued. The one other way to do both,
//! `DUMP` and then `DEL` of one key in one transaction, is answered as a move too (to an
//! unknown destination): an error rather than a grant, the safe side.
//!
//! A project's locks never disappear when its value moves, so its waiters are never granted on
//! the name left behind.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use pathlock_core::{Path, Project, Waiter};
use redis_module::{raw, Context};

use crate::{slot, stats};

/// What the registry knows of one waiter: where it waits, not what for. Its request is kept once,
/// in its project's queue; a value that leaves its key hands its waiters' requests over with the
/// signal (`unlinked`, `requeue`), for them to be queued again elsewhere.
pub struct Entry {
    pub client: usize,
    pub db: i32,
    pub key: Box<[u8]>,
    /// When its wait times out, on the clock of [`monotonic_us`].
    pub deadline: u64,
    /// When it started waiting, on the same clock, for `WAITERS`.
    pub since: u64,
}

/// Why a waiter's project left the key name it waited on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Away {
    Renamed,
    Replaced,
    Swapped,
    /// To the `host:port` that `MIGRATE` named, when known.
    Migrated(Option<String>),
    /// This server turned replica.
    Demoted,
    /// An atomic slot migration handed the project's slot to another node.
    SlotMoved,
}

/// The signals queued since the worker last ran.
#[derive(Default)]
pub struct Signals {
    pub cancelled: Vec<(i32, Vec<u8>, u64)>,
    pub resubmit: Vec<(u64, Waiter)>,
    pub unlinked: Vec<(u64, Waiter)>,
    pub moved: Vec<(i32, Vec<u8>)>,
    pub moved_away: Vec<(u64, Away)>,
}

/// Ordered maps rather than hash tables: a hash table that doubles stalls the command that makes
/// it grow, over a millisecond at 7,000 waiters.
#[derive(Default)]
struct Registry {
    next_id: u64,
    entries: BTreeMap<u64, Entry>,
    by_client: BTreeMap<usize, u64>,
    /// `(deadline, id)` of every waiter: one timer, set for the earliest, times them all out.
    /// A per-waiter Redis timer cost a timer created at every wait and one stopped at every
    /// grant, the larger part of what the registry cost a hand-over.
    deadlines: BTreeSet<(u64, u64)>,
    /// The timeout timer and the deadline it was set for, when one is set.
    timeout_timer: Option<(raw::RedisModuleTimerID, u64)>,
    signals: Signals,
    timer_armed: bool,
    /// The destination of the `MIGRATE` being executed, if one is.
    migrating: Option<String>,
    /// The keys that the last `MIGRATE`s the filter saw name, with their destinations, newest
    /// last; at most `REMEMBERED_MIGRATIONS`.
    migrations: VecDeque<(Vec<u8>, String)>,
    /// The values with waiters that were serialized since the last command arrived.
    serialized: Vec<usize>,
}

/// How many keys of queued `MIGRATE`s are remembered: a transaction that never runs leaves its
/// keys here until newer ones push them out.
const REMEMBERED_MIGRATIONS: usize = 1024;

/// A `MIGRATE` as the command filter sees it arrive.
pub struct Migration {
    /// `host:port`, escaped for an error message.
    pub destination: String,
    pub keys: Vec<Vec<u8>>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn with_registry<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut guard = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    let registry = guard.get_or_insert_with(Registry::default);
    let result = f(registry);
    // Whatever `f` did to the queue of cancellations, the flag says so before the lock goes.
    ANY_CANCELLED.store(!registry.signals.cancelled.is_empty(), Ordering::Release);
    result
}

/// Whether any waiter that gave up is still queued for its key's next change: every change
/// asks, and nearly always nobody did, so the answer is kept beside the registry's lock.
static ANY_CANCELLED: AtomicBool = AtomicBool::new(false);

/// Whether a change must look for waiters that gave up ([`take_cancelled`]) before it runs.
pub fn any_cancelled() -> bool {
    ANY_CANCELLED.load(Ordering::Acquire)
}

/// Records a waiter that times out at `deadline` ([`monotonic_us`]) and returns its id. Ids
/// increase, so they order waiters by arrival.
pub fn register(client: usize, db: i32, key: &[u8], deadline: u64) -> u64 {
    let id = with_registry(|r| {
        r.next_id += 1;
        let id = r.next_id;
        r.by_client.insert(client, id);
        r.deadlines.insert((deadline, id));
        r.entries.insert(
            id,
            Entry {
                client,
                db,
                key: Box::from(key),
                deadline,
                since: monotonic_us(),
            },
        );
        id
    });
    stats::track(&stats::CLIENTS_WAITING, 0, 1);
    id
}

/// Microseconds on a clock that never goes back, for waiters' deadlines: a wait of 5 s lasts
/// 5 s whatever happens to the wall clock meanwhile, and never ends early by a rounding.
pub fn monotonic_us() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// The earliest deadline of a waiter, and the timeout timer with the deadline it is set for.
pub fn timeouts() -> (Option<u64>, Option<(raw::RedisModuleTimerID, u64)>) {
    with_registry(|r| (r.deadlines.first().map(|(d, _)| *d), r.timeout_timer))
}

/// Records the timeout timer that is set now, if any.
pub fn set_timeout_timer(timer: Option<(raw::RedisModuleTimerID, u64)>) {
    with_registry(|r| r.timeout_timer = timer);
}

/// Up to `limit` of the waiters whose deadline is not after `now`, earliest first; they stay
/// registered until the caller times them out.
pub fn due(now: u64, limit: usize) -> Vec<u64> {
    with_registry(|r| {
        r.deadlines
            .iter()
            .take_while(|(deadline, _)| *deadline <= now)
            .take(limit)
            .map(|(_, id)| *id)
            .collect()
    })
}

/// When each of these waiters started waiting and when its wait times out ([`monotonic_us`]),
/// for `WAITERS`; `None` for one that is waiting no more (it gave up, and its key's queue has
/// not heard yet).
pub fn wait_times(ids: &[u64]) -> Vec<Option<(u64, u64)>> {
    with_registry(|r| {
        ids.iter()
            .map(|id| r.entries.get(id).map(|e| (e.since, e.deadline)))
            .collect()
    })
}

/// Takes a waiter out of the registry (granted, timed out or gone); `None` when it already was.
pub fn forget(id: u64) -> Option<Entry> {
    with_registry(|r| forget_in(r, id))
}

fn forget_in(registry: &mut Registry, id: u64) -> Option<Entry> {
    let entry = registry.entries.remove(&id)?;
    registry.by_client.remove(&entry.client);
    registry.deadlines.remove(&(entry.deadline, id));
    stats::track(&stats::CLIENTS_WAITING, 1, 0);
    Some(entry)
}

/// The client stopped waiting without a grant: forget it and signal that it left its queue.
/// Returns whether it was waiting here.
pub fn give_up(client: usize) -> bool {
    signal(|r| {
        let Some(id) = r.by_client.get(&client).copied() else {
            return false;
        };
        let Some(entry) = forget_in(r, id) else {
            return false;
        };
        r.signals
            .cancelled
            .push((entry.db, entry.key.into_vec(), id));
        true
    })
}

/// The waiters that gave up on key `key` of database `db` and are still in its queue; the
/// caller removes them from the queue before changing the key.
pub fn take_cancelled(db: i32, key: &[u8]) -> Vec<u64> {
    with_registry(|r| {
        if r.signals.cancelled.is_empty() {
            return Vec::new();
        }
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut r.signals.cancelled)
            .into_iter()
            .partition(|(d, k, _)| *d == db && k == key);
        r.signals.cancelled = rest;
        mine.into_iter().map(|(_, _, id)| id).collect()
    })
}

/// Signals that `value`, the value of `key` with these waiters (and a copy of their requests,
/// for those that start over on the key name), left its key: deleted, overwritten, renamed
/// away, or migrated when a `MIGRATE` is executing or the value was serialized in this command
/// (see the top of this file).
pub fn unlinked(waiters: Vec<(u64, Waiter)>, value: usize, key: &[u8]) {
    if waiters.is_empty() {
        return;
    }
    if slot::LEFT.holds_key(key) {
        // The server is trimming a slot it handed over: the project went with its slot.
        signal(|r| {
            r.signals
                .moved_away
                .extend(waiters.iter().map(|(id, _)| (*id, Away::SlotMoved)))
        });
        return;
    }
    signal(|r| {
        let serialized = match r.serialized.iter().position(|v| *v == value) {
            Some(at) => {
                r.serialized.swap_remove(at);
                true
            }
            None => false,
        };
        let remembered = if r.migrating.is_some() || serialized {
            take_migration(r, key)
        } else {
            None
        };
        let migrated = match r.migrating.clone() {
            Some(to) => Some(Some(to)),
            None if serialized => Some(remembered),
            None => None,
        };
        match migrated {
            Some(to) => r.signals.moved_away.extend(
                waiters
                    .iter()
                    .map(|(id, _)| (*id, Away::Migrated(to.clone()))),
            ),
            None => r.signals.unlinked.extend(waiters),
        }
    });
}

/// The destination that the newest `MIGRATE` the filter saw naming `key` gave, forgotten as it
/// is used, so that a later transaction does not find it.
fn take_migration(registry: &mut Registry, key: &[u8]) -> Option<String> {
    let at = registry.migrations.iter().rposition(|(k, _)| k == key)?;
    registry.migrations.remove(at).map(|(_, to)| to)
}

/// Records that `value`, which has waiters, was serialized in this process (`DUMP`, `MIGRATE`,
/// `SAVE`); forgotten when the next command arrives.
pub fn serialized(value: usize) {
    SERIALIZED.store(true, Ordering::Relaxed);
    with_registry(|r| r.serialized.push(value));
}

/// Signals that these waiters' key was flushed: they are to be queued again on their key.
pub fn requeue(waiters: Vec<(u64, Waiter)>) {
    if !waiters.is_empty() {
        signal(|r| r.signals.resubmit.extend(waiters));
    }
}

/// Whether `migrating` or `serialized` may be set, so that the command filter, which runs
/// before every command of the server, takes no lock for the others.
static MIGRATING: AtomicBool = AtomicBool::new(false);
static SERIALIZED: AtomicBool = AtomicBool::new(false);

/// A command arrives: a `MIGRATE` (`Some`), to execute now or when its transaction does, or
/// another one.
pub fn command_starts(migration: Option<Migration>) {
    if migration.is_none()
        && !MIGRATING.load(Ordering::Relaxed)
        && !SERIALIZED.load(Ordering::Relaxed)
    {
        return;
    }
    MIGRATING.store(migration.is_some(), Ordering::Relaxed);
    SERIALIZED.store(false, Ordering::Relaxed);
    with_registry(|r| {
        r.serialized.clear();
        r.migrating = migration.map(|m| {
            for key in m.keys {
                if r.migrations.len() == REMEMBERED_MIGRATIONS {
                    r.migrations.pop_front();
                }
                r.migrations.push_back((key, m.destination.clone()));
            }
            m.destination
        });
    });
}

/// Signals that this server turned replica: every waiter is answered as Redis answers its own
/// blocked clients then, and the queues they were in are emptied without granting anyone.
pub fn demoted() {
    signal(|r| {
        let mut ids: Vec<u64> = r.entries.keys().copied().collect();
        ids.sort_unstable();
        r.signals
            .moved_away
            .extend(ids.into_iter().map(|id| (id, Away::Demoted)));
    });
}

/// Signals that the slots in `slot::LEFT` were handed to another node: every waiter of a key
/// in them is answered with a redirect, and nobody is granted on this node.
pub fn slots_left() {
    signal(|r| {
        let mut ids: Vec<u64> = r
            .entries
            .iter()
            .filter(|(_, e)| slot::LEFT.holds_key(&e.key))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        r.signals
            .moved_away
            .extend(ids.into_iter().map(|id| (id, Away::SlotMoved)));
    });
}

/// Queues the cancellation of a waiter that was already answered and forgotten, for its key's
/// next change or the worker.
pub fn cancel_later(db: i32, key: Vec<u8>, id: u64) {
    signal(|r| r.signals.cancelled.push((db, key, id)));
}

/// Runs the worker again after `delay`, leaving the signals queued: called by the worker when it
/// may not change projects yet. The worker stays armed, so no other timer is set meanwhile.
pub fn retry_later(delay: Duration) {
    let ctx = MODULE_CTX.load(Ordering::Relaxed);
    if let (false, Some(&worker)) = (ctx.is_null(), WORKER.get()) {
        with_registry(|r| r.timer_armed = true);
        Context::new(ctx).create_timer(delay, move |ctx: &Context, ()| worker(ctx), ());
    }
}

/// Signals `SWAPDB first second`: every waiter of either database is answered that its project
/// moved, and leaves the queue of its project, which now lives in the other database.
pub fn swapped(first: i32, second: i32) {
    signal(|r| {
        let mut ids: Vec<(u64, i32, Vec<u8>)> = r
            .entries
            .iter()
            .filter(|(_, e)| e.db == first || e.db == second)
            .map(|(id, e)| (*id, e.db, e.key.to_vec()))
            .collect();
        ids.sort_unstable();
        for (id, db, key) in ids {
            let other = if db == first { second } else { first };
            r.signals.moved_away.push((id, Away::Swapped));
            r.signals.cancelled.push((other, key, id));
        }
    });
}

/// A copy of the requests waiting in `project`, oldest first, with their ids: what a value that
/// leaves its key (`unlinked`) or is flushed (`requeue`) hands over to the signal.
pub fn requests_of(project: &Project) -> Vec<(u64, Waiter)> {
    project
        .waiters_under(&Path::root())
        .into_iter()
        .map(|(id, waiter)| (id, waiter.clone()))
        .collect()
}

/// The keys that waiters of database `db` (of all databases when `None`) wait on, each once: a
/// flush is about to empty them, and their waiters' requests are taken from them first.
pub fn keys_waited_on(db: Option<i32>) -> Vec<(i32, Box<[u8]>)> {
    let mut keys: Vec<(i32, Box<[u8]>)> = with_registry(|r| {
        r.entries
            .values()
            .filter(|e| db.is_none_or(|db| e.db == db))
            .map(|e| (e.db, e.key.clone()))
            .collect()
    });
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Signals that a value holding waiters arrived under key `key` of database `db`.
pub fn value_moved(db: i32, key: &[u8]) {
    signal(|r| r.signals.moved.push((db, key.to_vec())));
}

/// Takes every queued signal, for the worker; signals raised while it works arm it again.
pub fn take_signals() -> Signals {
    with_registry(|r| {
        r.timer_armed = false;
        std::mem::take(&mut r.signals)
    })
}

/// The database and key a waiter waits on, when it is still waiting.
pub fn place(id: u64) -> Option<(i32, Box<[u8]>)> {
    with_registry(|r| r.entries.get(&id).map(|e| (e.db, e.key.clone())))
}

/// Of `ids`, the waiters that did not ask for key `key` of database `db`.
pub fn strays(db: i32, key: &[u8], ids: impl Iterator<Item = u64>) -> Vec<u64> {
    with_registry(|r| {
        ids.filter(|id| {
            r.entries
                .get(id)
                .is_none_or(|e| e.db != db || *e.key != *key)
        })
        .collect()
    })
}

/// The worker, and the module's own context it runs with: timers need one, and signals are
/// raised outside any command (unlink, flush, disconnect).
static WORKER: OnceLock<fn(&Context)> = OnceLock::new();
static MODULE_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Registers the function that works the signals off; called once, at load.
pub fn set_worker(ctx: &Context, worker: fn(&Context)) {
    // SAFETY: a detached context lives as long as the module and is only used on the main thread.
    let detached = unsafe {
        raw::RedisModule_GetDetachedThreadSafeContext.map_or(std::ptr::null_mut(), |f| f(ctx.ctx))
    };
    MODULE_CTX.store(detached, Ordering::Relaxed);
    let _ = WORKER.set(worker);
}

/// Queues a signal and arms the worker's timer unless it already is.
fn signal<R>(queue: impl FnOnce(&mut Registry) -> R) -> R {
    let (result, armed) =
        with_registry(|r| (queue(r), std::mem::replace(&mut r.timer_armed, true)));
    if !armed {
        let ctx = MODULE_CTX.load(Ordering::Relaxed);
        if let (false, Some(&worker)) = (ctx.is_null(), WORKER.get()) {
            Context::new(ctx).create_timer(
                Duration::ZERO,
                move |ctx: &Context, ()| worker(ctx),
                (),
            );
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every change skips the look for cancelled waiters while the flag is down, so the flag
    /// must be up from the moment a waiter gives up until each of its keys has taken it.
    #[test]
    fn the_cancelled_flag_follows_the_queue_of_waiters_that_gave_up() {
        let (first, second) = (usize::MAX - 1, usize::MAX - 2);
        let a = register(first, 3, b"flag:a", u64::MAX);
        let b = register(second, 3, b"flag:b\x00\xc4\x80", u64::MAX);
        assert!(!any_cancelled(), "waiting is not giving up");
        assert!(give_up(first) && give_up(second));
        assert!(any_cancelled());
        assert_eq!(take_cancelled(3, b"flag:other"), Vec::<u64>::new());
        assert_eq!(take_cancelled(4, b"flag:a"), Vec::<u64>::new());
        assert!(
            any_cancelled(),
            "another key's or database's change takes nothing"
        );
        assert_eq!(take_cancelled(3, b"flag:a"), vec![a]);
        assert!(any_cancelled(), "the second key has not taken its own yet");
        assert_eq!(take_cancelled(3, b"flag:b\x00\xc4\x80"), vec![b]);
        assert!(!any_cancelled());
        assert!(!give_up(first), "a waiter gives up once");
        assert!(!any_cancelled());
    }
}
