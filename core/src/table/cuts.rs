//! Cuts: what a grant passed over, so that persistence and digests leave out the same locks on
//! every server at any time.
//!
//! A request is granted over lapsed locks that nobody reclaimed yet (a mountain of them beneath
//! its path, a lapsed holder of its path or of an ancestor): reclaiming them first would cost
//! what they hold. They then conflict with the new lock while both are stored, until the expiry
//! cycle reclaims them. A payload must not hold both (a server loading it could not tell which
//! one is gone), and a digest must be the same on a master and its replica whenever they are
//! compared, so the lapsed ones are left out of both by a rule that does not read the clock: a
//! lock is **cut** when a lock of another owner that conflicts with it was granted after it
//! (a higher fence) over it. Such a lock was lapsed when that grant was made, or the grant would
//! have been refused, so leaving it out loses nothing anyone could see.
//!
//! The grant records where it passed over conflicting locks, by the mode it was granted in: on
//! its own node and on each ancestor that held a conflicting lock of another owner (`here`), and
//! on its own node when conflicting locks lay beneath (`beneath`), with its fence and owner. A
//! replica applying the grant's effect makes the same record from the same locks. Only the
//! newest cut of each kind and mode is kept: an older one could only cut a lock of the newer
//! one's owner, and that owner's lapsed locks went before its grant (a lapsed lease is
//! reclaimed before its token is granted again). A node's cuts go with the node.

use super::conflicts::blocking_count;
use super::ids::{NodeId, OwnerId, NONE, ROOT, SPILLED};
use super::tree::{prefetch_node, push_segment, Held, SortedChildren};
use super::Tree;
use crate::lock::{LockInfo, Mode};

/// What `walk_persisted` calls for each lock: the nodes from the root down to the lock's (the
/// root first), the trie key of its path, the lock.
pub(super) type PersistedVisit<'a> = dyn FnMut(&[NodeId], &[u8], &Held) + 'a;

/// A grant that passed over conflicting locks: its fence (0 for none) and its owner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Cut {
    fence: u64,
    owner: OwnerId,
}

impl Cut {
    fn newest(self, other: Cut) -> Cut {
        if other.fence > self.fence {
            other
        } else {
            self
        }
    }
}

/// The cuts recorded on one node, each by the mode of the grant that made it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Cuts {
    here: [Cut; 2],
    beneath: [Cut; 2],
}

/// Whether a cut made by a grant in `mode` leaves `held` out.
fn cuts(cut: Cut, mode: Mode, held: &Held) -> bool {
    cut.fence > held.fence && mode.conflicts_with(held.mode()) && cut.owner != held.owner()
}

impl Tree {
    /// Records the cuts of a new lock of `owner` in `mode` on `node`, taking `fence`, before it
    /// is added: where it passes over conflicting locks of other owners. O(depth); a crowd is
    /// looked at through `conflicting_here`, a step or two.
    pub(super) fn cut_for(&mut self, node: NodeId, owner: OwnerId, mode: Mode, fence: u64) {
        let cut = Cut { fence, owner };
        let m = mode.index();
        let mut at = node;
        loop {
            if self.conflicting_here(at, mode, owner) {
                self.cuts_mut(at).here[m] = cut;
            }
            if at == ROOT {
                break;
            }
            at = self.nodes[at as usize].parent;
        }
        if blocking_count(mode, self.below(node)) > 0 {
            self.cuts_mut(node).beneath[m] = cut;
        }
    }

    fn cuts_mut(&mut self, node: NodeId) -> &mut Cuts {
        if !self.cuts.contains_key(node) {
            self.cuts.insert_new(node, Cuts::default());
        }
        self.cuts
            .get_mut(node)
            .expect("the cuts of a node were just made")
    }

    /// Forgets the cuts of a node that goes.
    pub(super) fn drop_cuts(&mut self, node: NodeId) {
        if !self.cuts.is_empty() {
            self.cuts.remove(node);
        }
    }

    /// Calls `visit` with each lock a payload or a digest carries, in tree order: every stored
    /// lock, lapsed or not, but those of owners being freed (`big`) and those cut. It reads no
    /// clock, so a master and its replicas, which store the same locks, carry the same ones.
    pub(super) fn visit_persisted(&self, visit: &mut dyn FnMut(LockInfo)) {
        self.walk_persisted::<true>(&|_| {}, &mut |path, key, held| {
            if let Some(&node) = path.last() {
                visit(self.info(node, key, held));
            }
        });
    }

