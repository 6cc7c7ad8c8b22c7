//! The holders of one path: most paths have one, kept in the node itself; a path that several
//! hold (readers sharing a folder) keeps them in a `Crowd`, so that no command's cost grows with
//! how many share it.
//!
//! A crowd keeps its writers apart, in canonical order (by token): there are few, since writers
//! of different owners conflict, and a reader's request looks at them alone. Its readers are a
//! hash set by owner, so that taking or dropping one of a hundred thousand readers is a step,
//! where a sorted list moved half of them each time (a hundred thousand readers on one path took
//! 23 s to take one by one, 20 ms for the last). Listings sort a crowd's readers by token when
//! they list them, which costs what they return.
//!
//! Like a node's `latest`, a crowd keeps an upper bound of the leases of the small owners that
//! hold there, and the big owners that do (their leases move in one step, so they are read from
//! the owners): a request on a path a crowd held before its leases lapsed sees at once that none
//! of the crowd is live, instead of looking at each of them.

use smallvec::SmallVec;

use super::idmap;
use super::ids::{NodeId, OwnerId, Tagged, NONE, SPILLED};
use super::rehash::LinearTable;
use super::tree::Held;
use super::Tree;
use crate::lock::Mode;

#[derive(Clone, Debug, Default)]
pub(super) struct Crowd {
    /// The writers, in canonical order: by token.
    pub(super) writers: Vec<Held>,
    /// The readers, by owner.
    pub(super) readers: LinearTable<Held>,
    /// No small owner holding here has a lease past this: raised as they come or renew, never
    /// lowered.
    pub(super) latest: u64,
    /// The locks big owners hold here, as `Tagged(owner, mode)`.
    pub(super) bigs: Vec<Tagged>,
}

fn reader_hash(held: &Held) -> u64 {
    idmap::hash(held.owner())
}

impl Crowd {
    fn len(&self) -> usize {
        self.writers.len() + self.readers.len()
    }

    fn find(&self, owner: Tagged) -> Option<&Held> {
        match owner.mode() {
            Mode::Write => self.writers.iter().find(|h| h.owner == owner),
            Mode::Read => self
                .readers
                .find(idmap::hash(owner.id()), |h| h.owner == owner),
        }
    }

    fn find_mut(&mut self, owner: Tagged) -> Option<&mut Held> {
        match owner.mode() {
            Mode::Write => self.writers.iter_mut().find(|h| h.owner == owner),
            Mode::Read => self
                .readers
                .find_mut(idmap::hash(owner.id()), |h| h.owner == owner),
        }
    }
}

impl Tree {
    pub(super) fn crowd(&self, node: NodeId) -> Option<&Crowd> {
        if self.nodes[node as usize].lock.owner.0 != SPILLED {
            return None;
        }
        self.crowded.get(node)
    }

