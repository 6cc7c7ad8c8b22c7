use redis_module::{Context, RedisError, RedisResult, RedisString};

use crate::args;
use crate::clock::now_ms;
use crate::{reply, store};

/// PATHLOCK.CHECK key [TOKEN token] mode path [mode path ...]
pub fn check(ctx: &Context, key: &RedisString, words: &[&[u8]]) -> RedisResult {
    if words.len() < 4 {
        return Err(RedisError::WrongArity);
    }
    let request = args::check(&words[2..])?;
    let now = now_ms(ctx);
    let blockers = store::read(ctx, key, |project| {
        project
            .locks()
            .blockers(now, request.token.as_ref(), &request.items)
    })?
    .unwrap_or_default();
    Ok(reply::lock_entries(&blockers, now))
}
