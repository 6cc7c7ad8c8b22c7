//! Server and keyspace events the module listens to: values that arrive under a name without a
//! command (loaded, renamed, moved, copied, restored), evictions (`eviction` reports a lost
//! project), and flushes.
//!
//! Level 3: imports `keytype`, `schedule`, `registry`, `context`, `contain`, `eviction`. Subscribed by
//! `lib.rs`. Like the keyspace itself in Redis, it never calls into the waiting machinery: it
//! schedules expiry and queues signals in `registry`.

use std::os::raw::c_void;

use pathlock_core::Project;
use redis_module::{raw, Context, NotifyEvent, RedisString};

use crate::contain::contained;
use crate::context::selected_db;
use crate::keytype::PATHLOCK_TYPE;
use crate::{eviction, registry, schedule};

/// Keyspace events that bring a path-lock key under a new name or from outside: it is scheduled
/// for expiry, and waiters that came with it under a new name are signalled.
pub fn on_keyspace_event(ctx: &Context, _kind: NotifyEvent, event: &str, key: &[u8]) {
    if event == "evicted" {
        contained("the evicted event", (), || eviction::evicted(ctx, key));
        return;
    }
    if !matches!(
        event,
        "loaded" | "rename_to" | "move_to" | "copy_to" | "restore"
    ) {
        return;
    }
    contained("a keyspace event", (), || {
        let name = RedisString::create_from_slice(ctx.ctx, key);
        let opened = ctx.open_key(&name);
        if let Ok(Some(project)) = opened.get_value::<Project>(&PATHLOCK_TYPE) {
            schedule::schedule(ctx, key, project.locks().next_deadline());
            if project.waiting() > 0 && matches!(event, "rename_to" | "move_to") {
                registry::value_moved(selected_db(ctx), key);
            }
        }
    });
}

pub fn subscribe(ctx: &Context) {
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_FLUSHDB,
        dataver: 1,
    };
    // SAFETY: subscribing with a callback that lives as long as the module.
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            subscribe(ctx.ctx, event, Some(on_flush));
        }
    }
}

/// A flush is starting: every waiter of the flushed databases is queued again on its key name.
extern "C" fn on_flush(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_START || data.is_null() {
        return;
    }
    contained("the flush event", (), || {
        // SAFETY: Redis passes a RedisModuleFlushInfo with the flush-database event.
        let info = unsafe { &*data.cast::<raw::RedisModuleFlushInfo>() };
        registry::requeue_db(if info.dbnum < 0 {
            None
        } else {
            Some(info.dbnum)
        });
    });
}
