//! The expiry index: owners filed by the earliest deadline among their locks.

use super::ids::{OwnerId, Tagged, NONE};
use super::owners::OwnerKeys;
use super::rehash::Rehasher;
use super::LockTable;
use crate::lock::{LockInfo, Mode, Note, PackedToken, Token};
use crate::path::Path;

impl LockTable {
    /// The earliest deadline of any stored lock.
    pub fn next_deadline(&self) -> Option<u64> {
        self.expiry.first_key_value().map(|(&deadline, _)| deadline)
    }

    /// Removes every lock whose deadline is not after `now`, and returns them: by owner, earlier
    /// deadlines first. Owners that share a deadline come in an order that depends on history
    /// and may differ between servers, so callers use the set, not the order (replicas apply an
    /// `EXPIRE` effect and reclaim the same set themselves).
    pub fn reclaim_expired(&mut self, now: u64) -> Vec<LockInfo> {
        let mut reclaimed = Vec::new();
        while let Some(owner) = self.first_due(now) {
            reclaimed.extend(self.reclaim_first(owner, now));
        }
        reclaimed
    }

    /// Reclaims the expired locks of at most `max_owners` owners, earliest deadlines first, so
    /// that a mass expiry can be spread over many calls. Returns the tokens whose locks it
    /// reclaimed, which name the work exactly for a replica ([`LockTable::reclaim_expired_of`]),
    /// and the locks. The work is proportional to the owners' locks, as every grant to an
    /// owner already is.
    pub fn reclaim_some_expired(
        &mut self,
        now: u64,
        max_owners: usize,
    ) -> (Vec<Token>, Vec<LockInfo>) {
        let mut tokens = Vec::new();
        let mut reclaimed = Vec::new();
        while tokens.len() < max_owners {
            let Some(owner) = self.first_due(now) else {
                break;
            };
            let token = self.owner(owner).token.to_token();
            let locks = self.reclaim_first(owner, now);
            if !locks.is_empty() {
                tokens.push(token);
                reclaimed.extend(locks);
            }
        }
        (tokens, reclaimed)
    }

    /// Removes the locks of `token` whose deadline is not after `now`: one owner's share of a
    /// master's `reclaim_some_expired`, as its replicas apply it.
    pub fn reclaim_expired_of(&mut self, now: u64, token: &Token) -> Vec<LockInfo> {
        match self.find_owner(&PackedToken::new(token)) {
            Some(owner) => self.reclaim_owner(owner, now),
            None => Vec::new(),
        }
    }

    /// Lazy expiry for one request: reclaims the expired locks of the other owners whose locks
    /// block `token` from taking `items`, so that a lapsed lease is free to take. It looks only
    /// where the locks stored block the request, and stops at the first live blocker, when the
    /// request is refused whatever else expired; what it met before is reclaimed all the same,
    /// so a request refused again does not walk it again. Each owner goes whole (all its locks
    /// due by `now`), which the returned tokens name exactly for a replica, as
    /// [`LockTable::reclaim_some_expired`] does. The work is the blockers it meets and their
    /// owners' locks; the rest of a mass expiry is left to the caller's bounded steps.
    pub fn reclaim_blockers(
        &mut self,
        now: u64,
        token: &Token,
        items: &[(Mode, Path)],
    ) -> (Vec<Token>, Vec<LockInfo>) {
        let me = self.find_owner(&PackedToken::new(token));
        self.reclaim_blockers_of(now, me, items)
    }

    /// [`LockTable::acquire`] where expired locks linger: reclaims the token's own due locks
    /// and, when stored locks block the request, the expired ones in its way
    /// ([`LockTable::reclaim_blockers`]), then decides on the live ones. Returns the fence (or
    /// `None` when a live lock of another owner blocks), and the tokens and locks reclaimed. A
    /// request that nothing expired is in the way of costs what `acquire` costs: one owner
    /// look-up and one conflict check per item.
    pub fn acquire_lapsed(
        &mut self,
        now: u64,
        token: &Token,
        generated: bool,
        ttl: u64,
        items: &[(Mode, Path)],
    ) -> (Option<u64>, Vec<Token>, Vec<LockInfo>) {
        self.acquire_lapsed_noted(now, token, generated, ttl, items, None)
    }

