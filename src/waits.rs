//! Blocked clients of `ACQUIRE ... WAIT ms`.
//!
//! The engine decides who waits and who is granted (`pathlock_core::Project`); this file ties
//! its waiter ids to Redis's blocked clients. A waiter is granted inside the command that freed
//! its locks (a release, or an expiry reclaimed by a command or the expiry timer), so the grant
//! is replicated as a `GRANT` effect right after the effect that made room for it, and the
//! client is unblocked with its `[token, fence]`.
//!
//! Timeouts are the module's own timers, not Redis's: in Redis 7.0, a grant (`UnblockClient`)
//! and Redis's timeout of the same client in one event-loop iteration lose the grant's reply and
//! leave the client hanging. With module timers, a waiter leaves by exactly one `UnblockClient`,
//! from a grant or from its timer, whichever comes first.
//!
//! Work that Redis announces outside a command runs from a zero-delay timer, where keys can be
//! opened and effects replicated: a waiter that disconnected or was `CLIENT UNBLOCK`ed leaves
//! the queue and may let later waiters through (and a change to its key purges it first, so it
//! is never granted); waiters whose key was deleted, overwritten, renamed or moved away, or
//! flushed, are queued again on the key name they asked for, in their original order.

use std::collections::BTreeMap;
use std::os::raw::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use pathlock_core::{Grant, Project, Token, Waiter};
use redis_module::{raw, Context, ContextFlags, RedisString, RedisValue};

use crate::{clock, project, stats};

/// What the registry knows of one waiter.
struct Entry {
    client: usize,
    db: i32,
    key: Vec<u8>,
    waiter: Waiter,
    /// Its timeout timer, stopped when it is granted or leaves.
    timer: raw::RedisModuleTimerID,
}

/// Ordered maps rather than hash tables: a hash table that doubles stalls the command that makes
/// it grow, over a millisecond at 7,000 waiters.
#[derive(Default)]
struct Registry {
    next_id: u64,
    entries: BTreeMap<u64, Entry>,
    by_client: BTreeMap<usize, u64>,
    /// Waiters to remove from their queue (they gave up), and waiters to queue again.
    cancelled: Vec<(i32, Vec<u8>, u64)>,
    resubmit: Vec<u64>,
    moved: Vec<(i32, Vec<u8>)>,
    timer_armed: bool,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn with_registry<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut guard = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(Registry::default))
}

/// Whether this command may block: not inside `MULTI`, a script, a replicated or replayed
/// command, or any context Redis marks as unable to block.
pub fn may_block(ctx: &Context) -> bool {
    !ctx.get_flags().intersects(
        ContextFlags::MULTI
            | ContextFlags::LUA
            | ContextFlags::DENY_BLOCKING
            | ContextFlags::REPLICATED
            | ContextFlags::LOADING,
    )
}

fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: the context is the live one Redis gave this call.
    unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(ctx.ctx)) }
}

/// Blocks the calling client until `waiter` is granted or `timeout_ms` passes, and queues it in
/// `project`. Returns false when Redis would not block the client.
pub fn block(
    ctx: &Context,
    key: &RedisString,
    project: &mut Project,
    waiter: Waiter,
    timeout_ms: u64,
) -> bool {
    // SAFETY: blocking the client of the command being executed, with callbacks that live as
    // long as the module.
    let client = unsafe {
        let Some(block) = raw::RedisModule_BlockClient else {
            return false;
        };
        // No Redis timeout (see the top of this file); the timeout callback stays for
        // `CLIENT UNBLOCK`, which Redis allows only for clients that have one.
        block(
            ctx.ctx,
            Some(on_reply),
            Some(on_timeout),
            Some(free_reply),
            0,
        )
    };
    if client.is_null() {
        return false;
    }
    // SAFETY: `client` was just returned by BlockClient.
    unsafe {
        if let Some(set) = raw::RedisModule_SetDisconnectCallback {
            set(client, Some(on_disconnect));
        }
    }
    let id = with_registry(|r| {
        r.next_id += 1;
        let id = r.next_id;
        r.by_client.insert(client as usize, id);
        r.entries.insert(
            id,
            Entry {
                client: client as usize,
                db: selected_db(ctx),
                key: key.as_slice().to_vec(),
                waiter: waiter.clone(),
                timer: 0,
            },
        );
        id
    });
    project.enqueue(id, waiter);
    stats::track(&stats::CLIENTS_WAITING, 0, 1);
    let timer = start_timer(ctx, timeout_ms, id);
    with_registry(|r| {
        if let Some(entry) = r.entries.get_mut(&id) {
            entry.timer = timer;
        }
    });
    true
}

