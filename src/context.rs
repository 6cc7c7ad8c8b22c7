//! What a call into the module needs to know about where it runs: the selected database, whether
//! this server decides or applies decisions, whether the caller may block, and the keyspace
//! event that announces a change.
//!
//! Level 0: imports nothing of the crate. Used by every file that opens keys or answers clients.

use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

use redis_module::key::KeyFlags;
use redis_module::{raw, Context, ContextFlags, RedisString, RedisValue};

// What the command running now asked once, for it to ask again for free. Commands run on the
// server's main thread only, one at a time, so plain statics serve; they are atomics (relaxed,
// plain loads and stores on x86) rather than thread-locals because a thread-local in a loaded
// library costs a call to `__tls_get_addr` at each use. Another thread that asks (the signal
// worker) has a context of its own, so never matches `CURRENT_CTX` and reads the server's.

/// The address of the running command's context, 0 between commands.
static CURRENT_CTX: AtomicUsize = AtomicUsize::new(0);
/// Its flags, read once when it starts: a command asks several times (its clock, whether it
/// decides, whether it may block) and each `RM_GetContextFlags` computes all of them anew.
static CURRENT_FLAGS: AtomicI32 = AtomicI32::new(0);
/// The server's time as the running command first read it (`UNREAD` before), for the same
/// reason: on Redis 7.0 each reading is a `gettimeofday`, and a command reads it several times.
/// Redis 7.2 and later likewise give a command one time for its whole run.
static NOW_MS: AtomicU64 = AtomicU64::new(UNREAD);

const UNREAD: u64 = u64::MAX;

/// The same for the module's own work running now outside a command (a tick of the expiry
/// cycle): its context, 0 when none runs, and its flags, read once when it started. A tick
/// visits hundreds of keys, and asks for the flags several times in each; the flags it reads
/// (role, replication, AOF, loading) cannot change while it runs. Those that can (out of memory,
/// eviction: a tick frees memory) must be read from the server, not through [`flags`].
static WORK_CTX: AtomicUsize = AtomicUsize::new(0);
static WORK_FLAGS: AtomicI32 = AtomicI32::new(0);

/// The context's flags: those remembered for the running command when `ctx` is its context,
/// else read from the server.
pub fn flags(ctx: &Context) -> ContextFlags {
    if CURRENT_CTX.load(Relaxed) == ctx.ctx as usize {
        return ContextFlags::from_bits_truncate(CURRENT_FLAGS.load(Relaxed));
    }
    if WORK_CTX.load(Relaxed) == ctx.ctx as usize {
        return ContextFlags::from_bits_truncate(WORK_FLAGS.load(Relaxed));
    }
    ctx.get_flags()
}

/// Runs the module's own `work` on `ctx` outside a command (a timer's tick) with the context's
/// flags remembered, and forgets them after; `work` is not a command (`in_command` stays false).
/// `work` must not unwind.
pub fn remembering_work_flags<R>(ctx: &Context, work: impl FnOnce() -> R) -> R {
    let outer = (WORK_CTX.load(Relaxed), WORK_FLAGS.load(Relaxed));
    WORK_FLAGS.store(ctx.get_flags().bits(), Relaxed);
    WORK_CTX.store(ctx.ctx as usize, Relaxed);
    let result = work();
    WORK_CTX.store(outer.0, Relaxed);
    WORK_FLAGS.store(outer.1, Relaxed);
    result
}

/// Runs a command's `work` with its context's flags remembered, and forgets them after (a
/// command that calls another through `RM_Call` gets the outer ones back). `work` must not
/// unwind, or the outer ones would not come back.
pub fn remembering_flags<R>(ctx: &Context, work: impl FnOnce() -> R) -> R {
    let bits = ctx.get_flags().bits();
    // Loads and stores rather than swaps: only the main thread writes these, and a swap is a
    // locked instruction.
    let outer = (
        CURRENT_CTX.load(Relaxed),
        CURRENT_FLAGS.load(Relaxed),
        NOW_MS.load(Relaxed),
    );
    CURRENT_CTX.store(ctx.ctx as usize, Relaxed);
    CURRENT_FLAGS.store(bits, Relaxed);
    NOW_MS.store(UNREAD, Relaxed);
    let result = work();
    CURRENT_CTX.store(outer.0, Relaxed);
    CURRENT_FLAGS.store(outer.1, Relaxed);
    NOW_MS.store(outer.2, Relaxed);
    result
}

/// Whether `ctx` is the context of the client's command running now, rather than a timer's, an
/// event's or the signal worker's.
pub fn in_command(ctx: &Context) -> bool {
    CURRENT_CTX.load(Relaxed) == ctx.ctx as usize
}

/// How the module opens a key that it only looks at outside a client's command (a keyspace
/// event, the signal worker asking whether a name holds a value): the key's LRU/LFU clock is left
/// alone, and, where the server knows the flags (Redis 7.2+, Valkey), no `keymiss` event is
/// raised and no keyspace hit or miss counted. Redis 7.0 knows only `NOTOUCH`; the others are
/// masked off there. An expired key is still deleted as any access would delete it.
pub fn look_flags() -> KeyFlags {
    static BITS: OnceLock<i32> = OnceLock::new();
    let bits = BITS.get_or_init(|| {
        let wanted = KeyFlags::NOTOUCH | KeyFlags::NONOTIFY | KeyFlags::NOSTATS;
        // SAFETY: takes no arguments and only reports what the server supports.
        let known = unsafe { raw::RedisModule_GetOpenKeyModesAll.map(|f| f()) };
        known.map_or(KeyFlags::NOTOUCH.bits(), |known| known & wanted.bits())
    });
    KeyFlags::from_bits_truncate(*bits)
}

