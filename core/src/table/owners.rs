//! Owners: each token that holds locks, interned once, with the list of its locks.

use std::hash::BuildHasher;

use hashbrown::DefaultHashBuilder;

use super::chunks::Chunks;
use super::ids::{OwnerId, Tagged, MAX_ID, NONE, SPILLED};
use super::rehash::{prefetch, Rehasher};
use super::tree::reserve_for_one;
use super::LockTable;
use crate::lock::PackedToken;

/// A token that holds locks. Most owners hold one lock, which is kept inline.
#[derive(Clone, Debug)]
pub(super) struct Owner {
    pub(super) token: PackedToken,
    /// The earliest deadline among the owner's locks, as filed in the expiry index.
    pub(super) earliest: u64,
    /// The neighbours in the list of owners filed under the same earliest deadline.
    pub(super) prev: OwnerId,
    pub(super) next: OwnerId,
    /// The owner's only lock (`Tagged(node, mode)`), `NONE` before its first, or `SPILLED`
    /// when it holds several, listed in `LockTable::owner_locks`.
    pub(super) lock: Tagged,
    pub(super) filed: bool,
}

const _: () = assert!(std::mem::size_of::<Option<Owner>>() == 48);

impl LockTable {
    pub(super) fn owner(&self, id: OwnerId) -> &Owner {
        // Ids come from the table's own structures, which only hold live owners.
        self.owners[id as usize].as_ref().expect("a live owner id")
    }

    pub(super) fn owner_mut(&mut self, id: OwnerId) -> &mut Owner {
        self.owners[id as usize].as_mut().expect("a live owner id")
    }

    pub(super) fn find_owner(&self, token: &PackedToken) -> Option<OwnerId> {
        let hash = self.hasher.hash_one(token.stored());
        self.owner_index
            .find(hash, |&id| {
                self.owners[id as usize]
                    .as_ref()
                    .is_some_and(|o| o.token == *token)
            })
            .copied()
    }

    /// The owner id of `token`, created when it holds nothing yet.
    pub(super) fn intern(&mut self, token: PackedToken) -> OwnerId {
        match self.find_owner(&token) {
            Some(id) => id,
            None => self.add_owner(token),
        }
    }

    /// A new owner for a token that has none.
    pub(super) fn add_owner(&mut self, token: PackedToken) -> OwnerId {
        let hash = self.hasher.hash_one(token.stored());
        self.token_bytes += token.heap_bytes();
        let owner = Owner {
            token,
            earliest: u64::MAX,
            prev: NONE,
            next: NONE,
            lock: Tagged(NONE),
            filed: false,
        };
        let id = match self.free_owners.pop() {
            Some(id) => {
                self.owners[id as usize] = Some(owner);
                id
            }
            None => {
                let id = self.owners.len() as OwnerId;
                assert!(id < MAX_ID, "too many owners in one project");
                self.owners.push(Some(owner));
                id
            }
        };
        let keys = OwnerKeys {
            owners: &self.owners,
            hasher: &self.hasher,
        };
        self.owner_index.insert_unique(hash, id, keys);
        id
    }

    /// The locks an owner holds, as `Tagged(node, mode)`.
    pub(super) fn locks_of(&self, id: OwnerId) -> &[Tagged] {
        let owner = self.owner(id);
        match owner.lock.0 {
            NONE => &[],
            SPILLED => self.owner_locks.get(id).map_or(&[], Vec::as_slice),
            _ => std::slice::from_ref(&owner.lock),
        }
    }

    pub(super) fn add_owner_lock(&mut self, id: OwnerId, lock: Tagged) {
        let Some(owner) = self.owners[id as usize].as_mut() else {
            return;
        };
        match owner.lock.0 {
            NONE => owner.lock = lock,
            SPILLED => {
                if let Some(all) = self.owner_locks.get_mut(id) {
                    reserve_for_one(all);
                    all.push(lock);
                }
            }
            _ => {
                self.owner_locks.insert_new(id, vec![owner.lock, lock]);
                owner.lock = Tagged(SPILLED);
            }
        }
    }

    pub(super) fn remove_owner_lock(&mut self, id: OwnerId, lock: Tagged) {
        let Some(owner) = self.owners[id as usize].as_mut() else {
            return;
        };
        if owner.lock == lock {
            owner.lock = Tagged(NONE);
        } else if owner.lock.0 == SPILLED {
            if let Some(all) = self.owner_locks.get_mut(id) {
                // From the end: releasing everything takes the last lock each time, which keeps
                // it linear in the owner's locks.
                if let Some(i) = all.iter().rposition(|&l| l == lock) {
                    all.swap_remove(i);
                }
                if let [only] = all[..] {
                    owner.lock = only;
                    self.owner_locks.remove(id);
                }
            }
        }
    }
}

/// The owners' index's view of its entries: an owner is indexed under its token's hash, and as
/// the entries are ids, re-hashing one looks its token up by id.
#[derive(Clone, Copy)]
pub(super) struct OwnerKeys<'a> {
    pub(super) owners: &'a Chunks<Option<Owner>>,
    pub(super) hasher: &'a DefaultHashBuilder,
}

impl Rehasher<OwnerId> for OwnerKeys<'_> {
    fn hash(&self, &id: &OwnerId) -> u64 {
        let token = self
            .owners
            .get(id as usize)
            .and_then(Option::as_ref)
            .map(|o| o.token.stored());
        self.hasher.hash_one(token.unwrap_or_default())
    }

    fn prefetch(&self, &id: &OwnerId) {
        if let Some(owner) = self.owners.get(id as usize) {
            prefetch(owner);
        }
    }
}
