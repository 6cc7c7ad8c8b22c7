//! Server and keyspace events the module listens to: values that arrive under a name without a
//! command (loaded, renamed, moved, copied, restored), evictions (`eviction` reports a lost
//! project), flushes, `SWAPDB`, role changes, atomic slot migrations, and, through a command
//! filter, the start of each `MIGRATE`.
//!
//! **Atomic slot migration.** Valkey 9's `CLUSTER MIGRATESLOTS` moves whole slots: the source
//! forks and sends a snapshot of the slots in AOF form (the type's `aof_rewrite`: a `FENCE` and
//! one `GRANT` per lock), then streams what it propagates for those slots (`RM_Replicate`
//! computes each effect's slot from its key), pauses writes once the target has caught up, and
//! the target takes the slots over; the source then deletes the slots' keys in the same
//! event-loop iteration as it learns of the hand-over. The server tells modules each step with
//! its slot-migration event, and the module opts in only where the server has both the event
//! and the option (`opts_in_to_slot_migration`). On the event, this file:
//!
//! - at an export's start, counts the server as heard (`propagation`), so that every effect is
//!   built from then on: the migration's stream is a listener the module's own bookkeeping of
//!   replicas does not see, and an effect not built is a grant the target never learns of;
//! - on the target, marks the slots importing while the import lasts (`slot::IMPORTING`): the
//!   moving projects are decided by the source alone;
//! - when an export completes, marks the slots left (`slot::LEFT`) until the server's trim of
//!   their keys is over, and has every waiter of those slots redirected (`registry`);
//! - an export cancelled or failed changes nothing here: the source kept every lock, waiter and
//!   fence, and the target deletes what it imported.
//!
//! Redis 8.4's `CLUSTER MIGRATION` has no opt-in for modules and streams what is propagated
//! only while it keeps a replication backlog; the module has not been run against it. So on a
//! server with Redis's slot-migration API, `CLUSTER MIGRATION IMPORT` is refused by the command
//! filter (renamed to a command that does not exist, whose name says why, so the server answers
//! its own unknown-command error), and a migration started another way (a cluster manager)
//! makes every later effect built, as above (see `docs/operations.md`, "Scaling out").
//!
//! Level 5: imports `contain`, `context`, `errors`, `eviction`, `move_db_workaround`,
//! `propagation`, `registry`, `schedule`, `slot`, `store`. Subscribed by `lib.rs`. Like the
//! keyspace itself in Redis, it never calls into the waiting machinery: it schedules expiry and
//! queues signals in `registry`.

use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis_module::{raw, Context, NotifyEvent};

use crate::contain::contained;
use crate::context::selected_db;
use crate::store::ServerKey;
use crate::{errors, eviction, move_db_workaround, propagation, registry, schedule, slot};

/// The module's one keyspace-event subscriber: [`on_event`], then Valkey 8.1's database switch
/// undone (`move_db_workaround`). One subscriber rather than two, since the server makes a
/// context for each subscriber of each event, and the expiry cycle raises a `del` for every
/// project it deletes: while a million projects lapsed, the events took 12% of the cycle's time
/// with two subscribers, 8% with one (`perf`, Redis 7.0).
pub fn on_keyspace_event(ctx: &Context, _kind: NotifyEvent, event: &str, key: &[u8]) {
    on_event(ctx, event, key);
    move_db_workaround::on_keyspace_event(ctx, event);
}

/// Keyspace events that bring a path-lock key under a new name or from outside: it is scheduled
/// for expiry, and waiters that came with it under a new name are signalled.
fn on_event(ctx: &Context, event: &str, key: &[u8]) {
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
        let db = selected_db(ctx);
        ServerKey::visit(ctx, db, key, |opened| {
            opened.look(|project| {
                schedule::schedule(ctx, key, project);
                if project.locks().has_background_work() {
                    schedule::pending(ctx, key);
                }
                if project.waiting() > 0 && matches!(event, "rename_to" | "move_to") {
                    registry::value_moved(db, key);
                }
            })
        });
    });
}

