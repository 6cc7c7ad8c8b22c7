//! Deciding a request, and the read-only queries: which live locks block a request, what lies
//! beneath a path.
//!
//! A request for `mode` on `path` by owner `me` is blocked by a live lock of another owner on
//! `path` or an ancestor (the walk down), or strictly beneath it. What lies beneath is decided
//! from the node's marks without looking at the locks themselves in nearly every case:
//!
//! * no conflicting mark: free;
//! * the big owners' marks on the node (a step each): another big owner's live lock blocks, a
//!   lapsed or buried one does not, and the requester's own are set aside;
//! * what remains is small owners' locks: the requester's own are counted from its own list (at
//!   most `SMALL` walks up), and if others remain but the node's `latest` is not after `now`,
//!   every one of them has lapsed: free, however many lapsed there;
//! * otherwise some may be live: a search beneath (`search_beneath`) descends only where a small
//!   owner's lock may still be live, and stops at the first live one.
//!
//! The search is the one part whose cost is not the depth of the path: it meets the lapsed locks
//! that lie beside live ones, not yet reclaimed. It is bounded (`SEARCH_BUDGET` nodes per
//! request); a request that runs out is refused as if blocked (or waits, with `WAIT`), and the
//! lapsed owners it met are reclaimed so that the next try goes further. The expiry cycle
//! reclaims lapsed owners in the background meanwhile, so this can only delay a request for as
//! long as the cycle takes to clear the way, and only where live and lapsed locks lie together
//! in one subtree in the thousands.

use std::collections::BTreeSet;

use super::ids::{NodeId, OwnerId, Tagged, ROOT};
use super::tree::{push_segment, Held, Walk};
use super::Tree;
use crate::lock::{LockInfo, Mode, PackedToken, Token};
use crate::path::Path;

/// The modes whose locks beneath a path block a request for `mode` there.
pub(super) fn blocking_count(mode: Mode, counts: [u32; 2]) -> u64 {
    match mode {
        Mode::Write => u64::from(counts[0]) + u64::from(counts[1]),
        Mode::Read => u64::from(counts[Mode::Write.index()]),
    }
}

/// Nodes (or a crowd's readers) a request may look at for a live lock among lapsed ones.
pub(super) const SEARCH_BUDGET: usize = 4096;

/// The lapsed owners one request notes for reclaiming, at most.
const DEAD_NOTED: usize = 128;

/// How a request's item was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Free,
    Blocked,
    /// The search beneath ran out of budget before it could tell.
    Unsure,
}

impl Tree {
    /// Whether a live lock of another owner blocks `token` from taking `mode` on `path` at
    /// `now`, changing nothing: the decision an acquire makes.
    pub fn is_blocked(&self, now: u64, token: &Token, mode: Mode, path: &Path) -> bool {
        let me = self.find_owner(&PackedToken::new(token));
        let mut dead = Vec::new();
        let mut budget = usize::MAX;
        self.decide(me, mode, path, now, &mut dead, &mut budget) != Verdict::Free
    }

    /// Decides one item of a request for the owner `me` (a token that holds nothing when
    /// `None`). The lapsed owners met on the way are added to `dead` (each at most once per
    /// item), for the caller to reclaim.
    pub(super) fn decide(
        &self,
        me: Option<OwnerId>,
        mode: Mode,
        path: &Path,
        now: u64,
        dead: &mut Vec<OwnerId>,
        budget: &mut usize,
    ) -> Verdict {
        let mut unsure = false;
        let walk = self.walk_down(path, |node, _| {
            match self.blocked_here(node, mode, me, now, dead, budget) {
                Some(blocked) => blocked,
                None => {
                    unsure = true;
                    true
                }
            }
        });
        match walk {
            Walk::Stopped if unsure => Verdict::Unsure,
            Walk::Stopped => Verdict::Blocked,
            Walk::Left => Verdict::Free,
            Walk::Reached(node) => self.decide_beneath(me, mode, node, now, dead, budget),
            // The path ends on a virtual segment of `node`: its locks lie beneath the path.
            Walk::Within(node) => match self.blocked_here(node, mode, me, now, dead, budget) {
                Some(true) => Verdict::Blocked,
                None => Verdict::Unsure,
                Some(false) => self.decide_beneath(me, mode, node, now, dead, budget),
            },
        }
    }

    /// Whether `held` (of a conflicting mode) blocks `me` at `now`; its owner goes to `dead`
    /// when it lapsed and is not being freed already, up to `DEAD_NOTED` of them (a request
    /// reclaims a bounded number of those it meets anyway).
    pub(super) fn blocks(
        &self,
        held: &Held,
        me: Option<OwnerId>,
        now: u64,
        dead: &mut Vec<OwnerId>,
    ) -> bool {
        let owner = held.owner();
        if Some(owner) == me {
            return false;
        }
        if self.is_live(owner, now) {
            return true;
        }
        if dead.len() < DEAD_NOTED && !self.is_buried(owner) && !dead.contains(&owner) {
            dead.push(owner);
        }
        false
    }

