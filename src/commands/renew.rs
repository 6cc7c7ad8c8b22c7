//! `PATHLOCK.RENEW`: moves an owner's lease.

use redis_module::{RedisResult, RedisValue};

use super::Call;
use crate::change::change_existing;
use crate::effects::{Effect, Kind};
use crate::{args, grants};

/// PATHLOCK.RENEW key token ms
pub fn renew(call: &impl Call, words: &[&[u8]]) -> RedisResult {
    let token = args::token(words[2])?;
    let ttl = args::ttl_ms(words[3])?;
    let now = call.now_ms();
    let deadline = now.saturating_add(ttl);
    let (renewed, grants) =
        change_existing(call, |project| project.renew(now, &token, deadline))?.unwrap_or_default();
    if renewed > 0 {
        call.replicate(&Effect::Renew { token, deadline });
        call.count_and_notify(Kind::Renew, renewed);
    }
    // The waiters that the caller's own lapsed locks let in, after the renewal.
    grants::deliver(call, grants);
    Ok(RedisValue::Integer(renewed as i64))
}
