//! `PATHLOCK.LOCKS`: the live locks at or under a path, or one owner's.

use redis_module::RedisResult;

use super::Call;
use crate::{args, reply};

/// PATHLOCK.LOCKS key [path] [TOKEN token]
pub fn locks(call: &impl Call, words: &[&[u8]]) -> RedisResult {
    let request = args::locks(&words[2..])?;
    let now = call.now_ms();
    let locks = call
        .read(|project| match &request.token {
            Some(token) => project.locks().locks_of_token(now, &request.under, token),
            None => project.locks().locks(now, &request.under),
        })?
        .unwrap_or_default();
    Ok(reply::lock_entries(&locks, now))
}
