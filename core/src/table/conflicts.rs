//! Read-only queries: whether a request is blocked, which locks block it, and what lies
//! beneath a path.

use std::collections::BTreeSet;

use super::ids::{NodeId, OwnerId, ROOT};
use super::tree::{push_segment, Walk};
use super::LockTable;
use crate::lock::{LockInfo, Mode, PackedToken, Token};
use crate::path::Path;

/// The modes whose locks beneath a path block a request for `mode` there.
pub(super) fn blocking_count(mode: Mode, counts: [u32; 2]) -> u64 {
    match mode {
        Mode::Write => u64::from(counts[0]) + u64::from(counts[1]),
        Mode::Read => u64::from(counts[Mode::Write.index()]),
    }
}

impl LockTable {
    /// Whether another owner's lock blocks `token` from taking `mode` on `path`. Expired locks
    /// count, so reclaim those in the way first ([`LockTable::reclaim_blockers`]).
    pub fn is_blocked(&self, token: &Token, mode: Mode, path: &Path) -> bool {
        self.is_blocked_for(self.find_owner(&PackedToken::new(token)), mode, path)
    }

    /// Whether any lock at all (whoever holds it) blocks `mode` on `path`, in O(depth).
    pub fn conflicts(&self, mode: Mode, path: &Path) -> bool {
        self.is_blocked_for(None, mode, path)
    }

    /// `is_blocked` for the owner `me`, or for a token that holds nothing when `None`.
    pub(super) fn is_blocked_for(&self, me: Option<OwnerId>, mode: Mode, path: &Path) -> bool {
        let walk = self.walk_down(path, |node, _| {
            self.held(node)
                .iter()
                .take_while(|h| h.mode().conflicts_with(mode))
                .any(|h| Some(h.owner()) != me)
        });
        let node = match walk {
            Walk::Stopped => return true,
            Walk::Left => return false,
            Walk::Reached(node) => node,
        };
        let beneath = blocking_count(mode, self.nodes[node as usize].below);
        beneath > 0 && beneath > blocking_count(mode, self.own_beneath(me, node))
    }

    /// The owners of the expired locks that block `mode` on `path` for the owner `me` (for a
    /// token that holds nothing when `None`), added to `owners`, up to the first live blocker
    /// met; returns whether it met one. Ancestors come first, then what lies beneath, found
    /// through the intention marks as `collect_beneath` finds it, so a request that nothing
    /// expired blocks costs what `is_blocked_for` costs plus the blockers it meets.
    pub(super) fn expired_blockers(
        &self,
        now: u64,
        me: Option<OwnerId>,
        mode: Mode,
        path: &Path,
        owners: &mut Vec<OwnerId>,
    ) -> bool {
        // Whether one node's locks hold a live blocker; the expired ones' owners are noted.
        let meet = |node: NodeId, owners: &mut Vec<OwnerId>| {
            for held in self.held(node) {
                if !held.mode().conflicts_with(mode) || Some(held.owner()) == me {
                    continue;
                }
                if held.deadline > now {
                    return true;
                }
                owners.push(held.owner());
            }
            false
        };
        let node = match self.walk_down(path, |node, _| meet(node, owners)) {
            Walk::Stopped => return true,
            Walk::Left => return false,
            Walk::Reached(node) => node,
        };
        let mut stack: Vec<NodeId> = Vec::new();
        if blocking_count(mode, self.nodes[node as usize].below) > 0 {
            stack.extend(self.children(node));
        }
        while let Some(child) = stack.pop() {
            if meet(child, owners) {
                return true;
            }
            if blocking_count(mode, self.nodes[child as usize].below) > 0 {
                stack.extend(self.children(child));
            }
        }
        false
    }

    /// The live locks that block the request `items` of `token` (of nobody when `None`), each
    /// once, in tree order.
    pub fn blockers(
        &self,
        now: u64,
        token: Option<&Token>,
        items: &[(Mode, Path)],
    ) -> Vec<LockInfo> {
        let me = token.and_then(|t| self.find_owner(&PackedToken::new(t)));
        let excluded = |owner: OwnerId| token.is_some() && Some(owner) == me;
        let mut found = BTreeSet::new();
        for (mode, path) in items {
            let mut key = Vec::with_capacity(path.key().len());
            let walk = self.walk_down(path, |node, segment| {
                if node != ROOT {
                    push_segment(&mut key, segment);
                }
                for held in self.held(node) {
                    if held.mode().conflicts_with(*mode)
                        && !excluded(held.owner())
                        && held.deadline > now
                    {
                        found.insert(self.info(node, &key, held));
                    }
                }
                false
            });
            if let Walk::Reached(node) = walk {
                self.collect_beneath(node, &mut key, now, &excluded, *mode, &mut found);
            }
        }
        found.into_iter().collect()
    }

