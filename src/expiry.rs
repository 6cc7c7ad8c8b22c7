//! The active expiry cycle: a timer that reclaims expired locks in keys nobody touches, and
//! works off the keys' background work (freeing the locks of a big owner that was released
//! or lapsed whole, whose locks stopped counting at once; see the engine's `big`).
//!
//! Level 5: imports `change`, `schedule`, `context`, `clock`, `contain`, `slot`. Started by `lib.rs`.
//!
//! It knows only "reclaim what is due in this key": `change::expire_until` does the reclaiming,
//! replicates it and reschedules the key. The timer runs on every server, but only a master
//! acts, and not while clients are paused or a failover is in progress (`AvoidReplicaTraffic`),
//! so a replica's locks change only through its master's effects. Likewise, the projects of a
//! slot that an atomic slot migration is importing change only through the source's effects:
//! their keys stay scheduled and are visited once the import is over.
//!
//! A tick works for at most `BUDGET` (1 ms), a few owners at a time, and replicates each step as
//! `EXPIRE now token...` naming the owners it reclaimed. A key with more due than a tick can
//! reclaim stays first in the schedule, and the next tick comes after `BUSY_TICK` instead of
//! `TICK`, so a million locks expiring together are reclaimed in about a second of ticks while
//! other clients are served between them. Background work runs on every server, replicas
//! included, since it changes nothing anyone sees; when there is some it keeps a quarter of each
//! tick.

use std::time::{Duration, Instant};

use redis_module::{raw, Context, ContextFlags, RedisString};

use crate::change::{expire_until, free_until};
use crate::contain::contained;
use crate::context::in_db;
use crate::{clock, schedule, slot};

const TICK: Duration = Duration::from_millis(100);
/// The next tick when the last one ran out of time with locks still due.
const BUSY_TICK: Duration = Duration::from_millis(5);
/// The time one tick may work. Checked between steps, so a tick overruns it by one step.
const BUDGET: Duration = Duration::from_millis(1);

pub fn start(ctx: &Context) {
    ctx.create_timer(TICK, tick, ());
}

fn tick(ctx: &Context, _: ()) {
    let more = contained("the expiry cycle", false, || {
        let started = Instant::now();
        // Background work, when there is some, keeps a quarter of the tick, so that a steady
        // expiry does not starve the freeing of a released owner's locks.
        let expiry_until = if schedule::has_pending() {
            started + BUDGET * 3 / 4
        } else {
            started + BUDGET
        };
        let due = reclaim_due(ctx, expiry_until);
        let background = free_pending(ctx, started + BUDGET);
        due || background
    });
    ctx.create_timer(if more { BUSY_TICK } else { TICK }, tick, ());
}

/// Works off the keys with background work (freeing buried owners' locks, see
/// `change::free_until`) until `until`, on any server: it changes nothing a client or a replica
/// can see. Returns whether work is left.
fn free_pending(ctx: &Context, until: Instant) -> bool {
    while Instant::now() < until {
        let Some((db, key)) = schedule::pop_pending() else {
            return false;
        };
        let more = in_db(ctx, db, || {
            let name = RedisString::create_from_slice(ctx.ctx, &key);
            free_until(ctx, &name, until)
        });
        if more {
            schedule::still_pending((db, key));
            return true;
        }
    }
    schedule::has_pending()
}

/// Reclaims due locks, key after key in deadline order, until `until`. Returns whether locks
/// were left due.
fn reclaim_due(ctx: &Context, until: Instant) -> bool {
    // SAFETY: takes no arguments and only reads server state.
    let avoid = unsafe { raw::RedisModule_AvoidReplicaTraffic.map_or(0, |f| f()) } != 0;
    if avoid || !ctx.get_flags().contains(ContextFlags::MASTER) {
        return false;
    }
    let now = clock::wall_ms();
    let mut importing = Vec::new();
    let mut more = false;
    while Instant::now() < until {
        let Some((db, key)) = schedule::pop_due(now) else {
            break;
        };
        if slot::IMPORTING.holds_key(&key) {
            importing.push((db, key));
            continue;
        }
        let done = in_db(ctx, db, || {
            let name = RedisString::create_from_slice(ctx.ctx, &key);
            expire_until(ctx, &name, now, until)
        });
        if !done {
            more = true;
            break;
        }
    }
    for (db, key) in importing {
        in_db(ctx, db, || schedule::schedule(ctx, &key, Some(now)));
    }
    more
}
