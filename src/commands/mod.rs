//! The command handlers. Each one parses its arguments (`args.rs`), calls the engine
//! (`pathlock_core`), replies, and replicates and announces what changed. Nothing is decided
//! here; `project.rs` opens keys and `effects.rs` carries decisions to replicas and the AOF.

mod acquire;
mod check;
mod effect;
mod locks;
mod release;
mod renew;

pub use acquire::acquire;
pub use check::check;
pub use effect::effect;
pub use locks::locks;
pub use release::release;
pub use renew::renew;

use std::panic::{catch_unwind, AssertUnwindSafe};

use pathlock_core::LockInfo;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::errors::ERR_PANIC;

type Handler = fn(&Context, Vec<RedisString>) -> RedisResult;

/// Wraps a handler so that a panic becomes an error reply: unwinding out of the `extern "C"`
/// function that Redis calls would abort the whole server.
pub fn guarded(handler: Handler) -> impl Fn(&Context, Vec<RedisString>) -> RedisResult {
    move |ctx, args| {
        catch_unwind(AssertUnwindSafe(|| handler(ctx, args)))
            .unwrap_or_else(|_| Err(RedisError::Str(ERR_PANIC)))
    }
}

fn words(args: &[RedisString]) -> Vec<&[u8]> {
    args.iter().map(RedisString::as_slice).collect()
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
