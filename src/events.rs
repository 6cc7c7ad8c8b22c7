//! Server and keyspace events the module listens to: values that arrive under a name without a
//! command (loaded, renamed, moved, copied, restored), evictions (`eviction` reports a lost
//! project), flushes, `SWAPDB`, role changes, and, through a command filter, the start of each
//! `MIGRATE`.
//!
//! Level 3: imports `keytype`, `schedule`, `registry`, `context`, `contain`, `errors`, `eviction`,
//! `propagation`. Subscribed by
//! `lib.rs`. Like the keyspace itself in Redis, it never calls into the waiting machinery: it
//! schedules expiry and queues signals in `registry`.

use std::os::raw::c_void;

use pathlock_core::Project;
use redis_module::{raw, Context, NotifyEvent, RedisString};

use crate::contain::contained;
use crate::context::selected_db;
use crate::keytype::PATHLOCK_TYPE;
use crate::{errors, eviction, propagation, registry, schedule};

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
    type Callback =
        extern "C" fn(*mut raw::RedisModuleCtx, raw::RedisModuleEvent, u64, *mut c_void);
    let events: [(u64, Callback); 3] = [
        (raw::REDISMODULE_EVENT_FLUSHDB, on_flush),
        (raw::REDISMODULE_EVENT_SWAPDB, on_swapdb),
        (
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            on_role_change,
        ),
    ];
    // SAFETY: subscribing with callbacks, and registering a filter, that live as long as the
    // module.
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            for (id, callback) in events {
                subscribe(
                    ctx.ctx,
                    raw::RedisModuleEvent { id, dataver: 1 },
                    Some(callback),
                );
            }
        }
        if let Some(register) = raw::RedisModule_RegisterCommandFilter {
            register(
                ctx.ctx,
                Some(on_command),
                raw::REDISMODULE_CMDFILTER_NOSELF as i32,
            );
        }
    }
}

/// Runs before every command the server executes. `MIGRATE` unlinks the keys it sends to
/// another server like a `DEL` would, so the registry is told which command runs: waiters of a
/// value that leaves by `MIGRATE` are answered that their project moved, never granted on the
/// name left behind. Every other command costs one comparison of its name.
extern "C" fn on_command(filter: *mut raw::RedisModuleCommandFilterCtx) {
    contained("the command filter", (), || {
        // SAFETY: the filter context and its arguments are valid for the duration of the call;
        // the bytes are copied out before it returns.
        let arg = |i: i32| unsafe {
            let (Some(get), Some(bytes)) = (
                raw::RedisModule_CommandFilterArgGet,
                raw::RedisModule_StringPtrLen,
            ) else {
                return None;
            };
            let string = get(filter, i);
            if string.is_null() {
                return None;
            }
            let mut len = 0;
            let ptr = bytes(string, &mut len);
            (!ptr.is_null()).then(|| std::slice::from_raw_parts(ptr.cast::<u8>(), len))
        };
        if arg(0).is_some_and(propagation::asks_for_stream) {
            propagation::heard();
        }
        let migrate = arg(0).is_some_and(|name| name.eq_ignore_ascii_case(b"MIGRATE"));
        let destination = migrate.then(|| {
            let host = errors::shown(arg(1).unwrap_or_default());
            let port = errors::shown(arg(2).unwrap_or_default());
            format!("{host}:{port}")
        });
        registry::command_starts(destination);
    });
}

/// The server turned replica (`REPLICAOF`, a failover): its waiters are answered `-UNBLOCKED`.
extern "C" fn on_role_change(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    // Either way, a replica may hear this server's stream from now on: its new replicas, or,
    // once promoted, the replicas of its old master that now follow it.
    propagation::heard();
    if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA {
        contained("the role change event", (), registry::demoted);
    }
}

/// `SWAPDB`: the waiters of both databases are answered that their project moved.
extern "C" fn on_swapdb(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut c_void,
) {
    if data.is_null() {
        return;
    }
    contained("the SWAPDB event", (), || {
        // SAFETY: Redis passes a RedisModuleSwapDbInfo with the swap-database event.
        let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
        registry::swapped(info.dbnum_first, info.dbnum_second);
    });
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