    /// Decides what lies strictly beneath `node` (see the top of this file).
    fn decide_beneath(
        &self,
        me: Option<OwnerId>,
        mode: Mode,
        node: NodeId,
        now: u64,
        dead: &mut Vec<OwnerId>,
        budget: &mut usize,
    ) -> Verdict {
        let total = blocking_count(mode, self.below(node));
        if total == 0 {
            return Verdict::Free;
        }
        let mut big = 0;
        for mark in self.big_marks_at(node) {
            let count = blocking_count(mode, mark.below);
            if count == 0 {
                continue;
            }
            big += count;
            if Some(mark.owner) == me {
                continue;
            }
            if self.is_live(mark.owner, now) {
                return Verdict::Blocked;
            }
            if !self.is_buried(mark.owner) && !dead.contains(&mark.owner) {
                dead.push(mark.owner);
            }
        }
        let small = total - big;
        if small == 0 {
            return Verdict::Free;
        }
        let own = match me {
            Some(me) if !self.is_big(me) => blocking_count(mode, self.small_beneath(me, node)),
            _ => 0,
        };
        if small == own || self.latest(node) <= now {
            return Verdict::Free;
        }
        self.search_beneath(me, mode, node, now, dead, budget)
    }

    /// The conflicting locks of small owners strictly beneath `node`.
    fn small_below(&self, mode: Mode, node: NodeId) -> u64 {
        let total = blocking_count(mode, self.below(node));
        let big: u64 = self
            .big_marks_at(node)
            .iter()
            .map(|mark| blocking_count(mode, mark.below))
            .sum();
        total.saturating_sub(big)
    }

    /// Looks beneath `node` for a live conflicting lock of another small owner, descending only
    /// where one may be (conflicting small marks and a `latest` after `now`). Big owners were
    /// decided from the marks on `node` already. At most `budget` nodes are visited.
    fn search_beneath(
        &self,
        me: Option<OwnerId>,
        mode: Mode,
        node: NodeId,
        now: u64,
        dead: &mut Vec<OwnerId>,
        budget: &mut usize,
    ) -> Verdict {
        let mut stack: Vec<NodeId> = self.children(node).collect();
        while let Some(child) = stack.pop() {
            if *budget == 0 {
                return Verdict::Unsure;
            }
            *budget -= 1;
            match self.blocked_here(child, mode, me, now, dead, budget) {
                Some(true) => return Verdict::Blocked,
                Some(false) => {}
                None => return Verdict::Unsure,
            }
            if self.latest(child) > now && self.small_below(mode, child) > 0 {
                stack.extend(self.children(child));
            }
        }
        Verdict::Free
    }

    /// Whether a lock strictly beneath `node` may be live at `now`: a small owner's (its
    /// `latest`, an upper bound) or a big owner's (its marks), optionally only those that
    /// conflict with `mode` and are not of the `excluded` owner.
    fn may_be_live_beneath(
        &self,
        node: NodeId,
        now: u64,
        mode: Mode,
        excluded: &dyn Fn(OwnerId) -> bool,
    ) -> bool {
        if blocking_count(mode, self.below(node)) == 0 {
            return false;
        }
        (self.latest(node) > now && self.small_below(mode, node) > 0)
            || self.big_marks_at(node).iter().any(|mark| {
                blocking_count(mode, mark.below) > 0
                    && !excluded(mark.owner)
                    && self.is_live(mark.owner, now)
            })
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
        let excluded = |owner: OwnerId| me == Some(owner);
        let mut found = BTreeSet::new();
        for (mode, path) in items {
            let mut key = Vec::with_capacity(path.key().len());
            let walk = self.walk_down(path, |node, segment| {
                if node != ROOT {
                    push_segment(&mut key, segment);
                }
                self.live_conflicting_here(node, *mode, now, &excluded, &mut |held| {
                    found.insert(self.info(node, &key, held));
                });
                false
            });
            match walk {
                Walk::Reached(node) => {
                    self.collect_beneath(node, &mut key, now, &excluded, *mode, &mut found);
                }
                // The path ends on a virtual segment of `node`: its locks lie beneath the path.
                Walk::Within(node) => {
                    push_segment(&mut key, &self.nodes[node as usize].segment);
                    self.live_conflicting_here(node, *mode, now, &excluded, &mut |held| {
                        found.insert(self.info(node, &key, held));
                    });
                    self.collect_beneath(node, &mut key, now, &excluded, *mode, &mut found);
                }
                Walk::Stopped | Walk::Left => {}
            }
        }
        found.into_iter().collect()
    }

