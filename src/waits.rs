//! Blocking `ACQUIRE ... WAIT ms`: queueing a waiter, its timeout, and working off the signals
//! that the rest of the module queued about waiters.
//!
//! Level 7: imports `blocked`, `change`, `clock`, `contain`, `context`, `errors`, `grants`,
//! `registry`, `slot`, `stats`, `store`. Called by the ACQUIRE handler (`block`, through
//! `commands::Call`); `lib.rs` registers `work_off_signals` as the registry's worker.
//!
//! The engine decides who waits and who is granted (`pathlock_core::Project`); this file ties
//! its waiter ids to Redis's blocked clients. A waiter is granted inside the change that freed
//! its locks (a release, or an expiry reclaimed by a command or the expiry timer), so the grant
//! is replicated as a `GRANT` effect right after the effect that made room for it (`grants`).

use std::collections::BTreeSet;
use std::os::raw::c_void;
use std::time::Duration;

use pathlock_core::{Grant, Project, Request, Waiter};
use redis_module::{raw, Context, ContextFlags, RedisString, RedisValue};

use crate::blocked::Answer;
use crate::change::{change_existing, change_or_create};
use crate::contain::contained;
use crate::context::{selected_db, serves};
use crate::errors::{
    moved_migrated, ERR_MOVED_RENAMED, ERR_MOVED_SWAPPED, ERR_REPLACED, ERR_TRYAGAIN, ERR_UNBLOCKED,
};
use crate::registry::Away;
use crate::slot::key_slot;
use crate::store::{ServerKey, Store};
use crate::{blocked, clock, grants, registry, stats};

/// Blocks the calling client until `waiter` is granted or `timeout_ms` passes, and queues it in
/// `project`. Returns false when Redis would not block the client.
pub fn block(
    ctx: &Context,
    key: &RedisString,
    project: &mut Project,
    waiter: Waiter,
    timeout_ms: u64,
) -> bool {
    let Some(client) = blocked::block_client(ctx) else {
        return false;
    };
    let deadline = registry::monotonic_us().saturating_add(timeout_ms.saturating_mul(1000));
    let id = registry::register(client, selected_db(ctx), key.as_slice(), deadline);
    project.enqueue(id, waiter);
    set_timeout_timer(ctx);
    true
}

/// The waiters timed out by one call of the timer: a crowd of waiters that time out together
/// is answered a few at a time, with other clients served in between.
const TIMEOUTS_PER_CALL: usize = 64;

/// Sets the timeout timer for the earliest deadline of the registry's waiters, unless it is set
/// for that deadline or an earlier one already: waiters that wait longer than the earliest
/// (nearly all of them) cost no timer call. A timer set for a waiter that was granted meanwhile
/// fires for nothing and is set again for the next deadline.
fn set_timeout_timer(ctx: &Context) {
    let (Some(next), timer) = registry::timeouts() else {
        return;
    };
    if let Some((id, at)) = timer {
        if at <= next {
            return;
        }
        // SAFETY: stopping this module's timer, whose data is not a pointer and so is not
        // asked for; a timer that already fired is unknown to Redis and the call does nothing.
        unsafe {
            if let Some(stop) = raw::RedisModule_StopTimer {
                stop(ctx.ctx, id, std::ptr::null_mut());
            }
        }
    }
    // Rounded up: a timer that fires early finds nobody due and is set again, which is also how
    // a wait longer than the longest timer (`clock::MAX_TIMER_DELAY`, which says why) is met.
    let most = clock::MAX_TIMER_DELAY.as_millis() as u64;
    let delay = next
        .saturating_sub(registry::monotonic_us())
        .div_ceil(1000)
        .min(most);
    // The conversion cannot fail (the delay is at most `most`, 30 minutes). Were it to, `most`
    // is the safe fallback: a zero delay would fire at once, find the same wait and set the same
    // zero delay again, a loop that keeps the event loop busy.
    let delay = i64::try_from(delay).unwrap_or(i64::MAX).min(most as i64);
    // SAFETY: the callback lives as long as the module; the timer has no data.
    let id = unsafe {
        raw::RedisModule_CreateTimer.map_or(0, |create| {
            create(ctx.ctx, delay, Some(on_timer), std::ptr::null_mut())
        })
    };
    registry::set_timeout_timer(Some((id, next)));
}

