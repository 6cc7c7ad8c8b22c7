//! `PATHLOCK.RELEASE`: frees an owner's locks, and lets in the waiters they held up.

use redis_module::{RedisResult, RedisValue};

use super::Call;
use crate::change::change_existing;
use crate::effects::{Effect, Kind};
use crate::{args, grants};

/// PATHLOCK.RELEASE key token [path ...]
pub fn release(call: &impl Call, words: &[&[u8]]) -> RedisResult {
    let token = args::token(words[2])?;
    let paths = args::paths(&words[3..])?;
    let now = call.now_ms();
    let (freed, grants) = change_existing(call, |project| {
        project.release(now, &token, paths.as_deref())
    })?
    .unwrap_or_default();
    if freed > 0 {
        call.replicate(&Effect::Release { token, paths });
        call.count_and_notify(Kind::Release, freed);
    }
    // The waiters let in, by the release or by the caller's own lapsed locks (which leave even
    // when nothing live is released), after the release.
    grants::deliver(call, grants);
    Ok(RedisValue::Integer(freed as i64))
}
