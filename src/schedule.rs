//! The expiry schedule: when each project key next has a lock due, ordered by that deadline, so
//! the expiry cycle visits only keys with something due.
//!
//! Level 1: imports `context`. Written by `change` after every change and by `events` for keys
//! that arrive without a command; read by `expiry`'s cycle. It also keeps the keys with
//! background work (a released big owner's locks to free), which the same cycle works off on
//! every server.
//!
//! An entry can go stale (the key was deleted, or `SWAPDB` moved it), and it is left early on
//! purpose when a key's earliest deadline moves later; the cycle finds no path-lock key, or
//! nothing due, under that name and drops or reschedules the entry.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use redis_module::Context;

use crate::context::selected_db;

/// A key: its database and its name.
pub type KeyId = (i32, Vec<u8>);

#[derive(Default)]
struct Schedule {
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

static SCHEDULE: Mutex<Option<Schedule>> = Mutex::new(None);

fn with_schedule<R>(f: impl FnOnce(&mut Schedule) -> R) -> R {
    let mut guard = SCHEDULE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(Schedule::default))
}

/// Records that `key`, in the context's database, next has a lock due at `next` (or none).
pub fn schedule(ctx: &Context, key: &[u8], next: Option<u64>) {
    let db = selected_db(ctx);
    with_schedule(|s| {
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
                return;
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
                deadline
            }
        };
        remember(s, db, key, Some(entry));
    });
}

/// Keeps `key`'s entry as the last one scheduled, copying the key's name only when another key
/// was the last.
fn remember(s: &mut Schedule, db: i32, key: &[u8], entry: Option<u64>) {
    match &mut s.last {
        Some((d, k, e)) if *d == db && k.as_slice() == key => *e = entry,
        _ => s.last = Some((db, key.to_vec(), entry)),
    }
}

/// Records that `key`, in the context's database, has background work.
pub fn pending(ctx: &Context, key: &[u8]) {
    let db = selected_db(ctx);
    with_schedule(|s| {
        if !s.pending.iter().any(|(d, k)| *d == db && k == key) {
            s.pending.insert((db, key.to_vec()));
        }
    });
}

/// Takes a key with background work out of the set; whoever works on it records it again with
/// `still_pending` if work is left.
pub fn pop_pending() -> Option<KeyId> {
    with_schedule(|s| s.pending.pop_first())
}

pub fn still_pending(id: KeyId) {
    with_schedule(|s| s.pending.insert(id));
}

pub fn has_pending() -> bool {
    with_schedule(|s| !s.pending.is_empty())
}

pub fn pending_count() -> usize {
    with_schedule(|s| s.pending.len())
}

/// Takes out of the schedule the key with the earliest deadline, if that deadline is not after
/// `now`. The change that reclaims it schedules it again.
pub fn pop_due(now: u64) -> Option<KeyId> {
    with_schedule(|s| {
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
    })
}