/// The waiters' timeout timer fired: answers nil to the waiters whose time is up, a few at a
/// time, and sets the timer for the next deadline.
extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    let ctx = Context::new(ctx);
    let due = contained("the waiters' timeout timer", Vec::new(), || {
        registry::set_timeout_timer(None);
        registry::due(registry::monotonic_us(), TIMEOUTS_PER_CALL)
    });
    // Each on its own, so that a failure with one waiter leaves the others' timeouts alone.
    for id in due {
        contained("a waiter's timeout", (), || time_out(&ctx, id));
    }
    contained("the waiters' timeout timer", (), || set_timeout_timer(&ctx));
}

/// A waiter's time is up: answer nil, take it out of its queue, and let through the later
/// waiters it alone held up. Does nothing when the waiter was granted first. While replication
/// is paused, leaving the queue (which may grant the waiters behind it) waits for the pause to
/// end, as a disconnected waiter's does.
fn time_out(ctx: &Context, id: u64) {
    let Some(entry) = registry::forget(id) else {
        return;
    };
    stats::count(&stats::WAIT_TIMEOUTS, 1);
    blocked::unblock(entry.client, Answer::Nil);
    if replication_paused() {
        registry::cancel_later(entry.db, entry.key.into_vec(), id);
        return;
    }
    let now = clock::now_ms(ctx);
    ServerKey::visit(ctx, entry.db, &entry.key, |key| cancel(key, now, id));
}

/// How long the worker waits before looking again while replication is paused.
const PAUSED_RETRY: Duration = Duration::from_millis(10);

/// Whether the server pauses replication now (`CLIENT PAUSE WRITE`, a manual failover, the last
/// step of an atomic slot migration): then nothing outside a command may change a project, since
/// the server would refuse to propagate it, and a change that the stream did not carry is lost
/// to the replica or the slot's new owner that takes over.
fn replication_paused() -> bool {
    // SAFETY: takes no arguments and only reads server state.
    unsafe { raw::RedisModule_AvoidReplicaTraffic.map_or(0, |f| f()) != 0 }
}

/// Works off the registry's signals; runs from a zero-delay timer, where keys can be opened and
/// effects replicated. While replication is paused it looks again a little later. The signals
/// are worked off in this order: values that moved under a new name give up their strays,
/// waiters whose value left their key are sorted into those answered and those queued again,
/// the waiters whose project left are answered, cancelled waiters leave their queues, and the
/// waiters to queue again are queued.
pub fn work_off_signals(ctx: &Context) {
    contained("the waiters' signal worker", (), || {
        if replication_paused() {
            registry::retry_later(PAUSED_RETRY);
            return;
        }
        let signals = registry::take_signals();
        let mut away = signals.moved_away;
        if !ctx.get_flags().contains(ContextFlags::MASTER) {
            // A replica decides nothing: its waiters were all answered when it turned replica,
            // and its queues are emptied without a grant.
            answer_away(ctx, away);
            return;
        }
        let mut resubmit = signals.resubmit;
        let now = clock::now_ms(ctx);
        for (db, key) in signals.moved {
            away.extend(take_moved_strays(ctx, db, &key));
        }
        sort_unlinked(ctx, signals.unlinked, &mut away, &mut resubmit);
        answer_away(ctx, away);
        for (db, key, id) in signals.cancelled {
            ServerKey::visit(ctx, db, &key, |key| cancel(key, now, id));
        }
        // In arrival order, each once: a waiter keeps its place among those queued again.
        resubmit.sort_unstable_by_key(|(id, _)| *id);
        resubmit.dedup_by_key(|(id, _)| *id);
        for (id, waiter) in resubmit {
            if let Some((db, key)) = registry::place(id) {
                ServerKey::visit(ctx, db, &key, |key| resubmit_one(key, now, id, waiter));
            }
        }
    });
}

