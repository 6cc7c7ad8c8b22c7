//! The expiry index: owners filed by their lease's deadline, and reclaiming the lapsed ones.
//!
//! Owners sharing a deadline are linked in a list whose head the index holds, so filing and
//! unfiling an owner is a step each, and reclaiming costs what it reclaims: a small owner's
//! locks go at once (at most `SMALL` of them), a big owner is buried in one step and its locks
//! are freed in the background (`big`).

use super::ids::{OwnerId, NONE};
use super::Tree;
use crate::lock::Freed;
use crate::lock::{Mode, PackedToken, Token};

impl Tree {
    /// The earliest lease of any owner, lapsed or not.
    pub fn next_deadline(&self) -> Option<u64> {
        self.expiry.first_key_value().map(|(&deadline, _)| deadline)
    }

    /// Reclaims every owner whose lease lapsed by `now`, however many. Owners that share a
    /// deadline come in an order that depends on history and may differ between servers, so
    /// callers use the set, not the order.
    pub fn reclaim_expired(&mut self, now: u64, describe: bool) -> Freed {
        let mut freed = Freed::default();
        while let Some(owner) = self.first_due(now) {
            self.reclaim_owner(owner, describe, &mut freed);
        }
        freed
    }

    /// Reclaims at most `max_owners` owners whose lease lapsed by `now`, earliest first, so that
    /// a mass expiry can be spread over many calls. The tokens it returns name the work exactly
    /// for a replica ([`Tree::reclaim_expired_of`]).
    pub fn reclaim_some_expired(&mut self, now: u64, max_owners: usize, describe: bool) -> Freed {
        let mut freed = Freed::default();
        for _ in 0..max_owners {
            let Some(owner) = self.first_due(now) else {
                break;
            };
            self.reclaim_owner(owner, describe, &mut freed);
        }
        freed
    }

    /// Reclaims `token`'s owner if its lease lapsed by `now`: one owner's share of a master's
    /// `reclaim_some_expired`, as its replicas apply it.
    pub fn reclaim_expired_of(&mut self, now: u64, token: &Token, describe: bool) -> Freed {
        let mut freed = Freed::default();
        if let Some(owner) = self.find_owner(&PackedToken::new(token)) {
            if !self.is_live(owner, now) {
                self.reclaim_owner(owner, describe, &mut freed);
            }
        }
        freed
    }

    /// Reclaims a lapsed owner: a small one's locks go now, a big one is buried. Its token is
    /// added to `freed`, with its locks' paths (or, for a big owner, the path above them all)
    /// when `describe` is set, for the waiters they held up.
    pub(super) fn reclaim_owner(&mut self, owner: OwnerId, describe: bool, freed: &mut Freed) {
        freed.tokens.push(self.owner(owner).token.to_token());
        self.drop_owner(owner, describe, freed);
    }

    /// Takes every lock of `owner` out of the table: at once for a small owner, by burying a big
    /// one. Adds the count, and the probes when `describe` is set, to `freed`.
    pub(super) fn drop_owner(&mut self, owner: OwnerId, describe: bool, freed: &mut Freed) {
        if self.is_big(owner) {
            let (count, lca) = self.bury(owner);
            freed.locks += count;
            if describe {
                freed.probes.push((Mode::Write, lca));
            }
            return;
        }
        let locks: smallvec::SmallVec<[_; 4]> = self.small_locks(owner).iter().copied().collect();
        for lock in locks {
            if describe {
                if let Some(info) = self.remove(lock.id(), owner, lock.mode()) {
                    freed.probes.push((info.mode, info.path));
                    freed.locks += 1;
                }
            } else if self.remove_silently(lock.id(), owner, lock.mode()) {
                freed.locks += 1;
            }
        }
        self.forget_if_empty(owner);
    }

    /// The owner filed first, when its lease lapsed by `now`.
    fn first_due(&self, now: u64) -> Option<OwnerId> {
        self.expiry
            .first_key_value()
            .filter(|(&deadline, _)| deadline <= now)
            .map(|(_, &owner)| owner)
    }

    /// Puts an unfiled owner first in the list of `deadline`, which becomes its lease. Every
    /// deadline passed `lease` once as it entered the table (`LockTable`'s grants and renewals,
    /// an acquire's own, a payload's loader), so it is never 0 here, the mark of an unfiled owner.
    pub(super) fn file(&mut self, id: OwnerId, deadline: u64) {
        debug_assert_ne!(deadline, 0, "a deadline that did not pass `lease`");
        let next = self.expiry.insert(deadline, id).unwrap_or(NONE);
        if next != NONE {
            self.owner_mut(next).prev = id;
        }
        let owner = self.owner_mut(id);
        owner.prev = NONE;
        owner.next = next;
        owner.deadline = deadline;
    }

    /// Takes an owner out of its expiry list, if it is in one; its lease is 0 until it is filed
    /// again.
    pub(super) fn unfile(&mut self, id: OwnerId) {
        let owner = self.owner_mut(id);
        if owner.deadline == 0 {
            return;
        }
        let (deadline, prev, next) = (owner.deadline, owner.prev, owner.next);
        owner.deadline = 0;
        owner.prev = NONE;
        owner.next = NONE;
        if prev != NONE {
            self.owner_mut(prev).next = next;
        } else if next != NONE {
            self.expiry.insert(deadline, next);
        } else {
            self.expiry.remove(&deadline);
        }
        if next != NONE {
            self.owner_mut(next).prev = prev;
        }
    }
}
