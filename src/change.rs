//! The one way every change to a project's locks and queue goes, whoever makes it (a command, a
//! waiter's timeout, the signal worker, the expiry cycle with `expire_until`): `change_existing`
//! for a key that must exist already, `change_or_create` for one that is created when missing. Two
//! kinds of work open a key without it, through `store` directly, because they change nothing
//! a client, a replica or INFO's lock counts can see: freeing a buried owner's locks in the
//! background (`free_until`, below) and a demoted master dropping its queue (`waits`).
//!
//! Level 6: imports `effects`, `fences`, `grants`, `registry`, `stats`, `store`. Called by the
//! writing commands, `waits` and `expiry`. Generic over the storage seam (`store::Store`), so the
//! fuzz harness runs it as Redis does.
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
use redis_module::RedisError;

use crate::effects::{Effect, Kind};
use crate::store::{ServerKey, Store};
use crate::{fences, grants, registry, stats};

/// Changes the project of an existing key through `work`; a missing key answers `Ok(None)` and
/// stays missing (`RELEASE`, `RENEW`, a waiter's timeout, the signal worker).
pub fn change_existing<S: Store, R>(
    store: &S,
    work: impl FnOnce(&mut Project) -> R,
) -> Result<Option<R>, RedisError> {
    let result = store.write_existing(|project| around(store, project, work))?;
    // Where the maxmemory policy can evict projects, each change marks the key as just used.
    store.protect();
    Ok(result)
}

/// Changes the project of a key through `work`, creating the project first when the key is
/// missing (`ACQUIRE`, a waiter queued again, an effect that creates a key).
pub fn change_or_create<S: Store, R>(
    store: &S,
    work: impl FnOnce(&mut Project) -> R,
) -> Result<R, RedisError> {
    let result = store.write_or_create(|project| around(store, project, work))?;
    store.protect();
    Ok(result)
}

/// What happens around every change of an open project: the lazy work before it, when this
/// server decides, and after it the replication of what lapsed and the bookkeeping (`settle`).
#[inline]
fn around<S: Store, R>(
    store: &S,
    project: &mut Project,
    work: impl FnOnce(&mut Project) -> R,
) -> R {
    let before = Counts::of(project);
    if store.decides() {
        let now = store.now_ms();
        purge_cancelled(store, project, now);
        project.reclaim_lazily(now, None, LAZY_OWNERS);
        publish_lapsed(store, project);
    }
    let result = work(project);
    publish_lapsed(store, project);
    settle(store, project, before);
    result
}

/// The expiry cycle's change of one key: reclaims its locks due by `now`, a step of a few owners
/// at a time, until none is due or `until` has passed. Each step replicates as `EXPIRE now
/// token...` naming the owners it reclaimed and wakes the waiters near what it freed. Returns
/// whether nothing due is left; a name that holds no project has nothing due.
pub fn expire_until(store: &ServerKey, now: u64, until: Instant) -> bool {
    let done = store.write_existing(|project| {
        let before = Counts::of(project);
        purge_cancelled(store, project, now);
        let mut reclaimed = 0;
        // The first step runs whatever the time: the caller looked at the clock just before
        // opening the key (a reading is some 35 ns, a lapsed one-lock project about 4 us). A
        // tick still overruns its budget by one step at most.
        let mut done = false;
        loop {
            let (freed, grants) = project.expire_some(now, OWNERS_PER_STEP);
            if freed.tokens.is_empty() {
                done = true;
                break;
            }
            store.replicate(&Effect::ExpireOf {
                now,
                tokens: freed.tokens,
            });
            reclaimed += freed.locks;
            // The waiters the step let in may have reclaimed more lapsed owners in their way,
            // which replicate ahead of their grants.
            publish_lapsed(store, project);
            grants::deliver(store, grants);
            if Instant::now() >= until {
                break;
            }
        }
        store.count_and_notify(Kind::Expire, reclaimed);
        settle(store, project, before);
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
/// in the order it happened, counts it and raises its keyspace event, and answers the waiters
/// it let in.
fn publish_lapsed(store: &impl Store, project: &mut Project) {
    if !project.has_lapsed() {
        return;
    }
    let lapsed = project.take_lapsed();
    for run in lapsed.owners.chunk_by(|a, b| a.0 == b.0) {
        for step in run.chunks(OWNERS_PER_EFFECT) {
            store.replicate(&Effect::ExpireOf {
                now: step[0].0,
                tokens: step.iter().map(|(_, token)| token.clone()).collect(),
            });
        }
    }
    store.count_and_notify(Kind::Expire, lapsed.locks);
    grants::deliver(store, lapsed.grants);
}

/// Takes the waiters that gave up out of the queue before anything else happens to the key, so
/// they are never granted; their leaving may let later waiters in.
fn purge_cancelled(store: &impl Store, project: &mut Project, now: u64) {
    // Nearly always nobody gave up: then this costs one load, not the registry's lock and the
    // key's database and name.
    if !registry::any_cancelled() {
        return;
    }
    let cancelled = registry::take_cancelled(store.db(), store.key());
    if cancelled.is_empty() {
        return;
    }
    let grants: Vec<Grant> = cancelled
        .into_iter()
        .flat_map(|id| project.cancel(now, id).1)
        .collect();
    // The expired locks a cancelled waiter's successors had in their way went first.
    publish_lapsed(store, project);
    grants::deliver(store, grants);
}

/// After every change: the INFO gauge, the expiry schedule, the background work and the fence
/// mark follow the table.
fn settle(store: &impl Store, project: &Project, before: Counts) {
    fences::observe(project.locks().next_fence());
    before.track(project);
    store.schedule(project);
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
pub fn free_until(store: &ServerKey, until: Instant) -> bool {
    let more = store.maintain(|project| {
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