    /// [`LockTable::acquire_lapsed`] whose grant keeps `note` as [`LockTable::grant_noted`]
    /// does.
    pub fn acquire_lapsed_noted(
        &mut self,
        now: u64,
        token: &Token,
        generated: bool,
        ttl: u64,
        items: &[(Mode, Path)],
        note: Option<&Note>,
    ) -> (Option<u64>, Vec<Token>, Vec<LockInfo>) {
        let packed = PackedToken::new(token);
        // A token just generated is held by nobody (see `Project::acquire_generated`).
        let mut me = if generated {
            None
        } else {
            self.find_owner(&packed)
        };
        let (mut tokens, mut reclaimed) = (Vec::new(), Vec::new());
        if let Some(owner) = me {
            reclaimed = self.reclaim_owner(owner, now);
            if !reclaimed.is_empty() {
                tokens.push(token.clone());
                // An owner left with nothing is forgotten, and its id may be given again.
                me = me.filter(|&id| self.owners[id as usize].is_some());
            }
        }
        let blocked = |table: &LockTable, me| {
            items
                .iter()
                .any(|(mode, path)| table.is_blocked_for(me, *mode, path))
        };
        if blocked(self, me) {
            let (more, locks) = self.reclaim_blockers_of(now, me, items);
            tokens.extend(more);
            reclaimed.extend(locks);
            if blocked(self, me) {
                return (None, tokens, reclaimed);
            }
        }
        let fence = self.next_fence;
        let owner = me.unwrap_or_else(|| self.add_owner(packed));
        self.grant_to(owner, now.saturating_add(ttl), fence, items, note);
        (Some(fence), tokens, reclaimed)
    }

    /// [`LockTable::release`] where expired locks linger: `token`'s due locks are reclaimed
    /// first, then its live ones at `paths` (or all) are released. Returns how many it released,
    /// their descriptions when `describe` is set, and the reclaimed locks, with one owner
    /// look-up for all.
    pub fn release_lapsed(
        &mut self,
        now: u64,
        token: &Token,
        paths: Option<&[Path]>,
        describe: bool,
    ) -> (usize, Vec<LockInfo>, Vec<LockInfo>) {
        let Some(owner) = self.find_owner(&PackedToken::new(token)) else {
            return (0, Vec::new(), Vec::new());
        };
        let reclaimed = self.reclaim_owner(owner, now);
        if self.owners[owner as usize].is_none() {
            return (0, Vec::new(), reclaimed);
        }
        let (count, freed) = self.release_owner(owner, paths, describe);
        (count, freed, reclaimed)
    }

    /// [`LockTable::renew`] where expired locks linger: `token`'s due locks are reclaimed first,
    /// so a lapsed lease is not brought back. Returns how many it moved, and the reclaimed locks.
    pub fn renew_lapsed(
        &mut self,
        now: u64,
        token: &Token,
        deadline: u64,
    ) -> (usize, Vec<LockInfo>) {
        let Some(owner) = self.find_owner(&PackedToken::new(token)) else {
            return (0, Vec::new());
        };
        let reclaimed = self.reclaim_owner(owner, now);
        if self.owners[owner as usize].is_none() {
            return (0, reclaimed);
        }
        (self.renew_owner(owner, deadline), reclaimed)
    }

    /// `reclaim_blockers` for the owner `me`, or for a token that holds nothing when `None`.
    fn reclaim_blockers_of(
        &mut self,
        now: u64,
        me: Option<OwnerId>,
        items: &[(Mode, Path)],
    ) -> (Vec<Token>, Vec<LockInfo>) {
        let mut owners = Vec::new();
        for (mode, path) in items {
            if self.is_blocked_for(me, *mode, path)
                && self.expired_blockers(now, me, *mode, path, &mut owners)
            {
                break;
            }
        }
        owners.sort_unstable();
        owners.dedup();
        let mut tokens = Vec::with_capacity(owners.len());
        let mut reclaimed = Vec::new();
        for owner in owners {
            let token = self.owner(owner).token.to_token();
            let locks = self.reclaim_owner(owner, now);
            if !locks.is_empty() {
                tokens.push(token);
                reclaimed.extend(locks);
            }
        }
        (tokens, reclaimed)
    }

