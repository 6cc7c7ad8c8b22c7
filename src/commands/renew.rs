use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::change::change;
use crate::clock::now_ms;
use crate::context::notify;
use crate::effects::Effect;
use crate::{args, grants, stats};

/// PATHLOCK.RENEW key token ms
pub fn renew(ctx: &Context, key: &RedisString, words: &[&[u8]]) -> RedisResult {
    if words.len() != 4 {
        return Err(RedisError::WrongArity);
    }
    let token = args::token(words[2])?;
    let ttl = args::ttl_ms(words[3])?;
    let now = now_ms(ctx);
    let deadline = now.saturating_add(ttl);
    let (renewed, grants) = change(ctx, key, false, |project| {
        project.renew(now, &token, deadline)
    })?
    .unwrap_or_default();
    if renewed > 0 {
        stats::count(&stats::RENEWALS, renewed);
        Effect::Renew { token, deadline }.replicate(ctx, key);
        notify(ctx, c"pathlock.renew", key);
    }
    // The waiters that the caller's own lapsed locks let in, after the renewal.
    grants::deliver(ctx, key, grants);
    Ok(RedisValue::Integer(renewed as i64))
}
