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

use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;
use std::time::Duration;

use pathlock_core::Project;
use redis_module::{raw, Context, ContextFlags, NotifyEvent, RedisString};

use crate::keytype::PATHLOCK_TYPE;
use crate::{clock, project, waits};

const TICK: Duration = Duration::from_millis(100);
/// The most keys one tick reclaims; the rest wait for the next tick, so a mass expiry never
/// stalls the server.
const KEYS_PER_TICK: usize = 1000;

type KeyId = (i32, Vec<u8>);

#[derive(Default)]
struct Schedule {
    due: BTreeSet<(u64, KeyId)>,
    /// Per database, each key's entry in `due`; looked up by the key's bytes so that the common
    /// case (the earliest deadline did not change) allocates nothing.
    by_key: HashMap<i32, HashMap<Vec<u8>, u64>>,
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
        let current = s.by_key.get(&db).and_then(|keys| keys.get(key)).copied();
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
    let _ = catch_unwind(AssertUnwindSafe(|| reclaim_due(ctx)));
    ctx.create_timer(TICK, tick, ());
}

fn reclaim_due(ctx: &Context) {
    // SAFETY: takes no arguments and only reads server state.
    let avoid = unsafe { raw::RedisModule_AvoidReplicaTraffic.map_or(0, |f| f()) } != 0;
    if avoid || !ctx.get_flags().contains(ContextFlags::MASTER) {
        return;
    }
    let now = clock::wall_ms();
    let due: Vec<KeyId> = with_schedule(|s| {
        let mut due = Vec::new();
        while due.len() < KEYS_PER_TICK {
            match s.due.first() {
                Some((deadline, _)) if *deadline <= now => {
                    if let Some((_, id)) = s.due.pop_first() {
                        if let Some(keys) = s.by_key.get_mut(&id.0) {
                            keys.remove(&id.1);
                        }
                        due.push(id);
                    }
                }
                _ => break,
            }
        }
        due
    });
    let original_db = selected_db(ctx);
    for (db, key) in due {
        // SAFETY: selecting a database on the timer's own context.
        unsafe {
            if let Some(select) = raw::RedisModule_SelectDb {
                select(ctx.ctx, db);
            }
        }
        let name = RedisString::create_from_slice(ctx.ctx, &key);
        // The change reclaims what is due, replicates it, and reschedules the key.
        let _ = project::change(ctx, &name, false, |_| ());
    }
    // SAFETY: as above.
    unsafe {
        if let Some(select) = raw::RedisModule_SelectDb {
            select(ctx.ctx, original_db);
        }
    }
}
