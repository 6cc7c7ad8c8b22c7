//! Replies, built without Redis: the entries of `LOCKS`, `CHECK` and `WAITERS` and the
//! `[token, fence]` of a grant. The one exception is `send_grant`, the hot path's grant written
//! straight to the client. The last check every reply passes before it reaches redis-module is
//! `errors::for_redis_module`.
//!
//! Level 0: imports nothing of the crate. Called by the command handlers (for Redis and for the
//! fuzz harness alike) and the blocked-client reply callback.

use pathlock_core::{LockInfo, Note, Token, Waiter};
use redis_module::{raw, Context, RedisValue};

/// The entries of LOCKS and CHECK: `[path, mode, token, ttl-ms, fence, note]`, the note nil
/// when the lock has none.
pub fn lock_entries(locks: &[LockInfo], now: u64) -> RedisValue {
    RedisValue::Array(
        locks
            .iter()
            .map(|lock| {
                RedisValue::Array(vec![
                    RedisValue::StringBuffer(lock.path.to_bytes()),
                    RedisValue::BulkString(lock.mode.as_str().to_owned()),
                    RedisValue::StringBuffer(lock.token.as_bytes().to_vec()),
                    RedisValue::Integer(clamp(lock.deadline.saturating_sub(now))),
                    RedisValue::Integer(clamp(lock.fence)),
                    note(lock.note.as_ref()),
                ])
            })
            .collect(),
    )
}

/// One waiting request as `WAITERS` lists it, with how long it has waited and how long it has
/// left, in milliseconds.
pub struct WaiterEntry<'a> {
    pub waiter: &'a Waiter,
    pub waited_ms: u64,
    pub left_ms: u64,
}

/// The entries of WAITERS: `[token, [mode, path, ...], waited-ms, left-ms, note]`.
pub fn waiter_entries(waiters: &[WaiterEntry]) -> RedisValue {
    RedisValue::Array(
        waiters
            .iter()
            .map(|entry| {
                let items = entry
                    .waiter
                    .items
                    .iter()
                    .flat_map(|(mode, path)| {
                        [
                            RedisValue::BulkString(mode.as_str().to_owned()),
                            RedisValue::StringBuffer(path.to_bytes()),
                        ]
                    })
                    .collect();
                RedisValue::Array(vec![
                    RedisValue::StringBuffer(entry.waiter.token.as_bytes().to_vec()),
                    RedisValue::Array(items),
                    RedisValue::Integer(clamp(entry.waited_ms)),
                    RedisValue::Integer(clamp(entry.left_ms)),
                    note(entry.waiter.note.as_ref()),
                ])
            })
            .collect(),
    )
}

/// A note as its bytes, nil when there is none.
fn note(note: Option<&Note>) -> RedisValue {
    // A waiter's empty note (one that takes away what its locks had) is no note either.
    match note {
        Some(note) if !note.is_empty() => RedisValue::StringBuffer(note.to_vec()),
        _ => RedisValue::Null,
    }
}

/// The reply to a granted `ACQUIRE`: `[token, fence]`.
/// Answers a grant `[token, fence]` straight to the client and returns `NoReply` for the handler
/// to pass on: building the `RedisValue` of `grant` costs two allocations and their frees,
/// a tenth of an `ACQUIRE` with nothing else to do. The token is bytes, so no conversion can
/// fail here.
pub fn send_grant(ctx: &Context, token: &Token, fence: u64) -> RedisValue {
    let bytes = token.as_bytes();
    // SAFETY: replying on the command's own context, with a buffer that outlives the call
    // (Redis copies it).
    unsafe {
        if let (Some(array), Some(buffer), Some(integer)) = (
            raw::RedisModule_ReplyWithArray,
            raw::RedisModule_ReplyWithStringBuffer,
            raw::RedisModule_ReplyWithLongLong,
        ) {
            array(ctx.ctx, 2);
            buffer(ctx.ctx, bytes.as_ptr().cast(), bytes.len());
            integer(ctx.ctx, clamp(fence));
            return RedisValue::NoReply;
        }
    }
    grant(token, fence)
}

pub fn grant(token: &Token, fence: u64) -> RedisValue {
    RedisValue::Array(vec![
        RedisValue::StringBuffer(token.as_bytes().to_vec()),
        RedisValue::Integer(clamp(fence)),
    ])
}

fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
