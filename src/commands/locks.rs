use redis_module::{Context, RedisError, RedisResult, RedisString};

use crate::args;
use crate::clock::now_ms;
use crate::{reply, store};

/// PATHLOCK.LOCKS key [path] [TOKEN token]
pub fn locks(ctx: &Context, key: &RedisString, words: &[&[u8]]) -> RedisResult {
    if !(2..=5).contains(&words.len()) {
        return Err(RedisError::WrongArity);
    }
    let request = args::locks(&words[2..])?;
    let now = now_ms(ctx);
    let locks = store::read(ctx, key, |project| match &request.token {
        Some(token) => project.locks().locks_of_token(now, &request.under, token),
        None => project.locks().locks(now, &request.under),
    })?
    .unwrap_or_default();
    Ok(reply::lock_entries(&locks, now))
}
