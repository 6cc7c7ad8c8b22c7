//! `PATHLOCK.CHECK`: the live locks that would block a request now.

use redis_module::RedisResult;

use super::Call;
use crate::{args, reply};

/// PATHLOCK.CHECK key [TOKEN token] mode path [mode path ...]
pub fn check(call: &impl Call, words: &[&[u8]]) -> RedisResult {
    let request = args::check(&words[2..])?;
    let now = call.now_ms();
    let blockers = call
        .read(|project| {
            project
                .locks()
                .blockers(now, request.token.as_ref(), &request.items)
        })?
        .unwrap_or_default();
    Ok(reply::lock_entries(&blockers, now))
}