/// The time in milliseconds for a command on `ctx`: `read` once per running command, the same
/// value after; outside a command, `read` each time.
pub fn remembered_ms(ctx: &Context, read: impl FnOnce() -> u64) -> u64 {
    if CURRENT_CTX.load(Relaxed) != ctx.ctx as usize {
        return read();
    }
    match NOW_MS.load(Relaxed) {
        UNREAD => {
            let now = read();
            NOW_MS.store(now, Relaxed);
            now
        }
        now => now,
    }
}

pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: the context is the live one Redis gave this call.
    unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(ctx.ctx)) }
}

pub fn select_db(ctx: &Context, db: i32) {
    // SAFETY: selecting a database on the caller's context.
    unsafe {
        if let Some(select) = raw::RedisModule_SelectDb {
            select(ctx.ctx, db);
        }
    }
}

/// Runs `work` with `db` selected, then selects the database that was selected before, so
/// timers and deferred work can visit keys of any database.
pub fn in_db<R>(ctx: &Context, db: i32, work: impl FnOnce() -> R) -> R {
    let original = selected_db(ctx);
    // Selecting the database that is selected already would change nothing.
    if original == db {
        return work();
    }
    select_db(ctx, db);
    let result = work();
    select_db(ctx, original);
    result
}

/// Whether this call decides, rather than applies a decision: a replica applying its master's
/// stream and a server replaying its AOF must never reclaim or refuse on their own.
pub fn decides(ctx: &Context) -> bool {
    !flags(ctx).intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
}

/// Whether this command may block: not inside `MULTI`, a script, a replicated or replayed
/// command, or any context Redis marks as unable to block.
pub fn may_block(ctx: &Context) -> bool {
    !flags(ctx).intersects(
        ContextFlags::MULTI
            | ContextFlags::LUA
            | ContextFlags::DENY_BLOCKING
            | ContextFlags::REPLICATED
            | ContextFlags::LOADING,
    )
}

/// Whether this node may act on `key`: always outside Cluster; in Cluster, when it serves the
/// key's slot and the key is not one that moved away while the slot migrates. Redis refuses a
/// module's call on any other key (RM_Call answers NULL, as it routes a client elsewhere), so a
/// harmless `EXISTS` asks exactly the question Redis's routing answers.
pub fn serves(ctx: &Context, key: &RedisString) -> bool {
    if !flags(ctx).contains(ContextFlags::CLUSTER) {
        return true;
    }
    // SAFETY: the command name and the format are C string literals; `s` takes the key's
    // RedisModuleString, which outlives the call; the reply is freed before returning.
    unsafe {
        let (Some(call), Some(free)) = (raw::RedisModule_Call, raw::RedisModule_FreeCallReply)
        else {
            return true;
        };
        let reply = call(ctx.ctx, c"EXISTS".as_ptr(), c"s".as_ptr(), key.inner);
        if reply.is_null() {
            return false;
        }
        free(reply);
        true
    }
}

/// Raises a keyspace event of the module class (`pathlock.acquire`, ...) on a project key. The
/// name is a C string already, so announcing costs no allocation.
pub fn notify(ctx: &Context, event: &CStr, key: &RedisString) {
    // SAFETY: the event name is a NUL-terminated literal and the key a live RedisModuleString;
    // Redis copies what it keeps.
    unsafe {
        if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
            notify(
                ctx.ctx,
                raw::REDISMODULE_NOTIFY_MODULE,
                event.as_ptr(),
                key.inner,
            );
        }
    }
}

/// A server setting's value, as `CONFIG GET name` answers it; `None` when it has none.
pub fn config_get(ctx: &Context, name: &str) -> Option<String> {
    match ctx.call("CONFIG", &["GET", name]) {
        Ok(RedisValue::Array(items)) => match items.get(1) {
            Some(RedisValue::SimpleString(s)) | Some(RedisValue::BulkString(s)) => Some(s.clone()),
            Some(RedisValue::BulkRedisString(s)) => Some(s.to_string_lossy()),
            _ => None,
        },
        _ => None,
    }
}

/// The server's `latency-monitor-threshold` in milliseconds, 0 while the monitor is off: read
/// when the module loads and again when a `CONFIG SET` changes it (`eviction` follows the
/// server's config-change event), so that a tick does not call `CONFIG GET`, which would show
/// in the server's command statistics.
static LATENCY_THRESHOLD: AtomicU64 = AtomicU64::new(0);

/// Reads `latency-monitor-threshold` again.
pub fn refresh_latency_threshold(ctx: &Context) {
    let threshold = config_get(ctx, "latency-monitor-threshold")
        .and_then(|value| value.parse::<u64>().ok())
        .unwrap_or(0);
    LATENCY_THRESHOLD.store(threshold, Relaxed);
}

/// `latency-monitor-threshold` as last read.
pub fn latency_threshold() -> u64 {
    LATENCY_THRESHOLD.load(Relaxed)
}