    /// The locks on `node`'s exact path: writers first, then readers (in no order).
    pub(super) fn holders(&self, node: NodeId) -> impl Iterator<Item = &Held> + '_ {
        let slot = &self.nodes[node as usize].lock;
        let (one, crowd) = match slot.owner.0 {
            NONE => (None, None),
            SPILLED => (None, self.crowded.get(node)),
            _ => (Some(slot), None),
        };
        one.into_iter().chain(
            crowd
                .into_iter()
                .flat_map(|crowd| crowd.writers.iter().chain(crowd.readers.iter())),
        )
    }

    pub(super) fn holder_count(&self, node: NodeId) -> usize {
        match self.nodes[node as usize].lock.owner.0 {
            NONE => 0,
            SPILLED => self.crowded.get(node).map_or(0, Crowd::len),
            _ => 1,
        }
    }

    /// The lock `owner` (tagged with its mode) holds on `node`'s path.
    pub(super) fn holder(&self, node: NodeId, owner: Tagged) -> Option<&Held> {
        let slot = &self.nodes[node as usize].lock;
        match slot.owner.0 {
            NONE => None,
            SPILLED => self.crowded.get(node)?.find(owner),
            _ => (slot.owner == owner).then_some(slot),
        }
    }

    pub(super) fn holder_mut(&mut self, node: NodeId, owner: Tagged) -> Option<&mut Held> {
        let slot = &mut self.nodes[node as usize].lock;
        match slot.owner.0 {
            NONE => None,
            SPILLED => self.crowded.get_mut(node)?.find_mut(owner),
            _ => (slot.owner == owner).then_some(slot),
        }
    }

    /// The locks on `node`'s path in canonical order: writers first, then by token, which keeps
    /// listings, persistence and digests identical on every server.
    pub(super) fn canonical_holders(&self, node: NodeId) -> SmallVec<[Held; 2]> {
        // The common cases, a path of no lock or of one, without the crowd's iterator: the
        // walk of a payload asks this of every node.
        let slot = self.nodes[node as usize].lock;
        match slot.owner.0 {
            NONE => return SmallVec::new(),
            SPILLED => {}
            _ => return SmallVec::from_buf_and_len([slot, Held::EMPTY], 1),
        }
        let mut all: SmallVec<[Held; 2]> = self.holders(node).copied().collect();
        if all.len() > 1 {
            all.sort_by(|a, b| {
                a.mode().cmp(&b.mode()).then_with(|| {
                    self.owner(a.owner())
                        .token
                        .cmp_text(&self.owner(b.owner()).token)
                })
            });
        }
        all
    }

    /// Adds a lock the owner does not hold yet to `node`'s path.
    pub(super) fn add_holder(&mut self, node: NodeId, held: Held) {
        let slot = self.nodes[node as usize].lock;
        match slot.owner.0 {
            NONE => {
                self.nodes[node as usize].lock = held;
                return;
            }
            SPILLED => {}
            _ => {
                // The second holder: the path's locks move into a crowd.
                self.crowded.insert_new(node, Crowd::default());
                self.nodes[node as usize].lock = Held {
                    owner: Tagged(SPILLED),
                    ..Held::EMPTY
                };
                self.add_to_crowd(node, slot);
            }
        }
        self.add_to_crowd(node, held);
    }

    fn add_to_crowd(&mut self, node: NodeId, held: Held) {
        let owner = held.owner();
        let (big, deadline) = (self.is_big(owner), self.owner(owner).deadline);
        let position = match held.mode() {
            Mode::Write => {
                let token = &self.owner(owner).token;
                self.crowd(node).map_or(0, |crowd| {
                    crowd
                        .writers
                        .iter()
                        .position(|w| self.owner(w.owner()).token.cmp_text(token).is_gt())
                        .unwrap_or(crowd.writers.len())
                })
            }
            Mode::Read => 0,
        };
        let Some(crowd) = self.crowded.get_mut(node) else {
            return;
        };
        let before = crowd.readers.heap_bytes();
        match held.mode() {
            Mode::Write => crowd.writers.insert(position, held),
            Mode::Read => crowd
                .readers
                .insert_unique(reader_hash(&held), held, reader_hash),
        }
        self.inner_bytes = self.inner_bytes + crowd.readers.heap_bytes() - before;
        if big {
            crowd.bigs.push(held.owner);
        } else {
            crowd.latest = crowd.latest.max(deadline);
        }
    }

    /// Takes `owner`'s lock (tagged with its mode) off `node`'s path; a crowd left with one
    /// lock goes back into the node.
    pub(super) fn take_holder(&mut self, node: NodeId, owner: Tagged) -> Option<Held> {
        let slot = self.nodes[node as usize].lock;
        match slot.owner.0 {
            NONE => return None,
            SPILLED => {}
            _ => {
                if slot.owner != owner {
                    return None;
                }
                self.nodes[node as usize].lock = Held::EMPTY;
                return Some(slot);
            }
        }
        let crowd = self.crowded.get_mut(node)?;
        let before = crowd.readers.heap_bytes();
        let taken = match owner.mode() {
            Mode::Write => {
                let at = crowd.writers.iter().position(|h| h.owner == owner)?;
                crowd.writers.remove(at)
            }
            Mode::Read => {
                crowd
                    .readers
                    .remove(idmap::hash(owner.id()), |h| h.owner == owner, reader_hash)?
            }
        };
        if let Some(at) = crowd.bigs.iter().position(|&b| b == owner) {
            crowd.bigs.swap_remove(at);
        }
        self.inner_bytes = self.inner_bytes + crowd.readers.heap_bytes() - before;
        if crowd.len() == 1 {
            let only = crowd
                .writers
                .first()
                .or_else(|| crowd.readers.any())
                .copied();
            if let Some(only) = only {
                if let Some(gone) = self.crowded.remove(node) {
                    self.inner_bytes -= gone.readers.heap_bytes();
                }
                self.nodes[node as usize].lock = only;
            }
        }
        Some(taken)
    }

    /// Raises the bound of a crowd on `node` to `deadline`: a small owner holding there renewed
    /// its lease later, or a big one became small.
    pub(super) fn raise_crowd(&mut self, node: NodeId, deadline: u64) {
        if self.nodes[node as usize].lock.owner.0 == SPILLED {
            if let Some(crowd) = self.crowded.get_mut(node) {
                crowd.latest = crowd.latest.max(deadline);
            }
        }
    }

    /// Records whether `lock` (`Tagged(owner, mode)`) on `node` is a big owner's, when a crowd
    /// holds it: an owner that becomes big or small converts its locks.
    pub(super) fn mark_crowd_big(&mut self, node: NodeId, lock: Tagged, big: bool) {
        if self.nodes[node as usize].lock.owner.0 != SPILLED {
            return;
        }
        if let Some(crowd) = self.crowded.get_mut(node) {
            let at = crowd.bigs.iter().position(|&b| b == lock);
            match (at, big) {
                (None, true) => crowd.bigs.push(lock),
                (Some(at), false) => {
                    crowd.bigs.swap_remove(at);
                }
                _ => {}
            }
        }
    }

    /// Whether a lock of another owner than `me` on `node`'s path blocks `mode` at `now`. The
    /// lapsed owners met go to `dead` (see `conflicts`). A crowd's readers are looked at only
    /// when a request is for `WRITE` and the crowd's bound says one may be live, each counted in
    /// `budget`; when it runs out the answer is `None` (unsure).
    pub(super) fn blocked_here(
        &self,
        node: NodeId,
        mode: Mode,
        me: Option<OwnerId>,
        now: u64,
        dead: &mut Vec<OwnerId>,
        budget: &mut usize,
    ) -> Option<bool> {
        let Some(crowd) = self.crowd(node) else {
            return Some(
                self.holders(node).any(|held| {
                    held.mode().conflicts_with(mode) && self.blocks(held, me, now, dead)
                }),
            );
        };
        if crowd
            .writers
            .iter()
            .any(|held| self.blocks(held, me, now, dead))
        {
            return Some(true);
        }
        if mode == Mode::Read {
            return Some(false);
        }
        if crowd.latest > now {
            for held in crowd.readers.iter() {
                if *budget == 0 {
                    return None;
                }
                *budget -= 1;
                if self.blocks(held, me, now, dead) {
                    return Some(true);
                }
            }
            return Some(false);
        }
        Some(crowd.bigs.iter().any(|&lock| {
            lock.mode() == Mode::Read && Some(lock.id()) != me && self.is_live(lock.id(), now)
        }))
    }

    /// Calls `found` with each live lock on `node`'s path that conflicts with `mode` and whose
    /// owner `excluded` does not exclude, skipping a crowd's readers when none may be live.
    pub(super) fn live_conflicting_here(
        &self,
        node: NodeId,
        mode: Mode,
        now: u64,
        excluded: &dyn Fn(OwnerId) -> bool,
        found: &mut dyn FnMut(&Held),
    ) {
        let wanted = |held: &Held| {
            held.mode().conflicts_with(mode)
                && !excluded(held.owner())
                && self.is_live(held.owner(), now)
        };
        let Some(crowd) = self.crowd(node) else {
            self.holders(node).filter(|h| wanted(h)).for_each(found);
            return;
        };
        crowd
            .writers
            .iter()
            .filter(|h| wanted(h))
            .for_each(&mut *found);
        if mode == Mode::Read {
            return;
        }
        if crowd.latest > now {
            crowd.readers.iter().filter(|h| wanted(h)).for_each(found);
        } else {
            for &lock in crowd.bigs.iter().filter(|lock| lock.mode() == Mode::Read) {
                if let Some(held) = crowd.find(lock).filter(|h| wanted(h)) {
                    found(held);
                }
            }
        }
    }

    /// Whether a lock of another owner than `owner` on `node`'s path conflicts with `mode`,
    /// live or not: a step or two, as an owner holds at most one lock of each mode there.
    pub(super) fn conflicting_here(&self, node: NodeId, mode: Mode, owner: OwnerId) -> bool {
        let other = |held: &Held| held.owner() != owner;
        let Some(crowd) = self.crowd(node) else {
            return self
                .holders(node)
                .any(|held| held.mode().conflicts_with(mode) && other(held));
        };
        crowd.writers.iter().any(other) || (mode == Mode::Write && crowd.readers.iter().any(other))
    }

    /// Whether a lock on `node`'s path may be live at `now`: for the walks that list live locks.
    pub(super) fn may_be_live_here(&self, node: NodeId, now: u64) -> bool {
        match self.crowd(node) {
            None => self
                .holders(node)
                .any(|held| self.is_live(held.owner(), now)),
            Some(crowd) => {
                crowd.latest > now
                    || crowd.writers.iter().any(|h| self.is_live(h.owner(), now))
                    || crowd.bigs.iter().any(|lock| self.is_live(lock.id(), now))
            }
        }
    }
}
