//! pathlock: hierarchical path locks for Redis.
//!
//! The engine lives in the `pathlock-core` crate and knows nothing of Redis. This crate adapts
//! it: `commands/` declares every command in one table and holds its handlers, `args.rs` the
//! parsing of client arguments,
//! `keytype.rs` the `path-lock` type's callbacks, `config.rs` the module configs and
//! `errors.rs` every error a client can see.

// The modules by level: each imports only from lower levels, and this file from any (`harness`
// is built for tests and fuzzing only). `make lint` runs `scripts/import-cycles.py`, which fails
// on an import circle and when these lines, a file header's level sentence or the table of the
// files in ARCHITECTURE.md disagrees with the imports; `scripts/import-cycles.py --write src`
// rewrites them.
//
// 0  command_docs, config, contain, context, errors, fences, reply, slot, stats, timetable
// 1  args, clock, defrag, eviction, lazyfree, move_db_workaround, propagation, registry
// 2  blocked, effects, schedule
// 3  info, keytype
// 4  store
// 5  events, grants
// 6  change
// 7  expiry, waits
// 8  commands
// 9  harness
//
// The subsystems: the modules each kind of work passes through, from where Redis calls in.
// `scripts/import-cycles.py` fails when a module is in none, and writes their table and the
// table of every entry point Redis calls (with the first sentence of its doc) in ARCHITECTURE.md.
//
// command path: commands, command_docs, args, config, change, grants, store, reply, clock
// waiting: waits, blocked, registry, grants, change, store, slot
// background work: expiry, schedule, timetable, change, store, lazyfree
// replication: effects, propagation, fences, commands, change
// keyspace events: events, eviction, move_db_workaround, registry, schedule, slot
// the key type: keytype, defrag, fences
// introspection: info, stats
// shared: contain, context, errors
// testing: harness
mod args;
mod blocked;
mod change;
mod clock;
mod command_docs;
mod commands;
mod config;
mod contain;
mod context;
mod defrag;
mod effects;
mod errors;
mod events;
mod eviction;
mod expiry;
mod fences;
mod grants;
#[cfg(any(test, feature = "system-alloc"))]
pub mod harness;
mod info;
mod keytype;
mod lazyfree;
mod move_db_workaround;
mod propagation;
mod registry;
mod reply;
mod schedule;
mod slot;
mod stats;
mod store;
mod timetable;
mod waits;

use keytype::PATHLOCK_TYPE;
use redis_module::configuration::{
    register_bool_configuration, register_i64_configuration, ConfigurationFlags,
};
use redis_module::{raw, redis_module, Context, RedisString, Status};

/// Loads the module: registers its settings, registers its commands, subscribes to the server's
/// events, starts the expiry cycle and registers the signal worker.
fn init(ctx: &Context, args: &[RedisString]) -> Status {
    contain::contained("loading the module", Status::Err, || {
        // The settings first, before anything starts that would have to be stopped again: a
        // load refused here leaves nothing running.
        if load_configs(ctx, args) == Status::Err {
            return Status::Err;
        }
        // Without this option a short read while loading an RDB or a RESTORE payload kills the
        // server; with it, the loader sees the error and refuses the value. Where the server
        // has Valkey's atomic slot migration, the module declares that it handles it too
        // (without that, `CLUSTER MIGRATESLOTS` is refused while the module is loaded); see
        // `events` for what it does then, and for Redis's own kind.
        let mut options = redis_module::raw::ModuleOptions::HANDLE_IO_ERRORS.bits();
        if events::opts_in_to_slot_migration(ctx) {
            options |= events::VALKEY_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION;
        }
        // SAFETY: sets this module's options during its load.
        unsafe {
            if let Some(set) = redis_module::raw::RedisModule_SetModuleOptions {
                set(ctx.ctx, options);
            }
        }
        keytype::learn_server(ctx);
        keytype::count_schedule_with(schedule::bytes_per_key);
        if commands::register(ctx) == Status::Err {
            return Status::Err;
        }
        expiry::start(ctx);
        lazyfree::start();
        clock::subscribe(ctx);
        events::subscribe(ctx);
        propagation::subscribe(ctx);
        eviction::subscribe(ctx);
        eviction::refresh(ctx);
        context::refresh_latency_threshold(ctx);
        // The registry of waiters queues signals; the waits layer above it works them off.
        registry::set_worker(ctx, waits::work_off_signals);
        commands::describe(ctx);
        Status::Ok
    })
}

