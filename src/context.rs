//! What a call into the module needs to know about where it runs: the selected database, whether
//! this server decides or applies decisions, whether the caller may block, and the keyspace
//! event that announces a change.
//!
//! Level 0: imports nothing of the crate. Used by every file that opens keys or answers clients.

use redis_module::{raw, Context, ContextFlags, NotifyEvent, RedisString};

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
    select_db(ctx, db);
    let result = work();
    select_db(ctx, original);
    result
}

/// Whether this call decides, rather than applies a decision: a replica applying its master's
/// stream and a server replaying its AOF must never reclaim or refuse on their own.
pub fn decides(ctx: &Context) -> bool {
    !ctx.get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
}

/// Whether this command may block: not inside `MULTI`, a script, a replicated or replayed
/// command, or any context Redis marks as unable to block.
pub fn may_block(ctx: &Context) -> bool {
    !ctx.get_flags().intersects(
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
    if !ctx.get_flags().contains(ContextFlags::CLUSTER) {
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
/// event's name is made a C string on the stack: every grant raises one, and redis-module's own
/// call allocates a `CString` for it each time.
pub fn notify(ctx: &Context, event: &str, key: &RedisString) {
    let mut name = [0u8; 32];
    // One byte at least is left for the NUL.
    match name.get_mut(..event.len()).filter(|_| event.len() < 32) {
        Some(prefix) if !event.as_bytes().contains(&0) => {
            prefix.copy_from_slice(event.as_bytes());
            // SAFETY: `name` holds the event's bytes and at least one NUL after them; the key
            // is a live RedisModuleString; Redis copies what it keeps.
            unsafe {
                if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
                    notify(
                        ctx.ctx,
                        NotifyEvent::MODULE.bits(),
                        name.as_ptr().cast(),
                        key.inner,
                    );
                }
            }
        }
        _ => {
            ctx.notify_keyspace_event(NotifyEvent::MODULE, event, key);
        }
    }
}
