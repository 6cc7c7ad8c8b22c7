//! The expiry index: owners filed by the earliest deadline among their locks.

use super::ids::{OwnerId, Tagged, NONE};
use super::owners::owner_hash;
use super::LockTable;
use crate::lock::LockInfo;

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
        while let Some((&earliest, &owner)) = self.expiry.first_key_value() {
            if earliest > now {
                break;
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
            let before = reclaimed.len();
            reclaimed.extend(
                due.into_iter()
                    .filter_map(|lock| self.remove(lock.id(), owner, lock.mode())),
            );
            if reclaimed.len() == before {
                // Unreachable while the index mirrors the locks; unfiling the owner keeps the
                // loop finite even if it did not.
                self.unfile(owner);
            } else {
                self.refile(owner);
            }
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
                let hash = owner_hash(&self.owners, &self.hasher, id);
                self.owner_index.remove(hash, |&other| other == id);
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
