//! The one function every change to a project goes through, whoever makes it (a command, a
//! waiter's timeout, the expiry cycle, the signal worker).
//!
//! Level 4: imports `store`, `registry`, `grants`, `effects`, `schedule`, `context`, `clock`,
//! `stats`, `fences`, `eviction`. Called by the writing commands, `waits` and `expiry`.
//!
//! Before the change, when this server decides: waiters that gave up are taken out of the
//! queue (so they are never granted), and a bounded share of the expired locks is reclaimed
//! (`LAZY_OWNERS` owners, earliest first). The change itself reclaims what it needs: the
//! expired locks in the way of what it acquires (or of a waiter it grants) and its caller's own
//! expired locks; a mass expiry is otherwise left to the expiry cycle, so no command pays for
//! all of it. Whatever was reclaimed is replicated as `EXPIRE now token...`, naming the owners,
//! ahead of whatever the change replicates; it may grant waiters. After it: the INFO gauge, the
//! expiry schedule and the server's fence mark (`fences`) follow the table, whether a grant or
//! an applied effect moved its counter. The expiry cycle's change (`expire_until`) does the same
//! with its reclamation bounded in time.

use std::time::Instant;

use pathlock_core::{Grant, Project};
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
        let before = Counts::of(project);
        if decides(ctx) {
            let now = clock::now_ms(ctx);
            purge_cancelled(ctx, key_name, project, now);
            project.reclaim_lazily(now, None, LAZY_OWNERS);
            publish_lapsed(ctx, key_name, project);
        }
        let result = change(project);
        publish_lapsed(ctx, key_name, project);
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
        let before = Counts::of(project);
        purge_cancelled(ctx, key_name, project, now);
        let mut reclaimed = 0;
        let mut done = false;
        while Instant::now() < until {
            let (freed, grants) = project.expire_some(now, OWNERS_PER_STEP);
            if freed.tokens.is_empty() {
                done = true;
                break;
            }
            Effect::ExpireOf {
                now,
                tokens: freed.tokens,
            }
            .replicate(ctx, key_name);
            reclaimed += freed.locks;
            // The waiters the step let in may have reclaimed more lapsed owners in their way,
            // which replicate ahead of their grants.
            publish_lapsed(ctx, key_name, project);
            grants::deliver(ctx, key_name, grants);
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

/// Owners whose due locks every change reclaims besides those it needs, earliest first, so that
/// traffic on a key helps the expiry cycle along at a small fixed cost per command.
const LAZY_OWNERS: usize = 2;

/// Owners named in one `EXPIRE now token...` effect at most, so that a request that reclaimed
/// many in its way does not make one huge effect.
const OWNERS_PER_EFFECT: usize = 256;

/// Replicates what lazy expiry reclaimed since the last call as `EXPIRE now token...` effects,
/// in the order it happened, counts and announces it, and answers the waiters it let in.
fn publish_lapsed(ctx: &Context, key_name: &RedisString, project: &mut Project) {
    if !project.has_lapsed() {
        return;
    }
    let lapsed = project.take_lapsed();
    for run in lapsed.owners.chunk_by(|a, b| a.0 == b.0) {
        for step in run.chunks(OWNERS_PER_EFFECT) {
            Effect::ExpireOf {
                now: step[0].0,
                tokens: step.iter().map(|(_, token)| token.clone()).collect(),
            }
            .replicate(ctx, key_name);
        }
    }
    if lapsed.locks > 0 {
        stats::count(&stats::EXPIRATIONS, lapsed.locks);
        notify(ctx, c"pathlock.expired", key_name);
    }
    grants::deliver(ctx, key_name, lapsed.grants);
}

/// Takes the waiters that gave up out of the queue before anything else happens to the key, so
/// they are never granted; their leaving may let later waiters in.
fn purge_cancelled(ctx: &Context, key_name: &RedisString, project: &mut Project, now: u64) {
    // Nearly always nobody gave up: then this costs one load, not the registry's lock and the
    // key's database and name.
    if !registry::any_cancelled() {
        return;
    }
    let cancelled = registry::take_cancelled(selected_db(ctx), key_name.as_slice());
    if cancelled.is_empty() {
        return;
    }
    let grants: Vec<Grant> = cancelled
        .into_iter()
        .flat_map(|id| project.cancel(now, id).1)
        .collect();
    // The expired locks a cancelled waiter's successors had in their way went first.
    publish_lapsed(ctx, key_name, project);
    grants::deliver(ctx, key_name, grants);
}

/// After every change: the INFO gauge, the expiry schedule, the background work and the fence
/// mark follow the table.
fn settle(ctx: &Context, key_name: &RedisString, project: &Project, before: Counts) {
    fences::observe(project.locks().next_fence());
    before.track(project);
    schedule::schedule(ctx, key_name.as_slice(), project.locks().next_deadline());
    if project.locks().has_background_work() {
        schedule::pending(ctx, key_name.as_slice());
    }
}

/// A project's counts in the INFO gauges, taken before a change so that the gauges move by what
/// it changed.
#[derive(Clone, Copy)]
struct Counts {
    locks: usize,
    freeing: usize,
}

impl Counts {
    fn of(project: &Project) -> Counts {
        Counts {
            locks: project.locks().len(),
            freeing: project.locks().freeing(),
        }
    }

    fn track(self, project: &Project) {
        stats::track(&stats::LOCKS_HELD, self.locks, project.locks().len());
        stats::track(
            &stats::LOCKS_FREEING,
            self.freeing,
            project.locks().freeing(),
        );
    }
}

/// The background work of one key (`LockTable::free_some`: a released or lapsed big owner's
/// locks, the arenas' free tails), in steps of `FREED_PER_STEP` until none is left or `until`
/// has passed. It changes nothing a client or a replica can see, so every server does it on
/// its own, replicating nothing. Returns whether work is left; a name that holds no project
/// has none.
pub fn free_until(ctx: &Context, key_name: &RedisString, until: Instant) -> bool {
    let more = store::maintain(ctx, key_name, |project| {
        let before = Counts::of(project);
        while Instant::now() < until {
            if project.locks_mut().free_some(FREED_PER_STEP) == 0 {
                break;
            }
        }
        before.track(project);
        project.locks().has_background_work()
    });
    more.ok().flatten().unwrap_or(false)
}

/// Locks (or arena slots) freed per step of the background work: some tens of microseconds.
const FREED_PER_STEP: usize = 64;
