//! The command handlers. Each one parses its arguments (`args.rs`), calls the engine
//! (`pathlock_core`), replies, and announces what changed. Nothing is decided here.

mod acquire;
mod check;
mod locks;
mod release;
mod renew;

pub use acquire::acquire;
pub use check::check;
pub use locks::locks;
pub use release::release;
pub use renew::renew;

use std::panic::{catch_unwind, AssertUnwindSafe};

use pathlock_core::{LockInfo, LockTable};
use redis_module::{raw, Context, NotifyEvent, RedisError, RedisResult, RedisString, RedisValue};

use crate::errors::{ERR_PANIC, WRONGTYPE};
use crate::keytype::PATHLOCK_TYPE;

type Handler = fn(&Context, Vec<RedisString>) -> RedisResult;

/// Wraps a handler so that a panic becomes an error reply: unwinding out of the `extern "C"`
/// function that Redis calls would abort the whole server.
pub fn guarded(handler: Handler) -> impl Fn(&Context, Vec<RedisString>) -> RedisResult {
    move |ctx, args| {
        catch_unwind(AssertUnwindSafe(|| handler(ctx, args)))
            .unwrap_or_else(|_| Err(RedisError::Str(ERR_PANIC)))
    }
}

/// The server's time in milliseconds. Redis caches it when a command starts and keeps it for a
/// whole `MULTI`/`EXEC` or script, so every lock of a transaction sees one instant.
pub fn now_ms() -> u64 {
    // SAFETY: both functions take no arguments and only read the server's clock.
    let micros = unsafe {
        match raw::RedisModule_CachedMicroseconds {
            Some(cached) => cached(),
            None => raw::RedisModule_Milliseconds.map_or(0, |ms| ms()) * 1000,
        }
    };
    u64::try_from(micros / 1000).unwrap_or(0)
}

fn words(args: &[RedisString]) -> Vec<&[u8]> {
    args.iter().map(RedisString::as_slice).collect()
}

/// Opens a project for a change, reclaims its expired locks, and runs `change` on its table.
/// A missing key is created when `create` is set, and otherwise answers `Ok(None)`.
fn change_project<R>(
    ctx: &Context,
    key_name: &RedisString,
    create: bool,
    change: impl FnOnce(&mut LockTable) -> R,
) -> Result<Option<R>, RedisError> {
    let key = ctx.open_key_writable(key_name);
    let wrong_type = |_| RedisError::Str(WRONGTYPE);
    if key
        .get_value::<LockTable>(&PATHLOCK_TYPE)
        .map_err(wrong_type)?
        .is_none()
    {
        if !create {
            return Ok(None);
        }
        key.set_value(&PATHLOCK_TYPE, LockTable::new())?;
    }
    let Some(table) = key
        .get_value::<LockTable>(&PATHLOCK_TYPE)
        .map_err(wrong_type)?
    else {
        return Ok(None);
    };
    if !table.reclaim_expired(now_ms()).is_empty() {
        notify(ctx, "pathlock.expired", key_name);
    }
    Ok(Some(change(table)))
}

/// Runs `read` on a project's table without changing it; a missing key answers `Ok(None)`.
/// Expired locks are left in place (a replica must not reclaim them); the engine's reading
/// methods hide them.
fn read_project<R>(
    ctx: &Context,
    key_name: &RedisString,
    read: impl FnOnce(&LockTable) -> R,
) -> Result<Option<R>, RedisError> {
    let key = ctx.open_key(key_name);
    let table = key
        .get_value::<LockTable>(&PATHLOCK_TYPE)
        .map_err(|_| RedisError::Str(WRONGTYPE))?;
    Ok(table.map(read))
}

/// The entries of LOCKS and CHECK: `[path, mode, token, ttl-ms, fence]`.
fn lock_entries(locks: &[LockInfo], now: u64) -> RedisValue {
    RedisValue::Array(
        locks
            .iter()
            .map(|lock| {
                RedisValue::Array(vec![
                    RedisValue::StringBuffer(lock.path.to_bytes()),
                    RedisValue::BulkString(lock.mode.as_str().to_owned()),
                    RedisValue::StringBuffer(lock.token.as_bytes().to_vec()),
                    RedisValue::Integer(clamp(lock.deadline.saturating_sub(now))),
                    RedisValue::Integer(clamp(lock.fence)),
                ])
            })
            .collect(),
    )
}

fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn notify(ctx: &Context, event: &str, key: &RedisString) {
    ctx.notify_keyspace_event(NotifyEvent::MODULE, event, key);
}
