//! The time every decision uses, in milliseconds.
//!
//! A command sees one time for its whole run: on Redis 7.2 and later the time Redis cached when
//! it started, and on 7.0 the time of its first reading (`context::remembered_ms`). Redis 7.0
//! refreshes its cache before each command even inside `MULTI`/`EXEC` and scripts, so a
//! transaction that granted a 1 ms lease could see it expire before its own next command.
//! Within a transaction or a script, the first pathlock command therefore takes a snapshot that
//! the rest of it reuses; the snapshot is forgotten before Redis next sleeps, so it never
//! outlives the event-loop iteration that ran the transaction.
//!
//! Level 1: imports `contain`, `context`. Used by every file that decides.

use std::os::raw::c_void;
use std::sync::Mutex;
use std::time::Duration;

use redis_module::{raw, Context, ContextFlags};

use crate::contain::contained;
use crate::context;

/// `(client id, ms)` of the transaction or script running now.
static SNAPSHOT: Mutex<Option<(u64, u64)>> = Mutex::new(None);

fn cached_ms() -> u64 {
    // SAFETY: both functions take no arguments and only read the server's clock.
    let micros = unsafe {
        match raw::RedisModule_CachedMicroseconds {
            Some(cached) => cached(),
            None => raw::RedisModule_Milliseconds.map_or(0, |ms| ms()) * 1000,
        }
    };
    u64::try_from(micros / 1000).unwrap_or(0)
}

pub fn now_ms(ctx: &Context) -> u64 {
    let now = context::remembered_ms(ctx, cached_ms);
    if !context::flags(ctx).intersects(ContextFlags::MULTI | ContextFlags::LUA) {
        return now;
    }
    // SAFETY: the context is the live one Redis gave this command.
    let client = unsafe { raw::RedisModule_GetClientId.map_or(0, |id| id(ctx.ctx)) };
    let mut snapshot = SNAPSHOT.lock().unwrap_or_else(|p| p.into_inner());
    match *snapshot {
        Some((owner, ms)) if owner == client => ms,
        _ => {
            *snapshot = Some((client, now));
            now
        }
    }
}

/// The longest delay any timer of the module is armed for; a later time is met by a timer that
/// fires early, finds nothing due and is armed again. Redis before 7.4 (7.0 and 7.2) multiplies
/// the period its module-timer handler asks for next by 1000 in an `int` (`processTimeEvents` in
/// `ae.c`, fixed by redis/redis#12474), so a timer more than 2,147,483 ms (35.8 minutes) ahead
/// schedules the handler in the past whenever it runs for another timer: the event loop then
/// polls with a zero timeout, one core busy, until that timer is less than 35.8 minutes away.
/// A lease of an hour did that after any other timer of the module fired (a deletion's signal
/// worker, the expiry of a shorter lease). Thirty minutes keeps clear of the limit.
pub const MAX_TIMER_DELAY: Duration = Duration::from_secs(30 * 60);

/// Real time, for the expiry timer, which runs outside any command.
pub fn wall_ms() -> u64 {
    // SAFETY: takes no arguments and only reads the clock.
    let ms = unsafe { raw::RedisModule_Milliseconds.map_or(0, |f| f()) };
    u64::try_from(ms).unwrap_or(0)
}

/// The event loop is about to sleep: the time snapshot of a transaction or a script is
/// forgotten.
extern "C" fn on_event_loop(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_EVENTLOOP_BEFORE_SLEEP {
        contained("the before-sleep event", (), || {
            *SNAPSHOT.lock().unwrap_or_else(|p| p.into_inner()) = None;
        });
    }
}

pub fn subscribe(ctx: &Context) {
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_EVENTLOOP,
        dataver: 1,
    };
    // SAFETY: subscribing with a callback that lives as long as the module.
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            subscribe(ctx.ctx, event, Some(on_event_loop));
        }
    }
}
