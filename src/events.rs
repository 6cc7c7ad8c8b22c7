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
use crate::context::{look_flags, selected_db};
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
        let opened = ctx.open_key_with_flags(&name, look_flags());
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

/// Runs when a command arrives (before it executes, or is queued by `MULTI`). `MIGRATE` unlinks
/// the keys it sends to another server like a `DEL` would, so the registry is told which command
/// runs and which keys it names: waiters of a value that leaves by `MIGRATE` are answered that
/// their project moved, never granted on the name left behind (see `registry` for a `MIGRATE`
/// that `EXEC` runs). Every other command costs one comparison of its name.
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
        // Every command of the server passes here, so its name is read once, and only a
        // `MIGRATE` reads more.
        let name = arg(0).unwrap_or_default();
        if !name.eq_ignore_ascii_case(b"MIGRATE") {
            if propagation::asks_for_stream(name) {
                propagation::heard();
            }
            registry::command_starts(None);
            return;
        }
        let host = errors::shown(arg(1).unwrap_or_default());
        let port = errors::shown(arg(2).unwrap_or_default());
        // SAFETY: as above.
        let count = unsafe { raw::RedisModule_CommandFilterArgsCount.map_or(0, |f| f(filter)) };
        let args: Vec<&[u8]> = (0..count).map_while(arg).collect();
        let migration = Some(registry::Migration {
            destination: format!("{host}:{port}"),
            keys: migrated_keys(&args),
        });
        registry::command_starts(migration);
    });
}

/// The keys a `MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH password] [AUTH2
/// username password] [KEYS key ...]` names, given its arguments from the command name on.
fn migrated_keys(args: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = args
        .get(3)
        .filter(|key| !key.is_empty())
        .map(|key| key.to_vec())
        .into_iter()
        .collect();
    let mut at = 6;
    while let Some(option) = args.get(at) {
        if option.eq_ignore_ascii_case(b"KEYS") {
            keys.extend(args[at + 1..].iter().map(|key| key.to_vec()));
            break;
        }
        at += if option.eq_ignore_ascii_case(b"AUTH") {
            2
        } else if option.eq_ignore_ascii_case(b"AUTH2") {
            3
        } else {
            1
        };
    }
    keys
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

#[cfg(test)]
mod tests {
    use super::migrated_keys;

    fn keys(args: &[&str]) -> Vec<String> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        migrated_keys(&args)
            .into_iter()
            .map(|k| String::from_utf8(k).expect("utf-8"))
            .collect()
    }

    #[test]
    fn a_migrate_names_its_key_or_the_keys_after_keys_and_not_its_options() {
        let one = ["MIGRATE", "h", "6379", "k", "0", "5000"];
        assert_eq!(keys(&one), ["k"]);
        let with_options = ["MIGRATE", "h", "6379", "k", "0", "5000", "COPY", "REPLACE"];
        assert_eq!(keys(&with_options), ["k"]);
        // A password may be the word KEYS; it is not where the keys start.
        let many = [
            "MIGRATE", "h", "6379", "", "0", "5000", "AUTH", "KEYS", "AUTH2", "u", "KEYS", "KEYS",
            "a", "b",
        ];
        assert_eq!(keys(&many), ["a", "b"]);
        assert!(keys(&["MIGRATE", "h"]).is_empty());
    }
}