/// A value with waiters that arrived under `(db, key)` by `RENAME` or `MOVE`: the waiters that
/// asked for another name leave its queue, to be answered that their project moved.
fn take_moved_strays(ctx: &Context, db: i32, key: &[u8]) -> Vec<(u64, Away)> {
    let moved = ServerKey::visit(ctx, db, key, |opened| {
        change_existing(opened, |p| take_strays(db, key, p))
    });
    match moved {
        Ok(Some(strays)) => strays.into_iter().map(|id| (id, Away::Renamed)).collect(),
        _ => Vec::new(),
    }
}

/// Waiters whose value left their key: the value was deleted when the name is now free (its
/// waiters start over there, as after a `DEL`, and go to `resubmit` with their requests) and
/// replaced when another value holds it (they go to `away`). Those already in `away` are
/// answered already.
fn sort_unlinked(
    ctx: &Context,
    unlinked: Vec<(u64, Waiter)>,
    away: &mut Vec<(u64, Away)>,
    resubmit: &mut Vec<(u64, Waiter)>,
) {
    // A set, so that sorting out many waiters costs what they are, not its square.
    let answered: BTreeSet<u64> = away.iter().map(|(id, _)| *id).collect();
    for (id, waiter) in unlinked {
        if answered.contains(&id) {
            continue;
        }
        if let Some((db, key)) = registry::place(id) {
            if ServerKey::visit(ctx, db, &key, |key| key.holds_value()) {
                away.push((id, Away::Replaced));
            } else {
                resubmit.push((id, waiter));
            }
        }
    }
}

/// A waiter that was answered already (its client gave up, its time ran out, its database was
/// swapped away) leaves its queue; the waiters it alone held up are granted.
fn cancel(key: &ServerKey, now: u64, id: u64) {
    if let Ok(Some(grants)) = change_existing(key, |p| p.cancel(now, id).1) {
        grants::deliver(key, grants);
    }
}

/// Answers the waiters whose project left the key they waited on. In Cluster, a migrated
/// project's waiters are redirected with `-ASK <slot> <host>:<port>`, as Redis redirects a
/// client to the node importing the slot, and those of a slot handed over by an atomic slot
/// migration with `-MOVED <slot> <host>:<port>` of its new owner, as Redis answers its own
/// blocked clients (`clusterRedirectBlockedClientIfNeeded`), so cluster clients follow the
/// project.
fn answer_away(ctx: &Context, away: Vec<(u64, Away)>) {
    let cluster = ctx.get_flags().contains(ContextFlags::CLUSTER);
    let mut owners: Option<Vec<SlotOwner>> = None;
    for (id, why) in away {
        let Some(entry) = registry::forget(id) else {
            continue;
        };
        let message = match why {
            Away::Renamed => ERR_MOVED_RENAMED.to_string(),
            Away::Replaced => ERR_REPLACED.to_string(),
            Away::Swapped => ERR_MOVED_SWAPPED.to_string(),
            Away::Migrated(Some(to)) if cluster => {
                format!("ASK {} {to}", key_slot(&entry.key))
            }
            // Retried, the command is routed by Redis to where the slot is now.
            Away::Migrated(None) if cluster => ERR_TRYAGAIN.to_string(),
            Away::Migrated(to) => moved_migrated(to.as_deref()),
            Away::SlotMoved => {
                let slot = key_slot(&entry.key);
                let owners = owners.get_or_insert_with(|| slot_owners(ctx));
                match owners.iter().find(|o| (o.start..=o.end).contains(&slot)) {
                    Some(owner) if cluster => format!("MOVED {slot} {}", owner.address),
                    _ => ERR_TRYAGAIN.to_string(),
                }
            }
            Away::Demoted => {
                // The queue goes with its waiters; nobody is granted on a replica.
                ServerKey::visit(ctx, entry.db, &entry.key, |key| {
                    let _ = key.write_existing(|p| drop(p.take_waiters()));
                });
                ERR_UNBLOCKED.to_string()
            }
        };
        blocked::answer(&entry, Answer::Error(message));
    }
}

