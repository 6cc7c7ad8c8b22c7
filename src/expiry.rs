//! The active expiry cycle: a timer that reclaims expired locks in keys nobody touches.
//!
//! Level 5: imports `change`, `schedule`, `context`, `clock`, `contain`. Started by `lib.rs`.
//!
//! It knows only "reclaim what is due in this key": `change` does the reclaiming, replicates it
//! and reschedules the key. The timer runs on every server, but only a master acts, and not
//! while clients are paused or a failover is in progress (`AvoidReplicaTraffic`), so a replica's
//! locks change only through its master's effects.

use std::time::Duration;

use redis_module::{raw, Context, ContextFlags, RedisString};

use crate::change::change;
use crate::contain::contained;
use crate::context::in_db;
use crate::{clock, schedule};

const TICK: Duration = Duration::from_millis(100);
/// The most keys one tick reclaims; the rest wait for the next tick, so a mass expiry never
/// stalls the server.
const KEYS_PER_TICK: usize = 1000;

pub fn start(ctx: &Context) {
    ctx.create_timer(TICK, tick, ());
}

fn tick(ctx: &Context, _: ()) {
    contained("the expiry cycle", (), || reclaim_due(ctx));
    ctx.create_timer(TICK, tick, ());
}

fn reclaim_due(ctx: &Context) {
    // SAFETY: takes no arguments and only reads server state.
    let avoid = unsafe { raw::RedisModule_AvoidReplicaTraffic.map_or(0, |f| f()) } != 0;
    if avoid || !ctx.get_flags().contains(ContextFlags::MASTER) {
        return;
    }
    for (db, key) in schedule::take_due(clock::wall_ms(), KEYS_PER_TICK) {
        in_db(ctx, db, || {
            let name = RedisString::create_from_slice(ctx.ctx, &key);
            // The change reclaims what is due, replicates it, and reschedules the key.
            let _ = change(ctx, &name, false, |_| ());
        });
    }
}