/// Starts waiter `id`'s timeout, with the id itself as the timer's data: nothing to allocate, and
/// nothing to free when the timer is stopped. A granted waiter's timer is stopped rather than
/// left to fire for nothing, which with thousands of waiters granted together would be
/// thousands of callbacks in one go when their timeouts came.
fn start_timer(ctx: &Context, timeout_ms: u64, id: u64) -> raw::RedisModuleTimerID {
    let period = i64::try_from(timeout_ms).unwrap_or(i64::MAX);
    // SAFETY: the callback lives as long as the module; the data is a plain integer.
    unsafe {
        raw::RedisModule_CreateTimer.map_or(0, |create| {
            create(ctx.ctx, period, Some(on_timer), id as usize as *mut c_void)
        })
    }
}

fn stop_timer(ctx: &Context, timer: raw::RedisModuleTimerID) {
    // SAFETY: stopping a timer of this module; its data is not a pointer, so it is not asked for.
    unsafe {
        if let Some(stop) = raw::RedisModule_StopTimer {
            stop(ctx.ctx, timer, std::ptr::null_mut());
        }
    }
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    time_out(&Context::new(ctx), data as usize as u64);
}

/// A waiter's time is up: answer nil, take it out of its queue, and let through the later
/// waiters it alone held up. Does nothing when the waiter was granted first.
fn time_out(ctx: &Context, id: u64) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(entry) = with_registry(|r| forget(r, id)) else {
            return;
        };
        stats::count(&stats::WAIT_TIMEOUTS, 1);
        unblock(entry.client, None);
        let original_db = selected_db(ctx);
        select_db(ctx, entry.db);
        let name = RedisString::create_from_slice(ctx.ctx, &entry.key);
        let now = clock::now_ms(ctx);
        if let Ok(Some(grants)) = project::change(ctx, &name, false, |p| p.cancel(now, id).1) {
            deliver(ctx, &name, grants);
        }
        select_db(ctx, original_db);
    }));
}

/// Unblocks a client with its reply (`None` answers nil). Every blocked client goes through
/// here exactly once, which also frees Redis's handle.
fn unblock(client: usize, reply: Option<(Token, u64)>) {
    let data = reply.map_or(std::ptr::null_mut(), |r| {
        Box::into_raw(Box::new(r)).cast::<c_void>()
    });
    // SAFETY: `client` came from BlockClient and has not been unblocked: registry entries are
    // removed before this is called, once.
    unsafe {
        if let Some(unblock) = raw::RedisModule_UnblockClient {
            unblock(client as *mut raw::RedisModuleBlockedClient, data);
        }
    }
}

/// Cancellations waiting for the timer on this key: applied before any change to the key, so a
/// waiter that gave up is never granted.
pub fn purge_cancelled(ctx: &Context, key: &[u8], project: &mut Project, now: u64) -> Vec<Grant> {
    let db = selected_db(ctx);
    let ids: Vec<u64> = with_registry(|r| {
        if r.cancelled.is_empty() {
            return Vec::new();
        }
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut r.cancelled)
            .into_iter()
            .partition(|(d, k, _)| *d == db && k == key);
        r.cancelled = rest;
        mine.into_iter().map(|(_, _, id)| id).collect()
    });
    ids.into_iter()
        .flat_map(|id| project.cancel(now, id).1)
        .collect()
}

/// Replicates and announces grants made for waiters, and unblocks their clients.
pub fn deliver(ctx: &Context, key: &RedisString, grants: Vec<Grant>) {
    for grant in grants {
        let reply = (grant.token.clone(), grant.fence);
        project::granted(
            ctx,
            key,
            grant.token,
            grant.deadline,
            grant.fence,
            grant.items,
        );
        stats::count(&stats::WAITS_GRANTED, 1);
        if let Some(entry) = with_registry(|r| forget(r, grant.waiter)) {
            stop_timer(ctx, entry.timer);
            unblock(entry.client, Some(reply));
        }
    }
}

