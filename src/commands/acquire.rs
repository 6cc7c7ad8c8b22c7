use pathlock_core::Token;
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::words;
use crate::clock::now_ms;
use crate::effects::Effect;
use crate::project;
use crate::{args, stats};

/// PATHLOCK.ACQUIRE key [TOKEN token] [TTL ms] [WAIT ms] mode path [mode path ...]
pub fn acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() < 4 {
        return Err(RedisError::WrongArity);
    }
    let request = args::acquire(&words(&args[2..]))?;
    let token = request.token.unwrap_or_else(Token::generate);
    let now = now_ms(ctx);
    let deadline = now.saturating_add(request.ttl);
    let granted = project::change(ctx, &args[1], true, |table| {
        table.acquire(now, &token, request.ttl, &request.items)
    })?
    .flatten();
    let Some(fence) = granted else {
        stats::count(&stats::CONFLICTS, 1);
        return Ok(RedisValue::Null);
    };
    stats::count(&stats::GRANTS, 1);
    let reply = RedisValue::Array(vec![
        RedisValue::StringBuffer(token.as_bytes().to_vec()),
        RedisValue::Integer(i64::try_from(fence).unwrap_or(i64::MAX)),
    ]);
    Effect::Grant {
        token,
        deadline,
        fence,
        items: request.items,
    }
    .replicate(ctx, &args[1]);
    project::notify(ctx, "pathlock.acquire", &args[1]);
    Ok(reply)
}
