//! Owners: each token that holds locks, interned once, with its lease and the list of its locks.
//!
//! An owner is a lease, as etcd attaches many keys to one lease: its locks share one deadline,
//! kept here and not on each lock, so renewing an owner of a million locks moves one number and
//! refiles one entry of the expiry index. An `ACQUIRE` never shortens the lease of what its token
//! already holds (the new deadline is the later of the two), `RENEW` sets it.
//!
//! How an owner lists its locks depends on how many it holds, so that nothing it does costs
//! what it holds: one lock inline; up to `SMALL` in a short vector (`owner_locks`), which a few
//! operations scan (its own locks beneath a path, renewing their `latest`); more, and the owner
//! is big (`big`): a hash set of its locks and marks on the ancestors of each, so that every
//! one of its commands costs the depth of its paths. An owner becomes big past `SMALL` locks
//! and small again at half that, so that a count going up and down around the limit does not
//! convert it back and forth.

use std::hash::BuildHasher;

use hashbrown::DefaultHashBuilder;

use super::chunks::Chunks;
use super::ids::{NodeId, OwnerId, Tagged, BIG, MAX_ID, NONE, SPILLED};
use super::rehash::{prefetch, Rehasher};
use super::tree::reserve_for_one;
use super::Tree;
use crate::lock::PackedToken;

/// The most locks a small owner holds; one more and it is big.
pub(super) const SMALL: usize = 64;

/// A token that holds locks. Most owners hold one lock, which is kept inline.
#[derive(Clone, Debug)]
pub(super) struct Owner {
    pub(super) token: PackedToken,
    /// The lease: every lock of the owner lapses at this time (milliseconds). Zero exactly when
    /// the owner is filed in no expiry list: for a moment while it is refiled or made, and for
    /// an owner that was released or reclaimed whole and whose locks are being freed
    /// (`big::bury`). No lease is 0 (none is granted, none loads), so the zero stands for the
    /// flag an owner would otherwise spend a word of padding on.
    pub(super) deadline: u64,
    /// The neighbours in the list of owners filed under the same deadline.
    pub(super) prev: OwnerId,
    pub(super) next: OwnerId,
    /// The owner's only lock (`Tagged(node, mode)`), `NONE` before its first, `SPILLED` when it
    /// holds several, listed in `Tree::owner_locks`, or `BIG` (see `big`).
    pub(super) lock: Tagged,
}

// Forty bytes: the token's 20 (its first byte never 0, the `Option`'s mark), the lease's 8 and
// three ids. Every lock of its own token costs one.
const _: () = assert!(std::mem::size_of::<Option<Owner>>() == 40);

impl Tree {
    pub(super) fn owner(&self, id: OwnerId) -> &Owner {
        // Ids come from the table's own structures, which only hold live owners.
        self.owners[id as usize].as_ref().expect("a live owner id")
    }

    pub(super) fn owner_mut(&mut self, id: OwnerId) -> &mut Owner {
        self.owners[id as usize].as_mut().expect("a live owner id")
    }

    pub(super) fn is_big(&self, id: OwnerId) -> bool {
        self.owner(id).lock.0 == BIG
    }

