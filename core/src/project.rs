//! A project: its lock table and its queue of waiting requests, served first come, first served.
//!
//! The fairness rule: a request (waiting or not) is refused while it conflicts with a lock or
//! with an earlier waiting request of another owner. So a writer waiting on `/A` is not starved
//! by readers that keep arriving after it, while a request that conflicts with no waiter is never
//! held up by the queue.
//!
//! Waiting requests are indexed by path ([`WaitIndex`]), and only the waiters at the front of
//! the queue near a change are ever looked at: those that no earlier waiter conflicts with. When
//! locks go (release, expiry), only waiters related to the freed paths can have become grantable,
//! because a lock blocks only requests on related paths, and of those only the ones at the front,
//! because a waiter behind an earlier one stays behind it (or behind its locks, once that one is
//! granted) whatever else happens to the locks. A waiter leaving without a grant (timeout,
//! disconnect) can let through the later waiters it conflicted with, which are related to its
//! own paths. A grant never unblocks anyone (the granted request's locks block exactly what it
//! blocked as a waiter), so one pass in arrival order over these candidates grants what
//! re-scanning the whole queue would.
//!
//! So a release costs O(depth × log n) per waiter it looks at, and it looks at the ones it
//! grants, plus those that another lock still holds, or that an earlier waiter holds up on
//! another of their paths: a chain of writers on one path hands over in O(depth × log n) each,
//! not O(n). The index ignores owners when it decides who is at the front; a waiter whose
//! token another waiter also has is therefore always a candidate, and the exact check (which
//! does know owners) decides. Tokens shared between waiters are rare, so that set is small.

use std::collections::{BTreeMap, BTreeSet};

use crate::lock::{LockInfo, Mode, Token};
use crate::path::Path;
use crate::queue::{distinct, WaitIndex};
use crate::table::LockTable;

/// A request waiting for its locks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub token: Token,
    pub ttl: u64,
    pub items: Vec<(Mode, Path)>,
}

/// A waiter granted by [`Project::wake`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub waiter: u64,
    pub token: Token,
    pub deadline: u64,
    pub fence: u64,
    pub items: Vec<(Mode, Path)>,
}

#[derive(Debug, Default)]
pub struct Project {
    locks: LockTable,
    index: WaitIndex,
    waiters: BTreeMap<u64, Waiter>,
    /// The waiters of each token, to know which waiters share theirs. Ordered maps rather than
    /// hash tables here and in the index: a hash table that doubles stalls the command that
    /// makes it grow, about a millisecond at 7,000 waiters. Looked up by a borrowed token, so
    /// that a waiter leaving copies nothing.
    by_token: BTreeMap<Token, TokenWaiters>,
    /// Waiters whose token another waiter also has: the index's idea of the front does not
    /// know owners, so these are always retried (see the top of this file).
    shared: BTreeSet<u64>,
}

/// The waiters of one token: nearly always one.
#[derive(Debug)]
enum TokenWaiters {
    One(u64),
    Many(BTreeSet<u64>),
}

/// Copies carry the locks but not the waiters: a waiter belongs to the key it asked for.
impl Clone for Project {
    fn clone(&self) -> Project {
        Project::from_locks(self.locks.clone())
    }
}

impl Project {
    /// The copy `COPY` makes: the locks, sharing their storage with this project's (see
    /// [`LockTable::share`]), so it costs a step per chunk of storage; no waiters.
    pub fn copy(&mut self) -> Project {
        Project::from_locks(self.locks.share())
    }
}

impl Project {
    pub fn new() -> Project {
        Project::default()
    }

    pub fn from_locks(locks: LockTable) -> Project {
        Project {
            locks,
            ..Project::default()
        }
    }

    pub fn locks(&self) -> &LockTable {
        &self.locks
    }

    /// The lock table, for changes that the queue need not hear about (applying a master's
    /// effects on a replica, where nobody waits).
    pub fn locks_mut(&mut self) -> &mut LockTable {
        &mut self.locks
    }

    pub fn waiting(&self) -> usize {
        self.waiters.len()
    }