pub fn subscribe(ctx: &Context) {
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

/// Valkey's atomic slot migration event and its sub-events, from Valkey 9's `valkeymodule.h`
/// (`VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION`, `VALKEYMODULE_SUBEVENT_ATOMIC_SLOT_MIGRATION_*`),
/// which the redismodule-rs bindings lack. Redis 8.4 gives id 19 to another event (its trim
/// event), so this one is subscribed to on Valkey only.
const VALKEY_EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;
const VALKEY_IMPORT_STARTED: u64 = 0;
const VALKEY_EXPORT_STARTED: u64 = 1;
const VALKEY_IMPORT_ABORTED: u64 = 2;
const VALKEY_IMPORT_COMPLETED: u64 = 4;
const VALKEY_EXPORT_COMPLETED: u64 = 5;
/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (Valkey 9's `valkeymodule.h`): the module
/// declares that it handles `CLUSTER MIGRATESLOTS`; without it the server refuses the command.
pub const VALKEY_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

/// `ValkeyModuleSlotRange` (Valkey 9's `valkeymodule.h`).
#[repr(C)]
struct SlotRange {
    start: c_int,
    end: c_int,
}

/// `ValkeyModuleAtomicSlotMigrationInfoV1` (Valkey 9's `valkeymodule.h`).
#[repr(C)]
struct SlotMigrationInfo {
    version: u64,
    job_name: [c_char; 41],
    slot_ranges: *const SlotRange,
    num_slot_ranges: u32,
}

/// Whether the server is Redis with its own atomic slot migration (8.4 and later), which the
/// command filter refuses.
static REDIS_SLOT_MIGRATION: AtomicBool = AtomicBool::new(false);

/// Where the server has Valkey's atomic slot migration (the event and the option), subscribes
/// to its event and returns true: the caller then declares the option. Where the server has
/// Redis's, subscribes to Redis's event (every effect is built once a migration starts) and
/// sets the command filter to refuse `CLUSTER MIGRATION IMPORT`. Elsewhere does nothing.
pub fn opts_in_to_slot_migration(ctx: &Context) -> bool {
    let info = ctx.server_info("server");
    let valkey = info
        .field("server_name")
        .is_some_and(|name| name.to_string_lossy().eq_ignore_ascii_case("valkey"));
    // SAFETY: both only read the server's constants.
    let (options, redis_migration) = unsafe {
        (
            raw::RedisModule_GetModuleOptionsAll.map_or(0, |f| f()),
            raw::RedisModule_ClusterPropagateForSlotMigration
                .map(|f| f as usize)
                .is_some(),
        )
    };
    let subscribe = |id: u64, callback: Callback| -> bool {
        // SAFETY: subscribing with a callback that lives as long as the module.
        unsafe {
            raw::RedisModule_SubscribeToServerEvent.is_some_and(|subscribe| {
                subscribe(
                    ctx.ctx,
                    raw::RedisModuleEvent { id, dataver: 1 },
                    Some(callback),
                ) == raw::REDISMODULE_OK as c_int
            })
        }
    };
    if valkey {
        return options & VALKEY_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION != 0
            && subscribe(VALKEY_EVENT_ATOMIC_SLOT_MIGRATION, on_valkey_slot_migration);
    }
    if redis_migration {
        REDIS_SLOT_MIGRATION.store(true, Ordering::Relaxed);
        subscribe(
            raw::REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION,
            on_redis_slot_migration,
        );
    }
    false
}

type Callback = extern "C" fn(*mut raw::RedisModuleCtx, raw::RedisModuleEvent, u64, *mut c_void);

/// Valkey's atomic slot migration went a step further (see the header, "Atomic slot
/// migration").
extern "C" fn on_valkey_slot_migration(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    contained("the slot migration event", (), || {
        if subevent == VALKEY_EXPORT_STARTED {
            // From the fork of the snapshot on, the server streams every effect made for the
            // moving slots to the target.
            propagation::heard();
            return;
        }
        let ranges = slot_ranges(data);
        match subevent {
            VALKEY_IMPORT_STARTED => {
                for &(start, end) in &ranges {
                    slot::IMPORTING.set_range(start, end, true);
                }
            }
            VALKEY_IMPORT_COMPLETED | VALKEY_IMPORT_ABORTED => {
                for &(start, end) in &ranges {
                    slot::IMPORTING.set_range(start, end, false);
                }
            }
            VALKEY_EXPORT_COMPLETED => {
                for &(start, end) in &ranges {
                    slot::LEFT.set_range(start, end, true);
                }
                registry::slots_left();
                // The server trims the slots' keys right after this event, in the same
                // iteration of its event loop; a key of these slots that leaves later (one
                // imported back, say) leaves for its own reason.
                Context::new(ctx).create_timer(
                    Duration::ZERO,
                    |_: &Context, ()| slot::LEFT.clear(),
                    (),
                );
            }
            // An export cancelled or failed: the source kept everything, nothing to undo.
            _ => {}
        }
    });
}

/// The slot ranges an event's data names, as `(start, end)` slot numbers.
fn slot_ranges(data: *mut c_void) -> Vec<(usize, usize)> {
    if data.is_null() {
        return Vec::new();
    }
    // SAFETY: Valkey passes a ValkeyModuleAtomicSlotMigrationInfo with this event, whose array
    // holds `num_slot_ranges` ranges for the duration of the call.
    unsafe {
        let info = &*data.cast::<SlotMigrationInfo>();
        if info.slot_ranges.is_null() {
            return Vec::new();
        }
        std::slice::from_raw_parts(info.slot_ranges, info.num_slot_ranges as usize)
            .iter()
            .filter_map(|r| Some((usize::try_from(r.start).ok()?, usize::try_from(r.end).ok()?)))
            .collect()
    }
}

/// Redis's slot-migration event: a migration the command filter did not see start (a cluster
/// manager's) makes every effect built from now on.
extern "C" fn on_redis_slot_migration(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if matches!(
        subevent,
        raw::REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_IMPORT_STARTED
            | raw::REDISMODULE_SUBEVENT_CLUSTER_SLOT_MIGRATION_MIGRATE_STARTED
    ) {
        propagation::heard();
    }
}

/// The name `CLUSTER MIGRATION IMPORT` is renamed to on Redis, so that the server refuses it
/// with its own unknown-command error, which names the reason.
const REFUSED_MIGRATION: &str = "pathlock-refuses-CLUSTER-MIGRATION-see-its-README";

/// Whether a command's first three words are `CLUSTER MIGRATION IMPORT`.
fn imports_slots(words: [&[u8]; 3]) -> bool {
    words[0].eq_ignore_ascii_case(b"CLUSTER")
        && words[1].eq_ignore_ascii_case(b"MIGRATION")
        && words[2].eq_ignore_ascii_case(b"IMPORT")
}

/// Renames the command in `filter` to [`REFUSED_MIGRATION`].
fn refuse_command(filter: *mut raw::RedisModuleCommandFilterCtx) {
    // SAFETY: the string is created without a context, so the server owns it once it replaces
    // the argument, as the filter API requires.
    unsafe {
        let (Some(create), Some(replace)) = (
            raw::RedisModule_CreateString,
            raw::RedisModule_CommandFilterArgReplace,
        ) else {
            return;
        };
        let name = create(
            std::ptr::null_mut(),
            REFUSED_MIGRATION.as_ptr().cast::<c_char>(),
            REFUSED_MIGRATION.len(),
        );
        if !name.is_null() {
            replace(filter, 0, name);
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
        if REDIS_SLOT_MIGRATION.load(Ordering::Relaxed)
            && imports_slots([name, arg(1).unwrap_or_default(), arg(2).unwrap_or_default()])
        {
            refuse_command(filter);
            return;
        }
        if !name.eq_ignore_ascii_case(b"MIGRATE") {
            if propagation::asks_for_stream(name) {
                propagation::heard();
            }
            registry::command_starts(None);
            return;
        }
        let host = errors::for_client(arg(1).unwrap_or_default());
        let port = errors::for_client(arg(2).unwrap_or_default());
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
        schedule::swapped(info.dbnum_first, info.dbnum_second);
    });
}

/// A flush is starting: every waiter of the flushed databases is queued again on its key name,
/// and the databases' entries leave the expiry schedule.
extern "C" fn on_flush(
    ctx: *mut raw::RedisModuleCtx,
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
        let flushed = (info.dbnum >= 0).then_some(info.dbnum);
        // The requests are taken from the projects while they are still there: the registry
        // keeps only where each waiter waits.
        let ctx = Context::new(ctx);
        let mut waiters = Vec::new();
        for (db, key) in registry::keys_waited_on(flushed) {
            ServerKey::visit(&ctx, db, &key, |key| {
                key.look(|project| waiters.extend(registry::requests_of(project)))
            });
        }
        registry::requeue(waiters);
        schedule::flushed(flushed, info.sync == 0);
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
    fn only_cluster_migration_import_is_taken_for_redis_slot_migration() {
        use super::imports_slots;
        assert!(imports_slots([b"cluster", b"Migration", b"IMPORT"]));
        assert!(!imports_slots([b"CLUSTER", b"MIGRATION", b"STATUS"]));
        assert!(!imports_slots([b"CLUSTER", b"MIGRATESLOTS", b"SLOTSRANGE"]));
        assert!(!imports_slots([b"CLUSTER", b"", b""]));
        assert!(super::REFUSED_MIGRATION
            .bytes()
            .all(|b| b.is_ascii_graphic()));
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