    /// The walk of `visit_persisted`: each lock it carries, with the nodes from the root down to
    /// the lock's (the root first) and, when `KEYED`, the trie key of its path (empty when not:
    /// the dense encoding names segments from the nodes, and copying each into a key was a
    /// copy per node for nothing).
    ///
    /// `soon` is told the owner of a lock the walk visits a few visits later (of a path of one
    /// lock, the common case), for the caller to ask for what it will read of that owner.
    pub(super) fn walk_persisted<const KEYED: bool>(
        &self,
        soon: &dyn Fn(OwnerId),
        visit: &mut PersistedVisit<'_>,
    ) {
        // How many visits ahead a node is asked for, and its lock's owner given to `soon`: that
        // node asked for earlier, so that reading its lock seldom waits.
        const AHEAD: usize = 8;
        const NEAR: usize = 4;
        let none = [Cut::default(); 2];
        // The walk's pending nodes, a level of the tree each: the children of each node on the
        // current path, sorted, and how many of them were visited. A level's lists are kept
        // from one node to the next at its depth. Pushing every child on one stack of entries
        // wrote a folder of a million files out again, 56 bytes a child, onto memory freshly
        // faulted in on each `DUMP` (a tenth of its time at that shape).
        let mut levels: Vec<Level> = Vec::new();
        let mut depth = 0;
        let mut key = Vec::new();
        let mut path: Vec<NodeId> = Vec::new();
        let mut node = ROOT;
        let mut inherited = none;
        loop {
            path.truncate(depth);
            path.push(node);
            if KEYED && node != ROOT {
                push_segment(&mut key, &self.nodes[node as usize].segment);
            }
            let own = if self.cuts.is_empty() {
                None
            } else {
                self.cuts.get(node).copied()
            };
            let here = own.map_or(none, |c| c.here);
            for held in self.canonical_holders(node) {
                let out = self.is_buried(held.owner())
                    || Mode::ALL.iter().any(|&mode| {
                        cuts(inherited[mode.index()], mode, &held)
                            || cuts(here[mode.index()], mode, &held)
                    });
                if !out {
                    visit(&path, &key, &held);
                }
            }
            let mut below = inherited;
            if let Some(own) = own {
                for (cut, newer) in below.iter_mut().zip(own.beneath) {
                    *cut = cut.newest(newer);
                }
            }
            if levels.len() == depth {
                levels.push(Level::default());
            }
            let level = &mut levels[depth];
            self.sort_children(node, &mut level.sorted);
            level.next = 0;
            level.key_length = key.len();
            level.below = below;
            depth += 1;
            // The next node: the first child not visited yet on the deepest level that has one.
            while depth > 0 && levels[depth - 1].next == levels[depth - 1].sorted.keyed.len() {
                depth -= 1;
            }
            if depth == 0 {
                break;
            }
            let level = &mut levels[depth - 1];
            node = level.sorted.keyed[level.next].1;
            level.next += 1;
            key.truncate(level.key_length);
            inherited = level.below;
            // The node visited a few visits from now is asked for: those `sort_children` asked
            // for were often gone from the cache by their turn, as Redis compresses each chunk
            // the encoder hands it (LZF's table and input evict half the cache every two
            // thousand locks).
            if let Some(ahead) = pending(&levels[..depth], AHEAD) {
                prefetch_node(&self.nodes[ahead as usize]);
            }
            if let Some(near) = pending(&levels[..depth], NEAR) {
                let lock = self.nodes[near as usize].lock;
                if lock.owner.0 != NONE && lock.owner.0 != SPILLED {
                    soon(lock.owner());
                }
            }
        }
    }
}

/// One level of [`Tree::walk_persisted`]: a node's children in order, how many were visited,
/// the length of the node's trie key, and the newest `beneath` cuts of the node and its
/// ancestors, by mode.
#[derive(Default)]
struct Level {
    sorted: SortedChildren,
    next: usize,
    key_length: usize,
    below: [Cut; 2],
}

/// The node the walk visits `ahead` visits after the one it is about to visit, when the
/// walk's pending nodes name it: counted from the deepest level up, as a stack of every
/// pending node, the deepest level's on top, would hold them. Nearly always found in the
/// deepest level, in one step. Only the `ahead` deepest levels are looked at: beneath a chain
/// of folders of one child each, thousands deep, the levels above have nothing left, and
/// counting through all of them on every visit would make the walk quadratic in the depth
/// for the sake of a hint.
fn pending(levels: &[Level], ahead: usize) -> Option<NodeId> {
    let mut left = ahead - 1;
    for level in levels.iter().rev().take(ahead) {
        let keyed = &level.sorted.keyed;
        let remaining = keyed.len() - level.next;
        if left < remaining {
            return Some(keyed[level.next + left].1);
        }
        left -= remaining;
    }
    None
}
