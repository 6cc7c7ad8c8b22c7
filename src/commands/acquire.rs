use pathlock_core::Token;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::{change_project, notify, now_ms, words};
use crate::args;

/// PATHLOCK.ACQUIRE key [TOKEN token] [TTL ms] [WAIT ms] mode path [mode path ...]
pub fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() < 4 {
        return Err(RedisError::WrongArity);
    }
    let request = args::acquire(&words(&args[2..]))?;
    let token = request.token.unwrap_or_else(Token::generate);
    let now = now_ms();
    let granted = change_project(ctx, &args[1], true, |table| {
        table.acquire(now, &token, request.ttl, &request.items)
    })?
    .flatten();
    let Some(fence) = granted else {
        return Ok(RedisValue::Null);
    };
    notify(ctx, "pathlock.acquire", &args[1]);
    Ok(RedisValue::Array(vec![
        RedisValue::StringBuffer(token.as_bytes().to_vec()),
        RedisValue::Integer(i64::try_from(fence).unwrap_or(i64::MAX)),
    ]))
}