    /// The owner filed first, when its earliest lock is due by `now`.
    fn first_due(&self, now: u64) -> Option<OwnerId> {
        self.expiry
            .first_key_value()
            .filter(|(&earliest, _)| earliest <= now)
            .map(|(_, &owner)| owner)
    }

    /// `reclaim_owner` for the owner filed first. An owner filed as due with nothing due is
    /// unreachable while the index mirrors the locks; unfiling it keeps the callers' loops
    /// finite even if it were reached.
    fn reclaim_first(&mut self, owner: OwnerId, now: u64) -> Vec<LockInfo> {
        let locks = self.reclaim_owner(owner, now);
        if locks.is_empty() {
            self.unfile(owner);
        }
        locks
    }

    /// Removes one owner's locks that are due by `now`, and refiles it.
    fn reclaim_owner(&mut self, owner: OwnerId, now: u64) -> Vec<LockInfo> {
        // The index knows the owner's earliest deadline: an owner with nothing due (the common
        // case of a command's own token) costs no look at its locks.
        let filed = self.owner(owner);
        if !filed.filed || filed.earliest > now {
            return Vec::new();
        }
        let due: Vec<Tagged> = self
            .locks_of(owner)
            .iter()
            .copied()
            .filter(|lock| {
                self.held_by(lock.id(), owner, lock.mode())
                    .is_some_and(|h| h.deadline <= now)
            })
            .collect();
        let reclaimed: Vec<LockInfo> = due
            .into_iter()
            .filter_map(|lock| self.remove(lock.id(), owner, lock.mode()))
            .collect();
        if !reclaimed.is_empty() {
            self.refile(owner);
        }
        reclaimed
    }

    /// Files an owner in the expiry index under its earliest deadline, or forgets it when it
    /// holds nothing any more.
    pub(super) fn refile(&mut self, id: OwnerId) {
        let Some(owner) = self.owners[id as usize].as_ref() else {
            return;
        };
        let earliest = self
            .locks_of(id)
            .iter()
            .filter_map(|l| self.held_by(l.id(), id, l.mode()).map(|h| h.deadline))
            .min();
        if owner.filed && earliest == Some(owner.earliest) {
            return;
        }
        self.unfile(id);
        match earliest {
            Some(earliest) => self.file(id, earliest),
            None => {
                let keys = OwnerKeys {
                    owners: &self.owners,
                    hasher: &self.hasher,
                };
                let hash = keys.hash(&id);
                self.owner_index.remove(hash, |&other| other == id, keys);
                let Some(owner) = self.owners[id as usize].take() else {
                    return;
                };
                self.token_bytes -= owner.token.heap_bytes();
                self.free_owners.push(id);
            }
        }
    }

    /// Puts an unfiled owner first in the list of `earliest`.
    pub(super) fn file(&mut self, id: OwnerId, earliest: u64) {
        let next = self.expiry.insert(earliest, id).unwrap_or(NONE);
        if next != NONE {
            self.owner_mut(next).prev = id;
        }
        let owner = self.owner_mut(id);
        owner.earliest = earliest;
        owner.prev = NONE;
        owner.next = next;
        owner.filed = true;
    }

    /// Takes an owner out of its expiry list, if it is in one.
    pub(super) fn unfile(&mut self, id: OwnerId) {
        let owner = self.owner_mut(id);
        if !owner.filed {
            return;
        }
        let (earliest, prev, next) = (owner.earliest, owner.prev, owner.next);
        owner.filed = false;
        owner.prev = NONE;
        owner.next = NONE;
        if prev != NONE {
            self.owner_mut(prev).next = next;
        } else if next != NONE {
            self.expiry.insert(earliest, next);
        } else {
            self.expiry.remove(&earliest);
        }
        if next != NONE {
            self.owner_mut(next).prev = prev;
        }
    }
}
