use redis_module::{Context, RedisError, RedisResult, RedisString};

use super::{lock_entries, now_ms, read_project, words};
use crate::args;

/// PATHLOCK.CHECK key [TOKEN token] mode path [mode path ...]
pub fn check(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() < 4 {
        return Err(RedisError::WrongArity);
    }
    let request = args::check(&words(&args[2..]))?;
    let now = now_ms();
    let blockers = read_project(ctx, &args[1], |table| {
        table.blockers(now, request.token.as_ref(), &request.items)
    })?
    .unwrap_or_default();
    Ok(lock_entries(&blockers, now))
}
