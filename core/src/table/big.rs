//! Big owners: tokens that hold more than `SMALL` locks, kept so that none of their commands
//! costs what they hold.
//!
//! A big owner's locks are a hash set (`BigOwner::locks`) rather than a list, so that releasing
//! one of a million finds it in one step. Its locks are counted on every ancestor of each, per
//! owner (`Tree::big_marks`: for a node, the big owners with locks strictly beneath it and
//! how many of each mode), which answers the two questions a request asks about what lies
//! beneath a path in a step per big owner there, not per lock:
//!
//! * how many of the locks beneath are the requester's own (they never block it);
//! * whether another big owner's locks there are live: its lease is one number on the owner.
//!
//! A big owner that is released whole, or whose lease lapses, is **buried**, as Redis's lazy free
//! unlinks a key at once and frees its value in the background: it leaves the token index and the
//! expiry index, its lease drops to zero, and its locks stop counting (`len`, listings, conflicts)
//! at that instant; `Tree::free_some` then removes them a bounded number at a time, on
//! masters and replicas alike, since the logical state (the owner is gone) is already decided.
//! Waiters behind it are retried around its locks' lowest common ancestor, which is kept as locks
//! come (`BigOwner::lca`).

use super::idmap;
use super::ids::{NodeId, OwnerId, Tagged, BIG, NONE, ROOT, SPILLED};
use super::rehash::LinearTable;
use super::Tree;
use crate::lock::Mode;
use crate::path::Path;

#[derive(Clone, Debug, Default)]
pub(super) struct BigOwner {
    /// Every lock of the owner, as `Tagged(node, mode)`.
    pub(super) locks: LinearTable<Tagged>,
    /// A node at or above every lock the owner holds: where its waiters are looked for.
    pub(super) lca: NodeId,
    /// Released or lapsed whole: its locks are being freed and count for nothing.
    pub(super) buried: bool,
}

/// One big owner's locks strictly beneath a node, by mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BigMark {
    pub(super) owner: OwnerId,
    pub(super) below: [u32; 2],
}

fn lock_hash(lock: &Tagged) -> u64 {
    idmap::hash(lock.0)
}

impl Tree {
    pub(super) fn is_buried(&self, id: OwnerId) -> bool {
        // Asked of every lock a payload carries: without big owners it reads no owner, whose
        // slot, a cache miss per lock in a project of a million owners, it would load.
        !self.bigs.is_empty() && self.is_big(id) && self.bigs.get(id).is_some_and(|big| big.buried)
    }

    /// The big owners' marks on `node`, sorted by owner.
    pub(super) fn big_marks_at(&self, node: NodeId) -> &[BigMark] {
        if self.bigs.is_empty() {
            return &[];
        }
        self.big_marks.get(node).map_or(&[], Vec::as_slice)
    }

    /// Adds `delta` to `owner`'s count of `mode` on every strict ancestor of `node`.
    pub(super) fn mark_ancestors(&mut self, node: NodeId, owner: OwnerId, mode: Mode, delta: i32) {
        let mut up = node;
        while up != ROOT {
            up = self.nodes[up as usize].parent;
            self.mark(up, owner, mode, delta);
        }
    }

    pub(super) fn mark(&mut self, node: NodeId, owner: OwnerId, mode: Mode, delta: i32) {
        let m = mode.index();
        if let Some(marks) = self.big_marks.get_mut(node) {
            match marks.binary_search_by_key(&owner, |mark| mark.owner) {
                Ok(i) => {
                    let count = &mut marks[i].below[m];
                    *count = count.saturating_add_signed(delta);
                    if marks[i].below == [0, 0] {
                        marks.remove(i);
                        self.big_mark_count -= 1;
                        if marks.is_empty() {
                            self.big_marks.remove(node);
                        }
                    }
                }
                Err(i) if delta > 0 => {
                    let mut below = [0, 0];
                    below[m] = delta as u32;
                    marks.insert(i, BigMark { owner, below });
                    self.big_mark_count += 1;
                }
                Err(_) => {}
            }
        } else if delta > 0 {
            let mut below = [0, 0];
            below[m] = delta as u32;
            self.big_marks
                .insert_new(node, vec![BigMark { owner, below }]);
            self.big_mark_count += 1;
        }
    }

    /// The lowest node at or above both `a` and `b`.
    fn common_ancestor(&self, a: NodeId, b: NodeId) -> NodeId {
        let depth = |mut n: NodeId| {
            let mut d = 0;
            while n != ROOT {
                n = self.nodes[n as usize].parent;
                d += 1;
            }
            d
        };
        let (mut a, mut b) = (a, b);
        let (mut da, mut db) = (depth(a), depth(b));
        while da > db {
            a = self.nodes[a as usize].parent;
            da -= 1;
        }
        while db > da {
            b = self.nodes[b as usize].parent;
            db -= 1;
        }
        while a != b {
            a = self.nodes[a as usize].parent;
            b = self.nodes[b as usize].parent;
        }
        a
    }

    /// Adds a lock to a big owner's set; its marks were added by `insert`.
    pub(super) fn add_big_lock(&mut self, id: OwnerId, lock: Tagged) {
        let lca = self.bigs.get(id).map_or(NONE, |big| big.lca);
        let lca = if lca == NONE {
            lock.id()
        } else if self.is_at_or_beneath(lock.id(), lca) {
            lca
        } else {
            self.common_ancestor(lca, lock.id())
        };
        if let Some(big) = self.bigs.get_mut(id) {
            let before = big.locks.heap_bytes();
            big.locks.insert_unique(lock_hash(&lock), lock, lock_hash);
            big.lca = lca;
            self.big_locks += 1;
            self.inner_bytes = self.inner_bytes + big.locks.heap_bytes() - before;
        }
    }