    /// Whether the owner's lease runs past `now`. An owner being freed (`bury`) never does.
    pub(super) fn is_live(&self, id: OwnerId, now: u64) -> bool {
        self.owner(id).deadline > now
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

    /// A new owner for a token that has none, with its lease.
    pub(super) fn add_owner(&mut self, token: PackedToken, deadline: u64) -> OwnerId {
        let hash = self.hasher.hash_one(token.stored());
        self.token_bytes += token.heap_bytes();
        let owner = Owner {
            token,
            deadline: 0,
            prev: NONE,
            next: NONE,
            lock: Tagged(NONE),
        };
        let id = match self.free_owners.pop_lowest() {
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
        self.file(id, deadline);
        id
    }

    /// Takes an owner out of the token index, so that its token finds it no more.
    pub(super) fn unindex(&mut self, id: OwnerId) {
        let keys = OwnerKeys {
            owners: &self.owners,
            hasher: &self.hasher,
        };
        let hash = keys.hash(&id);
        self.owner_index.remove(hash, |&other| other == id, keys);
    }

    /// Forgets an owner that holds nothing any more: out of the index and the expiry list, its
    /// slot free for the next owner. (A buried owner is freed by `big` when its last lock goes.)
    pub(super) fn forget_if_empty(&mut self, id: OwnerId) {
        if self.owners[id as usize]
            .as_ref()
            .is_none_or(|owner| owner.lock.0 != NONE)
        {
            return;
        }
        self.unfile(id);
        self.unindex(id);
        self.free_owner_slot(id);
    }

    /// Gives an owner's slot back; the owner is out of every index already.
    pub(super) fn free_owner_slot(&mut self, id: OwnerId) {
        if let Some(owner) = self.owners[id as usize].take() {
            self.token_bytes -= owner.token.heap_bytes();
            self.notes.forget_owner(id);
            self.free_owners.insert(id);
        }
    }

    /// The locks of a small owner, as `Tagged(node, mode)`; empty for a big one, whose locks
    /// are in its set (`big_locks`).
    pub(super) fn small_locks(&self, id: OwnerId) -> &[Tagged] {
        let owner = self.owner(id);
        match owner.lock.0 {
            NONE | BIG => &[],
            SPILLED => self.owner_locks.get(id).map_or(&[], Vec::as_slice),
            _ => std::slice::from_ref(&owner.lock),
        }
    }

    /// How many locks an owner holds.
    pub(super) fn lock_count(&self, id: OwnerId) -> usize {
        match self.owner(id).lock.0 {
            BIG => self.bigs.get(id).map_or(0, |big| big.locks.len()),
            _ => self.small_locks(id).len(),
        }
    }

    /// Every lock of an owner, small or big, for the few callers that take them all.
    pub(super) fn all_locks(&self, id: OwnerId) -> Vec<Tagged> {
        match self.owner(id).lock.0 {
            BIG => self
                .bigs
                .get(id)
                .map(|big| big.locks.iter().copied().collect())
                .unwrap_or_default(),
            _ => self.small_locks(id).to_vec(),
        }
    }

    /// Adds a lock to its owner's list; past `SMALL` the owner becomes big.
    pub(super) fn add_owner_lock(&mut self, id: OwnerId, lock: Tagged) {
        self.len += 1;
        let Some(owner) = self.owners[id as usize].as_mut() else {
            return;
        };
        match owner.lock.0 {
            NONE => owner.lock = lock,
            BIG => self.add_big_lock(id, lock),
            SPILLED => {
                let mut promote = false;
                if let Some(all) = self.owner_locks.get_mut(id) {
                    reserve_for_one(all);
                    all.push(lock);
                    promote = all.len() > self.small;
                }
                if promote {
                    self.promote(id);
                }
            }
            _ => {
                self.owner_locks.insert_new(id, vec![owner.lock, lock]);
                owner.lock = Tagged(SPILLED);
            }
        }
    }

    /// Takes a lock off its owner's list (see `remove_big_lock` for a big owner).
    pub(super) fn remove_owner_lock(&mut self, id: OwnerId, lock: Tagged) {
        let Some(owner) = self.owners[id as usize].as_mut() else {
            return;
        };
        if owner.lock.0 == BIG {
            self.remove_big_lock(id, lock);
            return;
        }
        self.len -= 1;
        if owner.lock == lock {
            owner.lock = Tagged(NONE);
        } else if owner.lock.0 == SPILLED {
            if let Some(all) = self.owner_locks.get_mut(id) {
                // From the end: releasing everything takes the last lock each time.
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

    /// Moves an owner's lease to `deadline`. A small owner's locks raise the `latest` of their
    /// ancestors when it moves later, a few walks of a few steps each; a big owner's cost
    /// nothing, as their liveness is read from the owner itself.
    pub(super) fn set_lease(&mut self, id: OwnerId, deadline: u64) {
        let before = self.owner(id).deadline;
        if deadline == before {
            return;
        }
        self.unfile(id);
        self.file(id, deadline);
        if deadline > before && !self.is_big(id) {
            let locks: smallvec::SmallVec<[Tagged; 4]> =
                self.small_locks(id).iter().copied().collect();
            for lock in locks {
                self.raise_latest(lock.id(), deadline);
            }
        }
    }

    /// How many locks of each mode the small owner `id` holds strictly beneath `node`: a walk
    /// up from each of its locks, at most `SMALL` of them.
    pub(super) fn small_beneath(&self, id: OwnerId, node: NodeId) -> [u32; 2] {
        let mut counts = [0, 0];
        for lock in self.small_locks(id) {
            let mut up = lock.id();
            while up != super::ids::ROOT {
                up = self.nodes[up as usize].parent;
                if up == node {
                    counts[lock.mode().index()] += 1;
                    break;
                }
            }
        }
        counts
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
