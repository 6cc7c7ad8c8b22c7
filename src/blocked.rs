//! The blocking API: blocking the client of an `ACQUIRE ... WAIT`, unblocking it with its
//! reply, and the callbacks Redis calls for blocked clients.
//!
//! Level 2: imports `contain`, `errors`, `registry`, `reply`, `stats`. Called by `waits` (block)
//! and `grants` (unblock with a grant).
//!
//! Timeouts are the module's own (`waits`, one timer for the earliest deadline of the
//! registry's), not Redis's: in Redis 7.0, a grant (`UnblockClient`) and Redis's timeout of the
//! same client in one event-loop iteration lose the grant's reply and leave the client hanging.
//! With the module's timer, a waiter leaves by exactly one `UnblockClient`, from a grant or from
//! its timeout, whichever comes first. The timeout callback
//! stays registered for `CLIENT UNBLOCK`, which Redis allows only for clients that have one.

use std::os::raw::{c_int, c_void};

use pathlock_core::Token;
use redis_module::{raw, Context, RedisError, RedisValue};

use crate::contain::contained;
use crate::{errors, registry, reply, stats};

/// Blocks the calling client, with no Redis timeout; `None` when Redis would not block it.
pub fn block_client(ctx: &Context) -> Option<usize> {
    // SAFETY: blocking the client of the command being executed, with callbacks that live as
    // long as the module.
    let client = unsafe {
        let block = raw::RedisModule_BlockClient?;
        block(
            ctx.ctx,
            Some(on_reply),
            Some(on_timeout),
            Some(free_reply),
            0,
        )
    };
    if client.is_null() {
        return None;
    }
    // SAFETY: `client` was just returned by BlockClient.
    unsafe {
        if let Some(set) = raw::RedisModule_SetDisconnectCallback {
            set(client, Some(on_disconnect));
        }
    }
    Some(client as usize)
}

/// What a blocked client is answered.
pub enum Answer {
    /// `[token, fence]`.
    Granted(Token, u64),
    /// Nil: its time ran out.
    Nil,
    /// An error: its project left the key it waited on.
    Error(String),
}

/// Unblocks a client with its answer. Every blocked client goes through here exactly once,
/// which also frees Redis's handle.
pub fn unblock(client: usize, answer: Answer) {
    let data = match answer {
        Answer::Nil => std::ptr::null_mut(),
        answer => Box::into_raw(Box::new(answer)).cast::<c_void>(),
    };
    // SAFETY: `client` came from BlockClient and has not been unblocked: registry entries are
    // removed before this is called, once.
    unsafe {
        if let Some(unblock) = raw::RedisModule_UnblockClient {
            // Timed for the expiry cycle's figures, when the cycle grants a waiter.
            stats::in_server(|| unblock(client as *mut raw::RedisModuleBlockedClient, data));
        }
    }
}

/// Answers a waiter the registry has just forgotten (which also took it off the timeout
/// schedule), by unblocking its client.
pub fn answer(entry: &registry::Entry, answer: Answer) {
    unblock(entry.client, answer);
}

/// The client stopped waiting without a grant (it disconnected, or `CLIENT UNBLOCK`): the
/// registry forgets it and signals that it left its queue, and Redis's handle is released.
fn give_up(client: usize) {
    if registry::give_up(client) {
        // Redis has already let the client go; this frees the handle without a reply.
        unblock(client, Answer::Nil);
    }
}

/// A blocked client was unblocked (`unblock`): writes its answer, a grant, nil or an error.
extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let reply = contained("a blocked client's reply", Ok(RedisValue::Null), || {
        // SAFETY: the private data was set by `unblock` as a boxed `Answer`.
        let data = unsafe {
            raw::RedisModule_GetBlockedClientPrivateData.map_or(std::ptr::null_mut(), |f| f(ctx))
        };
        if data.is_null() {
            return Ok(RedisValue::Null);
        }
        match unsafe { &*data.cast::<Answer>() } {
            Answer::Granted(token, fence) => Ok(reply::send_grant(&context, token, *fence)),
            Answer::Nil => Ok(RedisValue::Null),
            Answer::Error(message) => Err(RedisError::String(message.clone())),
        }
    });
    context.reply(errors::for_redis_module(reply)) as c_int
}

/// A blocked client's own timeout passed: it gives up its place, and is answered nil.
extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    contained("a blocked client's timeout", (), || {
        // SAFETY: called by Redis for a blocked client of this module.
        let client = unsafe {
            raw::RedisModule_GetBlockedClientHandle.map_or(std::ptr::null_mut(), |f| f(ctx))
        };
        stats::count(&stats::WAIT_TIMEOUTS, 1);
        give_up(client as usize);
    });
    context.reply(Ok(RedisValue::Null)) as c_int
}

/// A blocked client disconnected (or `CLIENT UNBLOCK`): it gives up its place in the queue.
extern "C" fn on_disconnect(
    _ctx: *mut raw::RedisModuleCtx,
    client: *mut raw::RedisModuleBlockedClient,
) {
    contained("a blocked client's disconnection", (), || {
        give_up(client as usize)
    });
}

/// Frees the answer `unblock` handed to Redis, once it was written.
extern "C" fn free_reply(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: created by `Box::into_raw` in `unblock`.
        drop(unsafe { Box::from_raw(data.cast::<Answer>()) });
    }
}