    /// Takes a lock off a big owner's set; its marks were taken by `take_lock`. A buried owner
    /// left with nothing is freed; a live one left with half of `SMALL` becomes small again.
    pub(super) fn remove_big_lock(&mut self, id: OwnerId, lock: Tagged) {
        let Some(big) = self.bigs.get_mut(id) else {
            return;
        };
        let before = big.locks.heap_bytes();
        if big
            .locks
            .remove(lock_hash(&lock), |&l| l == lock, lock_hash)
            .is_some()
        {
            self.big_locks -= 1;
        }
        self.inner_bytes = self.inner_bytes + big.locks.heap_bytes() - before;
        let (buried, left) = (big.buried, big.locks.len());
        if buried {
            self.buried_locks -= 1;
            if left == 0 {
                if let Some(gone) = self.bigs.remove(id) {
                    self.inner_bytes -= gone.locks.heap_bytes();
                }
                self.free_owner_slot(id);
            }
        } else {
            self.len -= 1;
            if left <= self.small / 2 {
                self.demote(id);
            }
        }
    }

    /// Makes a small owner with more than `SMALL` locks big: its set, and its marks on the
    /// ancestors of each lock. Its locks stay in the `latest` of their ancestors, which only
    /// ever overstates.
    pub(super) fn promote(&mut self, id: OwnerId) {
        let Some(list) = self.owner_locks.remove(id) else {
            return;
        };
        let mut big = BigOwner {
            lca: list[0].id(),
            ..BigOwner::default()
        };
        for &lock in &list {
            big.lca = self.common_ancestor(big.lca, lock.id());
            big.locks.insert_unique(lock_hash(&lock), lock, lock_hash);
            self.mark_ancestors(lock.id(), id, lock.mode(), 1);
            self.mark_crowd_big(lock.id(), Tagged::new(id, lock.mode()), true);
        }
        self.big_locks += big.locks.len();
        self.inner_bytes += big.locks.heap_bytes();
        self.bigs.insert_new(id, big);
        self.owner_mut(id).lock = Tagged(BIG);
    }

    /// Makes a big owner small again: a list, no marks, and its locks raise the `latest` of
    /// their ancestors to its lease.
    fn demote(&mut self, id: OwnerId) {
        let Some(big) = self.bigs.remove(id) else {
            return;
        };
        self.inner_bytes -= big.locks.heap_bytes();
        let list: Vec<Tagged> = big.locks.iter().copied().collect();
        self.big_locks -= list.len();
        let deadline = self.owner(id).deadline;
        for &lock in &list {
            self.mark_ancestors(lock.id(), id, lock.mode(), -1);
            self.mark_crowd_big(lock.id(), Tagged::new(id, lock.mode()), false);
            self.raise_latest(lock.id(), deadline);
        }
        let owner = self.owner_mut(id);
        match list[..] {
            [] => owner.lock = Tagged(NONE),
            [only] => owner.lock = only,
            _ => {
                owner.lock = Tagged(SPILLED);
                self.owner_locks.insert_new(id, list);
            }
        }
    }

    /// Buries a big owner (released whole, or its lease lapsed): out of the indexes, its locks
    /// count for nothing from now on and are freed by `free_some`. Returns how many locks it
    /// held and the path under which waiters it held up are to be looked for.
    pub(super) fn bury(&mut self, id: OwnerId) -> (usize, Path) {
        // Unfiled, its lease is 0, which is what marks it buried.
        self.unfile(id);
        self.unindex(id);
        let (count, lca) = match self.bigs.get_mut(id) {
            Some(big) => {
                big.buried = true;
                (big.locks.len(), big.lca)
            }
            None => (0, ROOT),
        };
        self.len -= count;
        self.buried_locks += count;
        self.graveyard.push_back(id);
        (count, Path::from_trusted_key(&self.key_of(lca)))
    }

    /// Frees up to `budget` locks of buried owners and gives back the arenas' free tails, the
    /// table's background work. Returns how much was done; zero when nothing is left to do.
    pub fn free_some(&mut self, budget: usize) -> usize {
        let mut done = 0;
        while done < budget {
            let Some(&id) = self.graveyard.front() else {
                break;
            };
            let next = self
                .owners
                .get(id as usize)
                .and_then(Option::as_ref)
                .filter(|owner| owner.lock.0 == BIG)
                .and_then(|_| self.bigs.get(id))
                .filter(|big| big.buried)
                .and_then(|big| big.locks.any().copied());
            let Some(lock) = next else {
                self.graveyard.pop_front();
                continue;
            };
            self.remove_silently(lock.id(), id, lock.mode());
            done += 1;
            // The last lock freed the owner itself.
            if self.owners.get(id as usize).is_none_or(Option::is_none) {
                self.graveyard.pop_front();
            }
        }
        done + self.trim_some(budget.saturating_sub(done))
    }

    /// Whether `free_some` has anything to do.
    pub fn has_background_work(&self) -> bool {
        !self.graveyard.is_empty() || self.has_free_tail()
    }
}
