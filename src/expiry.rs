//! The active expiry cycle: a timer that reclaims expired locks in keys nobody touches.
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
//! other clients are served between them.

use std::time::{Duration, Instant};

use redis_module::{raw, Context, ContextFlags, RedisString};

use crate::change::expire_until;
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
    let more = contained("the expiry cycle", false, || reclaim_due(ctx));
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
    let mut importing = Vec::new();
    let mut more = false;
    while started.elapsed() < BUDGET {
        let Some((db, key)) = schedule::pop_due(now) else {
            break;
        };
        if slot::IMPORTING.holds_key(&key) {
            importing.push((db, key));
            continue;
        }
        let done = in_db(ctx, db, || {
            let name = RedisString::create_from_slice(ctx.ctx, &key);
            expire_until(ctx, &name, now, started + BUDGET)
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
