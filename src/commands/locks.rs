use pathlock_core::Path;
use redis_module::{Context, RedisError, RedisResult, RedisString};

use crate::clock::now_ms;
use crate::config;
use crate::errors::Error;
use crate::{reply, store};

/// PATHLOCK.LOCKS key [path]
pub fn locks(ctx: &Context, key: &RedisString, words: &[&[u8]]) -> RedisResult {
    if !(2..=3).contains(&words.len()) {
        return Err(RedisError::WrongArity);
    }
    let under = match words.get(2) {
        Some(raw) => Path::parse(raw, &config::path_limits()).map_err(Error::from)?,
        None => Path::root(),
    };
    let now = now_ms(ctx);
    let locks =
        store::read(ctx, key, |project| project.locks().locks(now, &under))?.unwrap_or_default();
    Ok(reply::lock_entries(&locks, now))
}
