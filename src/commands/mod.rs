//! The command handlers. Each one parses its arguments (`args.rs`), calls the engine
//! (`pathlock_core`) through `change` (writes) or `store::read` (reads), replies, and
//! replicates and announces what changed. Nothing is decided here.
//!
//! Level 6: may import anything below. Registered by `lib.rs`.

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

use redis_module::{Context, RedisError, RedisResult, RedisString};

use crate::errors::ERR_PANIC;
use crate::reply;

type Handler = fn(&Context, Vec<RedisString>) -> RedisResult;

/// Wraps a handler so that a panic becomes an error reply (unwinding out of the `extern "C"`
/// function that Redis calls would abort the whole server), and so that whatever it answers is
/// safe for redis-module to write (`reply::safe`).
pub fn guarded(handler: Handler) -> impl Fn(&Context, Vec<RedisString>) -> RedisResult {
    move |ctx, args| {
        let result = catch_unwind(AssertUnwindSafe(|| handler(ctx, args)))
            .unwrap_or_else(|_| Err(RedisError::Str(ERR_PANIC)));
        reply::safe(result)
    }
}

fn words(args: &[RedisString]) -> Vec<&[u8]> {
    args.iter().map(RedisString::as_slice).collect()
}