fn forget(registry: &mut Registry, id: u64) -> Option<Entry> {
    let entry = registry.entries.remove(&id)?;
    registry.by_client.remove(&entry.client);
    stats::track(&stats::CLIENTS_WAITING, 1, 0);
    Some(entry)
}

/// The client stopped waiting without a grant (it disconnected, or `CLIENT UNBLOCK`): forget it
/// now, release Redis's handle, and have the timer take it out of its queue, which may let later
/// waiters through.
fn give_up(client: usize) {
    let found = defer(|r| {
        let id = r.by_client.get(&client).copied()?;
        let entry = forget(r, id)?;
        r.cancelled.push((entry.db, entry.key, id));
        Some(entry.timer)
    });
    if let Some(timer) = found {
        let ctx = MODULE_CTX.load(Ordering::Relaxed);
        if !ctx.is_null() {
            stop_timer(&Context::new(ctx), timer);
        }
        // Redis has already let the client go; this frees the handle without a reply.
        unblock(client, None);
    }
}

/// Queues work for the zero-delay timer, arming it unless it already is.
fn defer<R>(queue: impl FnOnce(&mut Registry) -> R) -> R {
    let (result, armed) =
        with_registry(|r| (queue(r), std::mem::replace(&mut r.timer_armed, true)));
    if !armed {
        arm_timer();
    }
    result
}

/// Called when the value of a key that may hold waiters leaves the keyspace or moves: its
/// waiters are queued again on the key they asked for.
pub fn requeue(waiter_ids: Vec<u64>) {
    if waiter_ids.is_empty() {
        return;
    }
    defer(|r| r.resubmit.extend(waiter_ids));
}

/// Every waiter of database `db` (all databases when `None`), for a flush.
pub fn requeue_db(db: Option<i32>) {
    let ids: Vec<u64> = with_registry(|r| {
        let mut ids: Vec<u64> = r
            .entries
            .iter()
            .filter(|(_, e)| db.is_none_or(|db| e.db == db))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    });
    requeue(ids);
}

/// The module's own context, kept from load time: timers need one, and the callbacks that
/// queue work here (unlink, flush, disconnect) run outside any command.
static MODULE_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

pub fn init(ctx: &Context) {
    // SAFETY: a detached context lives as long as the module and is only used on the main thread.
    let detached = unsafe {
        raw::RedisModule_GetDetachedThreadSafeContext.map_or(std::ptr::null_mut(), |f| f(ctx.ctx))
    };
    MODULE_CTX.store(detached, Ordering::Relaxed);
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_FLUSHDB,
        dataver: 1,
    };
    // SAFETY: subscribing with a callback that lives as long as the module.
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            subscribe(ctx.ctx, event, Some(on_flush));
        }
    }
}

fn arm_timer() {
    let ctx = MODULE_CTX.load(Ordering::Relaxed);
    if ctx.is_null() {
        return;
    }
    Context::new(ctx).create_timer(Duration::ZERO, |ctx: &Context, ()| run_deferred(ctx), ());
}

extern "C" fn on_flush(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_START || data.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: Redis passes a RedisModuleFlushInfo with the flush-database event.
        let info = unsafe { &*data.cast::<raw::RedisModuleFlushInfo>() };
        requeue_db(if info.dbnum < 0 {
            None
        } else {
            Some(info.dbnum)
        });
    }));
}

/// A key's value arrived under a new name (`RENAME`, `MOVE`): its waiters who asked for
/// another key are sorted out by the timer.
pub fn value_moved(ctx: &Context, key: &[u8]) {
    let db = selected_db(ctx);
    defer(|r| r.moved.push((db, key.to_vec())));
}

