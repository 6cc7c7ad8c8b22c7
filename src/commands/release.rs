use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::change::change;
use crate::clock::now_ms;
use crate::context::notify;
use crate::effects::Effect;
use crate::{args, grants, stats};

/// PATHLOCK.RELEASE key token [path ...]
pub fn release(ctx: &Context, key: &RedisString, words: &[&[u8]]) -> RedisResult {
    if words.len() < 3 {
        return Err(RedisError::WrongArity);
    }
    let token = args::token(words[2])?;
    let paths = args::paths(&words[3..])?;
    let now = now_ms(ctx);
    let (freed, grants) = change(ctx, key, false, |project| {
        project.release(now, &token, paths.as_deref())
    })?
    .unwrap_or_default();
    if freed > 0 {
        stats::count(&stats::RELEASES, freed);
        Effect::Release { token, paths }.replicate(ctx, key);
        notify(ctx, c"pathlock.release", key);
    }
    // The waiters let in, by the release or by the caller's own lapsed locks (which leave even
    // when nothing live is released), after the release.
    grants::deliver(ctx, key, grants);
    Ok(RedisValue::Integer(freed as i64))
}
