//! The one function every change to a project goes through, whoever makes it (a command, a
//! waiter's timeout, the expiry cycle, the signal worker).
//!
//! Level 4: imports `store`, `registry`, `grants`, `effects`, `schedule`, `context`, `clock`,
//! `stats`, `fences`, `eviction`. Called by the writing commands, `waits` and `expiry`.
//!
//! Before the change, when this server decides: waiters that gave up are taken out of the
//! queue (so they are never granted), and expired locks are reclaimed, replicated as an
//! `EXPIRE` effect ahead of whatever the change replicates; both may grant waiters. After it:
//! the INFO gauge, the expiry schedule and the server's fence mark (`fences`) follow the
//! table, whether a grant or an applied effect moved its counter. The expiry cycle's change
//! (`expire_until`) does the same with its reclamation bounded in time.

use std::time::Instant;

use pathlock_core::{Grant, Path, Project};
use redis_module::{Context, RedisError, RedisString};

use crate::context::{decides, notify, selected_db};
use crate::effects::Effect;
use crate::{clock, eviction, fences, grants, registry, schedule, stats, store};

pub fn change<R>(
    ctx: &Context,
    key_name: &RedisString,
    create: bool,
    change: impl FnOnce(&mut Project) -> R,
) -> Result<Option<R>, RedisError> {
    let result = store::write(ctx, key_name, create, |project| {
        let before = project.locks().len();
        if decides(ctx) {
            let now = clock::now_ms(ctx);
            purge_cancelled(ctx, key_name, project, now);
            let (expired, grants) = project.reclaim_expired(now);
            if !expired.is_empty() {
                Effect::Expire { now }.replicate(ctx, key_name);
                stats::count(&stats::EXPIRATIONS, expired.len());
                notify(ctx, c"pathlock.expired", key_name);
                grants::deliver(ctx, key_name, grants);
            }
        }
        let result = change(project);
        settle(ctx, key_name, project, before);
        result
    })?;
    // Where the maxmemory policy can evict projects, each change marks the key as just used.
    eviction::protect(ctx, key_name);
    Ok(result)
}

/// The expiry cycle's change of one key: reclaims its locks due by `now`, a step of a few owners
/// at a time, until none is due or `until` has passed. Each step replicates as `EXPIRE now
/// token...` naming the owners it reclaimed and wakes the waiters near what it freed. Returns
/// whether nothing due is left; a name that holds no project has nothing due.
pub fn expire_until(ctx: &Context, key_name: &RedisString, now: u64, until: Instant) -> bool {
    let done = store::write(ctx, key_name, false, |project| {
        let before = project.locks().len();
        purge_cancelled(ctx, key_name, project, now);
        let mut reclaimed = 0;
        let mut done = false;
        while Instant::now() < until {
            let (tokens, locks) = project
                .locks_mut()
                .reclaim_some_expired(now, OWNERS_PER_STEP);
            if tokens.is_empty() {
                done = true;
                break;
            }
            Effect::ExpireOf { now, tokens }.replicate(ctx, key_name);
            reclaimed += locks.len();
            if project.waiting() > 0 {
                let freed: Vec<Path> = locks.into_iter().map(|lock| lock.path).collect();
                let grants = project.wake(now, &freed);
                grants::deliver(ctx, key_name, grants);
            }
        }
        if reclaimed > 0 {
            stats::count(&stats::EXPIRATIONS, reclaimed);
            notify(ctx, c"pathlock.expired", key_name);
        }
        settle(ctx, key_name, project, before);
        done
    });
    done.ok().flatten().unwrap_or(true)
}

/// Owners reclaimed per step of the expiry cycle, and named in one `EXPIRE` effect: small
/// enough that a step of one-lock owners takes some tens of microseconds.
const OWNERS_PER_STEP: usize = 32;

/// Takes the waiters that gave up out of the queue before anything else happens to the key, so
/// they are never granted; their leaving may let later waiters in.
fn purge_cancelled(ctx: &Context, key_name: &RedisString, project: &mut Project, now: u64) {
    let cancelled = registry::take_cancelled(selected_db(ctx), key_name.as_slice());
    if cancelled.is_empty() {
        return;
    }
    let grants: Vec<Grant> = cancelled
        .into_iter()
        .flat_map(|id| project.cancel(now, id).1)
        .collect();
    grants::deliver(ctx, key_name, grants);
}

/// After every change: the INFO gauge, the expiry schedule and the fence mark follow the table.
fn settle(ctx: &Context, key_name: &RedisString, project: &Project, before: usize) {
    fences::observe(project.locks().next_fence());
    stats::track(&stats::LOCKS_HELD, before, project.locks().len());
    schedule::schedule(ctx, key_name.as_slice(), project.locks().next_deadline());
}
