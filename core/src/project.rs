//! A project: its lock table and its queue of waiting requests, served first come, first served.
//!
//! The fairness rule: a request (waiting or not) is refused while it conflicts with a lock or
//! with an earlier waiting request of another owner. So a writer waiting on `/A` is not starved
//! by readers that keep arriving after it, while a request that conflicts with no waiter is never
//! held up by the queue.
//!
//! Waiting requests are indexed like locks: their items sit in a second [`LockTable`] (the
//! "pending" table), each waiter under a token of its own and with its id as the fence. Finding
//! the waiters a request conflicts with, or the waiters near a freed path, is then the same
//! O(depth + what is found) walk as finding conflicting locks, never a scan of the queue.
//!
//! When locks go (release, expiry) only waiters related to the freed paths can have become
//! grantable, because a lock blocks only requests on related paths. They are retried in arrival
//! order. A waiter leaving without a grant (timeout, disconnect) can unblock the later waiters it
//! conflicted with, which are related to its own paths; a grant never unblocks anyone.

use std::collections::BTreeMap;

use crate::lock::{LockInfo, Mode, Token};
use crate::path::Path;
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
    pending: LockTable,
    waiters: BTreeMap<u64, Waiter>,
}

/// Copies carry the locks but not the waiters: a waiter belongs to the key it asked for.
impl Clone for Project {
    fn clone(&self) -> Project {
        Project::from_locks(self.locks.clone())
    }
}

/// The token a waiter's items carry in the pending table: unique per waiter, so that removing
/// one waiter never touches another's entries.
fn pending_token(id: u64) -> Token {
    Token::new(&id.to_be_bytes()).unwrap_or_else(|_| Token::generate())
}

impl Project {
    pub fn new() -> Project {
        Project::default()
    }

    pub fn from_locks(locks: LockTable) -> Project {
        Project {
            locks,
            pending: LockTable::new(),
            waiters: BTreeMap::new(),
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

    /// Whether an earlier waiter than `before`, of another owner, conflicts with `items`.
    fn behind_a_waiter(&self, token: &Token, items: &[(Mode, Path)], before: u64) -> bool {
        // The marks answer the common case, no related waiter at all, in O(depth); only a
        // request that does touch waiters pays for listing them.
        let touches_waiters = items
            .iter()
            .any(|(mode, path)| self.pending.conflicts(*mode, path));
        if !touches_waiters {
            return false;
        }
        self.pending.blockers(0, None, items).iter().any(|p| {
            p.fence < before
                && self
                    .waiters
                    .get(&p.fence)
                    .is_some_and(|w| w.token != *token)
        })
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
        if self.waiters.is_empty() {
            return Vec::new();
        }
        let paths: Vec<Path> = freed.iter().map(|l| l.path.clone()).collect();
        self.wake(now, &paths)
    }

    /// Queues a request that `acquire` refused. `id` orders waiters: give increasing ids, and
    /// keep a waiter's id when it is queued again elsewhere so that it keeps its place.
    pub fn enqueue(&mut self, id: u64, waiter: Waiter) {
        self.pending
            .grant(&pending_token(id), u64::MAX, id, &waiter.items);
        self.waiters.insert(id, waiter);
    }

    /// Removes a waiter that gave up (timed out, disconnected), and grants the later waiters it
    /// alone was holding up.
    pub fn cancel(&mut self, now: u64, id: u64) -> (Option<Waiter>, Vec<Grant>) {
        let Some(waiter) = self.remove_waiter(id) else {
            return (None, Vec::new());
        };
        let paths: Vec<Path> = waiter.items.iter().map(|(_, p)| p.clone()).collect();
        let grants = self.wake(now, &paths);
        (Some(waiter), grants)
    }

    /// Retries, in arrival order, the waiters related to `freed` (paths whose locks went), and
    /// grants each one that no lock and no earlier waiter of another owner blocks any more.
    pub fn wake(&mut self, now: u64, freed: &[Path]) -> Vec<Grant> {
        if self.waiters.is_empty() || freed.is_empty() {
            return Vec::new();
        }
        let probe: Vec<(Mode, Path)> = freed.iter().map(|p| (Mode::Write, p.clone())).collect();
        let mut candidates: Vec<u64> = self
            .pending
            .blockers(0, None, &probe)
            .iter()
            .map(|p| p.fence)
            .collect();
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
        self.pending = LockTable::new();
        std::mem::take(&mut self.waiters).into_iter().collect()
    }

    fn remove_waiter(&mut self, id: u64) -> Option<Waiter> {
        let waiter = self.waiters.remove(&id)?;
        self.pending.release(&pending_token(id), None);
        Some(waiter)
    }
}