/// Redis's allocator inside Redis (through `defrag::Allocator`, which routes a defrag rebuild's
/// allocations as the defragmenter's); the system's in unit tests and fuzz targets, where
/// Redis's would abort on the first allocation.
/// Registers the `pathlock.*` settings (`config`), the module's arguments as their defaults,
/// and has the server apply what redis.conf or `MODULE LOADEX ... CONFIG` gives them. Refuses
/// the load, with the reason in the log, when the arguments or those values are wrong.
/// redis-module's own registration read the arguments unchecked and ignored what applying the
/// values answered: a value out of range given to `MODULE LOADEX` then left the module loaded
/// with its defaults on Redis 7.0, and crashed Valkey 9.1 as it unloaded the module again.
fn load_configs(ctx: &Context, args: &[RedisString]) -> Status {
    let bytes: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
    let defaults = match config::module_args(&bytes) {
        Ok(defaults) => defaults,
        Err(refused) => {
            ctx.log_warning(&format!(
                "pathlock: not loaded: {}",
                describe_arg_error(&refused)
            ));
            return Status::Err;
        }
    };
    for (setting, &default) in config::NUMERIC.iter().zip(&defaults.numeric) {
        register_i64_configuration(
            ctx,
            setting.name,
            setting.value,
            default,
            setting.min,
            setting.max,
            ConfigurationFlags::DEFAULT,
            None,
        );
    }
    for (setting, &default) in config::FLAGS.iter().zip(&defaults.flags) {
        register_bool_configuration(
            ctx,
            setting.name,
            setting.value,
            default,
            ConfigurationFlags::DEFAULT,
            None,
        );
    }
    // SAFETY: called during the module's load, on its load context, as the API asks.
    let applied = unsafe { raw::RedisModule_LoadConfigs.map(|load| load(ctx.ctx)) };
    if applied == Some(raw::Status::Err as i32) {
        // The server has logged which value it refused.
        ctx.log_warning("pathlock: not loaded: a pathlock.* value above was refused");
        return Status::Err;
    }
    Status::Ok
}

/// The log's words for refused module arguments; what the operator wrote is escaped.
fn describe_arg_error(refused: &config::ArgError) -> String {
    match refused {
        config::ArgError::Unpaired(name) => format!(
            "the module's argument '{}' has no value: its arguments are pairs of a setting's \
             name and value, such as max-ttl 60000",
            errors::for_log(name)
        ),
        config::ArgError::Unknown(name) => format!(
            "the module's argument '{}' names no pathlock setting (see CONFIG GET pathlock.*)",
            errors::for_log(name)
        ),
        config::ArgError::OutOfRange {
            name,
            value,
            min,
            max,
        } => format!(
            "the module's argument {name} '{}' is not an integer from {min} to {max}",
            errors::for_log(value)
        ),
        config::ArgError::NotYesNo { name, value } => format!(
            "the module's argument {name} '{}' is not yes or no",
            errors::for_log(value)
        ),
    }
}

#[cfg(not(any(test, feature = "system-alloc")))]
macro_rules! allocator {
    () => {
        crate::defrag::Allocator
    };
}
#[cfg(all(feature = "system-alloc", not(test)))]
macro_rules! allocator {
    () => {
        std::alloc::System
    };
}
/// Unit tests use the system's allocator through one that notes each thread's largest single
/// allocation, so that a test can hold a structure's growth steps to a bound.
#[cfg(test)]
macro_rules! allocator {
    () => {
        crate::timetable::LargestAllocation
    };
}

redis_module! {
    name: "pathlock",
    version: 1,
    allocator: (allocator!(), allocator!()),
    data_types: [PATHLOCK_TYPE],
    init: init,
    event_handlers: [
        // One subscriber, which ends by undoing Valkey 8.1's database switch (`events`).
        [@GENERIC @LOADED @EVICTED: events::on_keyspace_event],
    ],
}
