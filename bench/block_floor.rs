//! A module whose command blocks its client and does nothing else: the floor of the server's
//! module blocking API, which `make bench-waits` measures beside pathlock's waiters and `BLPOP`.
//!
//! `FLOOR.BLOCK ms` blocks the calling client the way pathlock blocks an `ACQUIRE ... WAIT`
//! (`RedisModule_BlockClient` with a reply and a timeout callback, and a disconnect callback),
//! with the server's own timeout of `ms` (0: none); `FLOOR.WAKE` answers every
//! blocked client `OK`. A client that times out or disconnects is unblocked at once, as pathlock
//! does, which releases the server's handle. The only memory of its own is the set of handles
//! it keeps to wake them, a few tens of bytes per client: everything else a blocked client
//! costs is the server's.
//!
//! Built with `cargo build --release --example block_floor` (a `cdylib`,
//! `target/release/examples/libblock_floor.so`).

use std::collections::BTreeSet;
use std::os::raw::{c_int, c_void};
use std::sync::Mutex;

use redis_module::{raw, redis_module, Context, RedisError, RedisResult, RedisString, RedisValue};

/// The handles of the clients blocked now, to wake them; a handle leaves when its client is
/// unblocked, so it is unblocked once.
static BLOCKED: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

fn blocked() -> std::sync::MutexGuard<'static, BTreeSet<usize>> {
    BLOCKED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Unblocks `client` with `data` for the reply callback, unless it was unblocked already.
fn unblock(client: usize, data: *mut c_void) {
    if blocked().remove(&client) {
        // SAFETY: `client` came from BlockClient and, having been in the set, was not unblocked.
        unsafe {
            if let Some(unblock) = raw::RedisModule_UnblockClient {
                unblock(client as *mut raw::RedisModuleBlockedClient, data);
            }
        }
    }
}

/// `FLOOR.BLOCK ms`: blocks the caller, with the server's timeout of `ms` milliseconds.
fn block(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let [_, ms] = args.as_slice() else {
        return Err(RedisError::WrongArity);
    };
    let ms = ms.parse_integer()?;
    // SAFETY: blocking the client of the command being executed, with callbacks that live as
    // long as the module.
    let client = unsafe {
        let Some(block) = raw::RedisModule_BlockClient else {
            return Err(RedisError::Str("no blocking API"));
        };
        block(ctx.ctx, Some(on_reply), Some(on_timeout), None, ms)
    };
    if client.is_null() {
        return Err(RedisError::Str("the server would not block the client"));
    }
    blocked().insert(client as usize);
    // SAFETY: `client` was just returned by BlockClient.
    unsafe {
        if let Some(set) = raw::RedisModule_SetDisconnectCallback {
            set(client, Some(on_disconnect));
        }
    }
    Ok(RedisValue::NoReply)
}

/// `FLOOR.WAKE`: answers every blocked client `OK`; replies how many there were.
fn wake(_ctx: &Context, _args: Vec<RedisString>) -> RedisResult {
    let clients: Vec<usize> = blocked().iter().copied().collect();
    for &client in &clients {
        // A non-null private data tells the reply callback that the client was woken.
        unblock(client, std::ptr::NonNull::<c_void>::dangling().as_ptr());
    }
    Ok(RedisValue::Integer(
        i64::try_from(clients.len()).unwrap_or(i64::MAX),
    ))
}

/// Writes a woken client's answer.
extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    Context::new(ctx).reply_simple_string("OK") as c_int
}

/// The server's timeout passed: the client is answered nil and its handle released.
extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: called by the server for a blocked client of this module.
    let client =
        unsafe { raw::RedisModule_GetBlockedClientHandle.map_or(std::ptr::null_mut(), |f| f(ctx)) };
    unblock(client as usize, std::ptr::null_mut());
    Context::new(ctx).reply(Ok(RedisValue::Null)) as c_int
}

/// The client disconnected: its handle is released.
extern "C" fn on_disconnect(
    _ctx: *mut raw::RedisModuleCtx,
    client: *mut raw::RedisModuleBlockedClient,
) {
    unblock(client as usize, std::ptr::null_mut());
}

redis_module! {
    name: "blockfloor",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    commands: [
        ["floor.block", block, "", 0, 0, 0, ""],
        ["floor.wake", wake, "", 0, 0, 0, ""],
    ],
}