    /// Collects the live locks strictly beneath `node` that block `mode`, descending only into
    /// subtrees where one may be. Like `walk`, it keeps its own stack of (node, its parent's key
    /// length) instead of recursing, so depth costs no stack.
    fn collect_beneath(
        &self,
        node: NodeId,
        key: &mut Vec<u8>,
        now: u64,
        excluded: &dyn Fn(OwnerId) -> bool,
        mode: Mode,
        found: &mut BTreeSet<LockInfo>,
    ) {
        let start = key.len();
        let mut stack: Vec<(NodeId, usize)> = Vec::new();
        if self.may_be_live_beneath(node, now, mode, excluded) {
            stack.extend(self.children(node).map(|c| (c, start)));
        }
        while let Some((child, parent_length)) = stack.pop() {
            key.truncate(parent_length);
            push_segment(key, &self.nodes[child as usize].segment);
            self.live_conflicting_here(child, mode, now, excluded, &mut |held| {
                found.insert(self.info(child, key, held));
            });
            if self.may_be_live_beneath(child, now, mode, excluded) {
                let length = key.len();
                stack.extend(self.children(child).map(|grandchild| (grandchild, length)));
            }
        }
        key.truncate(start);
    }

    /// The live locks on `under` and beneath it, in tree order. Subtrees where nothing may be
    /// live are skipped, so a mountain of lapsed locks costs a look at its top.
    pub fn locks(&self, now: u64, under: &Path) -> Vec<LockInfo> {
        let mut out = Vec::new();
        if let Some((node, own)) = self.locate_under(under) {
            let mut key = if own {
                under.key().to_vec()
            } else {
                self.key_of(node)
            };
            self.walk_where(
                node,
                &mut key,
                &self.live_beneath(now),
                &|table: &Tree, node| table.may_be_live_here(node, now),
                &mut |table, node, key, held| {
                    if table.is_live(held.owner(), now) {
                        out.push(table.info(node, key, held));
                    }
                },
            );
        }
        out
    }

    /// For the walks that list live locks: whether to descend beneath a node.
    fn live_beneath(&self, now: u64) -> impl Fn(&Tree, NodeId) -> bool {
        move |table: &Tree, node: NodeId| {
            table.may_be_live_beneath(node, now, Mode::Write, &|_| false)
        }
    }

    /// The live locks of `token` on `under` and beneath it, in tree order: `LOCKS ... TOKEN`.
    /// It reads whichever is smaller, the owner's own locks (its list, or a big owner's set) or
    /// the locks stored at and beneath `under` (its intention marks count them), so listing all
    /// of an owner's locks costs what it returns, O(depth) each plus sorting them, whatever the
    /// project holds, and listing a small folder costs the folder, whatever the owner holds.
    pub fn locks_of_token(&self, now: u64, under: &Path, token: &Token) -> Vec<LockInfo> {
        let Some(owner) = self.find_owner(&PackedToken::new(token)) else {
            return Vec::new();
        };
        let Some((top, own)) = self.locate_under(under) else {
            return Vec::new();
        };
        if !self.is_live(owner, now) {
            return Vec::new();
        }
        let below = self.below(top);
        let stored = self.holder_count(top) as u64 + u64::from(below[0]) + u64::from(below[1]);
        let mut out = Vec::new();
        if self.lock_count(owner) as u64 <= stored {
            for lock in self.all_locks(owner) {
                let node = lock.id();
                if let Some(held) = self.holder(node, Tagged::new(owner, lock.mode())) {
                    if self.is_at_or_beneath(node, top) {
                        out.push(self.info(node, &self.key_of(node), held));
                    }
                }
            }
            // An owner's locks are in no order; `LockInfo` sorts by path in tree order, then
            // writers first, as `walk` lists a node's locks.
            out.sort_unstable();
        } else {
            let mut key = if own {
                under.key().to_vec()
            } else {
                self.key_of(top)
            };
            self.walk(top, &mut key, &mut |table, node, key, held| {
                if held.owner() == owner {
                    out.push(table.info(node, key, held));
                }
            });
        }
        out
    }

    /// The locks a payload or a digest carries, in tree order: every stored lock, lapsed or
    /// not, but those of owners being freed and those a later grant passed over (see `cuts`).
    /// It reads no clock, so servers that store the same locks list the same ones.
    pub fn iter(&self) -> impl Iterator<Item = LockInfo> + '_ {
        let mut out = Vec::with_capacity(self.len);
        self.visit_persisted(&mut |lock| out.push(lock));
        out.into_iter()
    }

    /// Every stored lock of an owner not being freed, lapsed, cut or not, in tree order: what
    /// the table holds, for tests that store conflicting locks on purpose (a replica's grants are
    /// not decided), where [`Tree::iter`] would leave cut ones out.
    #[doc(hidden)]
    pub fn stored(&self) -> Vec<LockInfo> {
        let mut out = Vec::with_capacity(self.len);
        self.walk(ROOT, &mut Vec::new(), &mut |table, node, key, held| {
            if !table.is_buried(held.owner()) {
                out.push(table.info(node, key, held));
            }
        });
        out
    }

    /// Calls `visit` with each lock [`Tree::iter`] lists, without building a list: what
    /// persistence, AOF rewrites and digests walk.
    pub fn for_each_persisted(&self, visit: &mut dyn FnMut(LockInfo)) {
        self.visit_persisted(visit);
    }
}
