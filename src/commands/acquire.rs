//! `PATHLOCK.ACQUIRE`: grants locks at once, blocks the client until they can be granted
//! (`WAIT`), or answers nil.

use pathlock_core::{Request, Token, Waiter};
use redis_module::{RedisError, RedisResult, RedisValue};

use super::Call;
use crate::change::change_or_create;
use crate::errors::ERR_FENCES_EXHAUSTED;
use crate::{args, eviction, fences, grants, stats};

enum Outcome {
    Granted(u64),
    Exhausted,
    Waiting,
    Refused,
}

/// PATHLOCK.ACQUIRE key [TOKEN token] [TTL ms] [WAIT ms] [NOTE note] mode path [mode path ...]
pub fn acquire(call: &impl Call, words: &[&[u8]]) -> RedisResult {
    if let Some(refusal) = eviction::refusal() {
        return Err(RedisError::String(refusal));
    }
    let request = args::acquire(&words[2..])?;
    let generated = request.token.is_none();
    let token = request.token.unwrap_or_else(Token::generate);
    let now = call.now_ms();
    let wait = if call.may_block() { request.wait } else { 0 };
    let outcome = change_or_create(call, |project| {
        if project.locks().next_fence() >= fences::LIMIT {
            return Outcome::Exhausted;
        }
        let granted = project.acquire_request(
            now,
            &Request {
                token: &token,
                generated,
                ttl: request.ttl,
                items: &request.items,
                note: request.note.as_ref(),
            },
        );
        match granted {
            Some(fence) => Outcome::Granted(fence),
            None if wait > 0 => {
                let waiter = Waiter {
                    token: token.clone(),
                    ttl: request.ttl,
                    items: request.items.clone(),
                    note: request.note.clone(),
                };
                if call.block(project, waiter, wait) {
                    Outcome::Waiting
                } else {
                    Outcome::Refused
                }
            }
            None => Outcome::Refused,
        }
    })?;
    let fence = match outcome {
        Outcome::Granted(fence) => fence,
        Outcome::Waiting => return Ok(RedisValue::NoReply),
        Outcome::Exhausted => return Err(RedisError::Str(ERR_FENCES_EXHAUSTED)),
        Outcome::Refused => {
            stats::count(&stats::CONFLICTS, 1);
            return Ok(RedisValue::Null);
        }
    };
    let reply = call.reply_grant(&token, fence);
    let deadline = now.saturating_add(request.ttl);
    grants::publish_immediate(call, token, deadline, fence, request.items, request.note);
    Ok(reply)
}