    /// The ids of the waiting requests, oldest first.
    pub fn waiter_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.waiters.keys().copied()
    }

    /// The path index of the waiters, for tests of its consistency.
    pub fn wait_index(&self) -> &WaitIndex {
        &self.index
    }

    /// Grants `items` to `token` unless a lock or an earlier waiter of another owner conflicts.
    pub fn acquire(
        &mut self,
        now: u64,
        token: &Token,
        ttl: u64,
        items: &[(Mode, Path)],
    ) -> Option<u64> {
        if self.behind_a_waiter(token, items, u64::MAX) {
            return None;
        }
        self.locks.acquire(now, token, ttl, items)
    }

    /// Whether an earlier waiter than `before`, of another owner, conflicts with `items`: a look
    /// at the oldest waiting items on the related paths, O(depth) per item.
    fn behind_a_waiter(&self, token: &Token, items: &[(Mode, Path)], before: u64) -> bool {
        if self.waiters.is_empty() {
            return false;
        }
        let other_owner = |id: u64| self.waiters.get(&id).is_some_and(|w| w.token != *token);
        items
            .iter()
            .any(|(mode, path)| self.index.any_earlier(*mode, path, before, other_owner))
    }

    /// Frees `token`'s locks (see [`LockTable::release`]) and grants the waiters that were
    /// waiting for them.
    pub fn release(
        &mut self,
        now: u64,
        token: &Token,
        paths: Option<&[Path]>,
    ) -> (Vec<LockInfo>, Vec<Grant>) {
        let freed = self.locks.release(token, paths);
        let grants = self.wake_freed(now, &freed);
        (freed, grants)
    }

    /// Reclaims the locks due by `now` and grants the waiters that were waiting for them.
    pub fn reclaim_expired(&mut self, now: u64) -> (Vec<LockInfo>, Vec<Grant>) {
        let expired = self.locks.reclaim_expired(now);
        let grants = self.wake_freed(now, &expired);
        (expired, grants)
    }

    fn wake_freed(&mut self, now: u64, freed: &[LockInfo]) -> Vec<Grant> {
        self.wake_near(now, freed.iter().map(|l| (l.mode, &l.path)), 0)
    }

    /// Queues a request that `acquire` refused. `id` orders waiters: give increasing ids, and
    /// keep a waiter's id when it is queued again elsewhere so that it keeps its place.
    pub fn enqueue(&mut self, id: u64, waiter: Waiter) {
        if let Some(old) = self.waiters.get(&id).cloned() {
            // The same id twice would be two entries in the index for one waiter.
            self.forget_waiter(id, &old);
        }
        distinct(&waiter.items, |mode, path| {
            self.index.insert(id, mode, path)
        });
        match self.by_token.get_mut(&waiter.token) {
            None => {
                self.by_token
                    .insert(waiter.token.clone(), TokenWaiters::One(id));
            }
            Some(TokenWaiters::One(first)) => {
                // The token's second waiter: both are shared from now on.
                self.shared.extend([*first, id]);
                let ids = BTreeSet::from([*first, id]);
                self.by_token
                    .insert(waiter.token.clone(), TokenWaiters::Many(ids));
            }
            Some(TokenWaiters::Many(ids)) => {
                ids.insert(id);
                self.shared.insert(id);
            }
        }
        self.waiters.insert(id, waiter);
    }

    /// Removes a waiter that gave up (timed out, disconnected), and grants the later waiters it
    /// alone was holding up.
    pub fn cancel(&mut self, now: u64, id: u64) -> (Option<Waiter>, Vec<Grant>) {
        let Some(waiter) = self.remove_waiter(id) else {
            return (None, Vec::new());
        };
        // Only later waiters can have been behind it.
        let grants = self.wake_near(now, waiter.items.iter().map(|(m, p)| (*m, p)), id);
        (Some(waiter), grants)
    }

    /// Retries, in arrival order, the waiters related to `freed` (paths whose locks went), and
    /// grants each one that no lock and no earlier waiter of another owner blocks any more.
    pub fn wake(&mut self, now: u64, freed: &[Path]) -> Vec<Grant> {
        self.wake_near(now, freed.iter().map(|p| (Mode::Write, p)), 0)
    }

    /// Grants, in arrival order, the waiters with an id above `after` that something conflicting
    /// with `probes` was holding up and that nothing holds up any more. Only the waiters at the
    /// front of the queue near the probes are looked at.
    fn wake_near<'a>(
        &mut self,
        now: u64,
        probes: impl Iterator<Item = (Mode, &'a Path)>,
        after: u64,
    ) -> Vec<Grant> {
        if self.waiters.is_empty() {
            return Vec::new();
        }
        let mut candidates = Vec::new();
        for (mode, path) in probes {
            self.index.fronts_near(mode, path, after, &mut candidates);
        }
        if candidates.is_empty() && self.shared.is_empty() {
            return Vec::new();
        }
        candidates.extend(self.shared.range(after.saturating_add(1)..).copied());
        candidates.sort_unstable();
        candidates.dedup();
        let mut grants = Vec::new();
        for id in candidates {
            let Some(waiter) = self.waiters.get(&id) else {
                continue;
            };
            let blocked = waiter
                .items
                .iter()
                .any(|(mode, path)| self.locks.is_blocked(&waiter.token, *mode, path))
                || self.behind_a_waiter(&waiter.token, &waiter.items, id);
            if blocked {
                continue;
            }
            let Some(waiter) = self.remove_waiter(id) else {
                continue;
            };
            if let Some(fence) = self
                .locks
                .acquire(now, &waiter.token, waiter.ttl, &waiter.items)
            {
                grants.push(Grant {
                    waiter: id,
                    deadline: now.saturating_add(waiter.ttl),
                    fence,
                    token: waiter.token,
                    items: waiter.items,
                });
            }
        }
        grants
    }

    /// Takes every waiter out, oldest first: the key they waited on was deleted or moved, so
    /// they must be retried against whatever the key name holds now.
    pub fn take_waiters(&mut self) -> Vec<(u64, Waiter)> {
        self.index = WaitIndex::new();
        self.by_token.clear();
        self.shared.clear();
        std::mem::take(&mut self.waiters).into_iter().collect()
    }

    fn remove_waiter(&mut self, id: u64) -> Option<Waiter> {
        let waiter = self.waiters.remove(&id)?;
        self.forget_waiter(id, &waiter);
        Some(waiter)
    }

    /// Takes `waiter`'s entries out of the index and the token sets.
    fn forget_waiter(&mut self, id: u64, waiter: &Waiter) {
        distinct(&waiter.items, |mode, path| {
            self.index.remove(id, mode, path)
        });
        match self.by_token.get_mut(&waiter.token) {
            Some(TokenWaiters::One(only)) if *only == id => {
                self.by_token.remove(&waiter.token);
            }
            Some(TokenWaiters::Many(ids)) => {
                ids.remove(&id);
                self.shared.remove(&id);
                if let (1, Some(&last)) = (ids.len(), ids.first()) {
                    // The token's last waiter no longer shares it.
                    self.shared.remove(&last);
                    self.by_token
                        .insert(waiter.token.clone(), TokenWaiters::One(last));
                }
            }
            _ => {}
        }
    }
}