/// A range of slots and the address of the master that serves it.
struct SlotOwner {
    start: u16,
    end: u16,
    address: String,
}

/// The masters of every slot range, from `CLUSTER SLOTS` (`[start, end, [host, port, ...], ...]`);
/// empty when it cannot be read, and the waiters are then told to retry.
fn slot_owners(ctx: &Context) -> Vec<SlotOwner> {
    let Ok(RedisValue::Array(ranges)) = ctx.call("CLUSTER", &["SLOTS"]) else {
        return Vec::new();
    };
    let number = |value: Option<&RedisValue>| match value {
        Some(RedisValue::Integer(n)) => Some(*n),
        _ => None,
    };
    let text = |value: Option<&RedisValue>| match value {
        Some(RedisValue::SimpleString(s) | RedisValue::BulkString(s)) => Some(s.clone()),
        Some(RedisValue::BulkRedisString(s)) => Some(s.to_string_lossy()),
        _ => None,
    };
    ranges
        .iter()
        .filter_map(|range| {
            let RedisValue::Array(parts) = range else {
                return None;
            };
            let Some(RedisValue::Array(master)) = parts.get(2) else {
                return None;
            };
            Some(SlotOwner {
                start: u16::try_from(number(parts.first())?).ok()?,
                end: u16::try_from(number(parts.get(1))?).ok()?,
                address: format!("{}:{}", text(master.first())?, number(master.get(1))?),
            })
        })
        .collect()
}

/// Queues a waiter again on the key name it asked for (or grants it, if nothing there blocks it
/// now), keeping its id and so its place among the waiters.
fn resubmit_one(store: &ServerKey, now: u64, id: u64, waiter: Waiter) {
    // A grant, and the key it may create, happen only on a node that serves the key's slot: in
    // Cluster, Redis refuses a module's call on a key it does not serve here (another node's
    // slot, or a missing key in a slot being migrated away), and the waiter is told to retry,
    // which routes it to where the slot is now.
    if !serves(store.ctx, store.key) {
        answer(id, ERR_TRYAGAIN.to_string());
        return;
    }
    let outcome = change_or_create(store, |p| {
        let request = Request {
            token: &waiter.token,
            generated: false,
            ttl: waiter.ttl,
            items: &waiter.items,
            note: waiter.note.as_ref(),
        };
        match p.acquire_request(now, &request) {
            Some(fence) => vec![Grant {
                waiter: id,
                deadline: now.saturating_add(waiter.ttl),
                fence,
                token: waiter.token.clone(),
                items: waiter.items.clone(),
                note: waiter.note.clone(),
            }],
            None => {
                p.enqueue(id, waiter.clone());
                Vec::new()
            }
        }
    });
    match outcome {
        Ok(grants) => grants::deliver(store, grants),
        // Another value took the name meanwhile.
        Err(error) => answer(id, error.to_string()),
    }
}

/// Answers a waiter an error, if it is still waiting.
fn answer(id: u64, message: String) {
    if let Some(entry) = registry::forget(id) {
        blocked::answer(&entry, Answer::Error(message));
    }
}

/// Takes out of `project`, now stored under `(db, key)`, the waiters that asked for another key
/// (it was renamed or moved here), and returns them.
fn take_strays(db: i32, key: &[u8], project: &mut Project) -> Vec<u64> {
    let strays = registry::strays(db, key, project.waiter_ids());
    if strays.is_empty() {
        return Vec::new();
    }
    let strays: BTreeSet<u64> = strays.into_iter().collect();
    let (moved, stay): (Vec<_>, Vec<_>) = project
        .take_waiters()
        .into_iter()
        .partition(|(id, _)| strays.contains(id));
    for (id, waiter) in stay {
        project.enqueue(id, waiter);
    }
    moved.into_iter().map(|(id, _)| id).collect()
}