    /// The live locks on `under` and beneath it, in tree order.
    pub fn locks(&self, now: u64, under: &Path) -> Vec<LockInfo> {
        let mut out = Vec::new();
        if let Some(node) = self.locate(under) {
            let mut key = under.key().to_vec();
            self.walk(node, &mut key, &mut |table, node, key, held| {
                if held.deadline > now {
                    out.push(table.info(node, key, held));
                }
            });
        }
        out
    }

    /// The live locks of `token` on `under` and beneath it, in tree order: `LOCKS ... TOKEN`.
    /// It reads whichever is smaller, the owner's own list of locks (kept for release and
    /// renewal) or the locks stored at and beneath `under` (its intention marks count them), so
    /// listing all of an owner's locks costs what it returns, O(depth) each, whatever the
    /// project holds, and listing a small folder costs the folder, whatever the owner holds.
    pub fn locks_of_token(&self, now: u64, under: &Path, token: &Token) -> Vec<LockInfo> {
        let Some(owner) = self.find_owner(&PackedToken::new(token)) else {
            return Vec::new();
        };
        let Some(top) = self.locate(under) else {
            return Vec::new();
        };
        let mine = self.locks_of(owner);
        let below = self.nodes[top as usize].below;
        let stored = self.held(top).len() as u64 + u64::from(below[0]) + u64::from(below[1]);
        let mut out = Vec::new();
        if (mine.len() as u64) <= stored {
            for lock in mine {
                let node = lock.id();
                let Some(held) = self.held_by(node, owner, lock.mode()) else {
                    continue;
                };
                if held.deadline > now && self.is_at_or_beneath(node, top) {
                    out.push(self.info(node, &self.key_of(node), held));
                }
            }
            // An owner's list is in no order; `LockInfo` sorts by path in tree order, then
            // writers first, as `walk` lists a node's locks.
            out.sort_unstable();
        } else {
            let mut key = under.key().to_vec();
            self.walk(top, &mut key, &mut |table, node, key, held| {
                if held.owner() == owner && held.deadline > now {
                    out.push(table.info(node, key, held));
                }
            });
        }
        out
    }

    /// Whether `node` is `top` or lies beneath it: a walk up, O(depth).
    fn is_at_or_beneath(&self, node: NodeId, top: NodeId) -> bool {
        let mut up = node;
        loop {
            if up == top {
                return true;
            }
            if up == ROOT {
                return false;
            }
            up = self.nodes[up as usize].parent;
        }
    }

    /// Every stored lock, expired or not, in tree order: the canonical order that persistence
    /// and digests rely on.
    pub fn iter(&self) -> impl Iterator<Item = LockInfo> + '_ {
        let mut out = Vec::with_capacity(self.len);
        self.walk(ROOT, &mut Vec::new(), &mut |table, node, key, held| {
            out.push(table.info(node, key, held));
        });
        out.into_iter()
    }

    /// How many locks of each mode the owner holds strictly beneath `node`.
    pub(super) fn own_beneath(&self, owner: Option<OwnerId>, node: NodeId) -> [u32; 2] {
        let mut counts = [0, 0];
        let Some(owner) = owner else {
            return counts;
        };
        for lock in self.locks_of(owner) {
            let mut up = lock.id();
            while up != ROOT {
                up = self.nodes[up as usize].parent;
                if up == node {
                    counts[lock.mode().index()] += 1;
                    break;
                }
            }
        }
        counts
    }

    /// Collects the live locks strictly beneath `node` that block `mode`, descending only into
    /// subtrees whose intention marks say they hold such a lock. Like `walk`, it keeps its own
    /// stack of (node, its parent's key length) instead of recursing, so depth costs no stack.
    pub(super) fn collect_beneath(
        &self,
        node: NodeId,
        key: &mut Vec<u8>,
        now: u64,
        excluded: &dyn Fn(OwnerId) -> bool,
        mode: Mode,
        found: &mut BTreeSet<LockInfo>,
    ) {
        let start = key.len();
        let mut stack: Vec<(NodeId, usize)> = self.children(node).map(|c| (c, start)).collect();
        while let Some((child, parent_length)) = stack.pop() {
            let c = &self.nodes[child as usize];
            let here = self.held(child);
            let relevant_here = here.iter().any(|h| h.mode().conflicts_with(mode));
            if !relevant_here && blocking_count(mode, c.below) == 0 {
                continue;
            }
            key.truncate(parent_length);
            push_segment(key, &c.segment);
            for held in here {
                if held.mode().conflicts_with(mode)
                    && !excluded(held.owner())
                    && held.deadline > now
                {
                    found.insert(self.info(child, key, held));
                }
            }
            if blocking_count(mode, c.below) > 0 {
                let length = key.len();
                stack.extend(self.children(child).map(|grandchild| (grandchild, length)));
            }
        }
        key.truncate(start);
    }
}