/// Runs the queued work; called from a timer, where keys can be opened and effects replicated.
fn run_deferred(ctx: &Context) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let (cancelled, mut resubmit, moved) = with_registry(|r| {
            r.timer_armed = false;
            (
                std::mem::take(&mut r.cancelled),
                std::mem::take(&mut r.resubmit),
                std::mem::take(&mut r.moved),
            )
        });
        let original_db = selected_db(ctx);
        let now = clock::now_ms(ctx);
        for (db, key) in moved {
            select_db(ctx, db);
            let name = RedisString::create_from_slice(ctx.ctx, &key);
            let _ = project::change(ctx, &name, false, |p| take_strays(db, &key, p));
        }
        // Requeued waiters may have been moved out just above.
        resubmit.extend(with_registry(|r| std::mem::take(&mut r.resubmit)));
        for (db, key, id) in cancelled {
            select_db(ctx, db);
            let name = RedisString::create_from_slice(ctx.ctx, &key);
            if let Ok(Some(grants)) = project::change(ctx, &name, false, |p| p.cancel(now, id).1) {
                deliver(ctx, &name, grants);
            }
        }
        resubmit.sort_unstable();
        resubmit.dedup();
        for id in resubmit {
            let Some((db, key, waiter)) = with_registry(|r| {
                r.entries
                    .get(&id)
                    .map(|e| (e.db, e.key.clone(), e.waiter.clone()))
            }) else {
                continue;
            };
            select_db(ctx, db);
            let name = RedisString::create_from_slice(ctx.ctx, &key);
            let outcome = project::change(ctx, &name, true, |p| {
                match p.acquire(now, &waiter.token, waiter.ttl, &waiter.items) {
                    Some(fence) => vec![Grant {
                        waiter: id,
                        deadline: now.saturating_add(waiter.ttl),
                        fence,
                        token: waiter.token.clone(),
                        items: waiter.items.clone(),
                    }],
                    None => {
                        p.enqueue(id, waiter.clone());
                        Vec::new()
                    }
                }
            });
            if let Ok(Some(grants)) = outcome {
                deliver(ctx, &name, grants);
            }
        }
        select_db(ctx, original_db);
    }));
}

fn select_db(ctx: &Context, db: i32) {
    // SAFETY: selecting a database on the caller's context.
    unsafe {
        if let Some(select) = raw::RedisModule_SelectDb {
            select(ctx.ctx, db);
        }
    }
}

/// Takes out of `project`, now stored under `(db, key)`, the waiters that asked for another key,
/// and queues them again on their own key.
fn take_strays(db: i32, key: &[u8], project: &mut Project) {
    let strays: Vec<u64> = with_registry(|r| {
        project
            .waiter_ids()
            .filter(|id| r.entries.get(id).is_none_or(|e| e.db != db || e.key != key))
            .collect()
    });
    if strays.is_empty() {
        return;
    }
    let (moved, stay): (Vec<_>, Vec<_>) = project
        .take_waiters()
        .into_iter()
        .partition(|(id, _)| strays.contains(id));
    for (id, waiter) in stay {
        project.enqueue(id, waiter);
    }
    with_registry(|r| r.resubmit.extend(moved.into_iter().map(|(id, _)| id)));
}

extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let reply = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the private data was set by `deliver` as a boxed `(Token, u64)`.
        let data = unsafe {
            raw::RedisModule_GetBlockedClientPrivateData.map_or(std::ptr::null_mut(), |f| f(ctx))
        };
        if data.is_null() {
            return RedisValue::Null;
        }
        let (token, fence) = unsafe { &*data.cast::<(Token, u64)>() };
        project::grant_reply(token, *fence)
    }))
    .unwrap_or(RedisValue::Null);
    context.reply(Ok(reply)) as c_int
}

extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: called by Redis for a blocked client of this module.
        let client = unsafe {
            raw::RedisModule_GetBlockedClientHandle.map_or(std::ptr::null_mut(), |f| f(ctx))
        };
        stats::count(&stats::WAIT_TIMEOUTS, 1);
        give_up(client as usize);
    }));
    context.reply(Ok(RedisValue::Null)) as c_int
}

extern "C" fn on_disconnect(
    _ctx: *mut raw::RedisModuleCtx,
    client: *mut raw::RedisModuleBlockedClient,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| give_up(client as usize)));
}

extern "C" fn free_reply(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: created by `Box::into_raw` in `deliver`.
        drop(unsafe { Box::from_raw(data.cast::<(Token, u64)>()) });
    }
}
