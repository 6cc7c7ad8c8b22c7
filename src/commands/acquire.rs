use pathlock_core::{Request, Token, Waiter};
use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::change::change;
use crate::clock::now_ms;
use crate::context::may_block;
use crate::errors::ERR_FENCES_EXHAUSTED;
use crate::{args, eviction, fences, grants, reply, stats, waits};

enum Outcome {
    Granted(u64),
    Exhausted,
    Waiting,
    Refused,
}

/// PATHLOCK.ACQUIRE key [TOKEN token] [TTL ms] [WAIT ms] [NOTE note] mode path [mode path ...]
pub fn acquire(ctx: &Context, key: &RedisString, words: &[&[u8]]) -> RedisResult {
    if words.len() < 4 {
        return Err(RedisError::WrongArity);
    }
    if let Some(refusal) = eviction::refusal() {
        return Err(RedisError::String(refusal));
    }
    let request = args::acquire(&words[2..])?;
    let generated = request.token.is_none();
    let token = request.token.unwrap_or_else(Token::generate);
    let now = now_ms(ctx);
    let wait = if may_block(ctx) { request.wait } else { 0 };
    let outcome = change(ctx, key, true, |project| {
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
                if waits::block(ctx, key, project, waiter, wait) {
                    Outcome::Waiting
                } else {
                    Outcome::Refused
                }
            }
            None => Outcome::Refused,
        }
    })?
    .unwrap_or(Outcome::Refused);
    let fence = match outcome {
        Outcome::Granted(fence) => fence,
        Outcome::Waiting => return Ok(RedisValue::NoReply),
        Outcome::Exhausted => return Err(RedisError::Str(ERR_FENCES_EXHAUSTED)),
        Outcome::Refused => {
            stats::count(&stats::CONFLICTS, 1);
            return Ok(RedisValue::Null);
        }
    };
    let reply = reply::send_grant(ctx, &token, fence);
    let deadline = now.saturating_add(request.ttl);
    grants::granted(
        ctx,
        key,
        token,
        deadline,
        fence,
        request.items,
        request.note,
    );
    Ok(reply)
}
