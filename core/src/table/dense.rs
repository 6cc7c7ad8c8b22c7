//! The table walked and built in order, for the dense RDB encoding (`persist`): its owners in the
//! order of their leases, then its locks in tree order, each as a step from the one before it.
//! The builder makes a table from the same sequence directly, without deciding any grant again.
//!
//! Owners come first, in the order the expiry index files them, so that the builder numbers them
//! in that order: the owners of one lease are neighbours in the arena, their list is linked as
//! they come, and the index is built from the leases in order, where filing a million owners one
//! by one would touch a million scattered places. The token index is built at the end, a segment
//! after the other.
//!
//! A payload lists its locks in tree order, so the path of each lock shares a prefix with the
//! previous one: the walk says how many segments to climb and which to descend, and the builder
//! keeps the current path as a stack of nodes. What it descends is new (siblings come in
//! increasing order, and a node's locks come before anything beneath it), so it never looks a
//! child up, and it makes the shape a tree built by commands has (see `Node` in `tree`): the
//! segments of one step's descent become one node, as a grant makes one node for the segments
//! the tree lacks, and a climb that ends inside such a node, to descend to a sibling there, splits
//! it at that point, as a grant beneath a virtual segment does. A node then stands for a lock or a
//! branching, never for a lockless single-child chain, and a payload of folders holding one file
//! each loads as one node a file. A node's children, intention marks and `latest` bound are gathered on the
//! stack and written once, when the builder leaves the node, rather than on every ancestor of
//! every lock. Whether a lock conflicts with one already placed is read from the stack too: each
//! level keeps, for the locks on it and above it, the first owner holding any lock and whether
//! another does, and the same for writers, which answers the question in one step. Of two
//! conflicting locks the later comes on a descendant of the other's node or on the same node, so
//! this finds every conflict.

use std::hash::BuildHasher;

use smallvec::SmallVec;

use super::ids::{NodeId, OwnerId, Tagged, MAX_ID, NONE, ROOT};
use super::owners::{Owner, OwnerKeys};
use super::rehash::{prefetch, LinearTable, Rehasher};
use super::sorted::SortedRuns;
use super::tree::{Fork, Held, Node, NodeKeys, Segment};
use super::{LockTable, Tree};
use crate::lock::{Mode, Note, PackedToken};

/// One persisted lock as a step from the one before it in tree order.
pub(crate) struct Step<'a> {
    /// Segments of the previous lock's path to leave (none for the first lock).
    pub(crate) up: usize,
    /// Segments to descend from there, as stored in trie keys (escaped, unterminated).
    pub(crate) down: &'a [&'a [u8]],
    pub(crate) mode: Mode,
    /// The owner's number in [`Tree::for_each_owner`]'s order.
    pub(crate) owner: u32,
    pub(crate) fence: u64,
    pub(crate) note: Option<&'a Note>,
}

impl Tree {
    /// How many owners [`Tree::for_each_owner`] visits: those not being freed.
    pub(crate) fn filed_owners(&self) -> usize {
        self.owners.len() - self.free_owners.len() - self.graveyard.len()
    }

    /// Visits the owners that are not being freed, in the order of their leases, each with its
    /// token and lease; the position of an owner in this order is its number in [`Step`]s, which
    /// the answer keeps for [`Tree::for_each_step`] (numbered in the same pass: a pass of its
    /// own read every owner a second time).
    pub(crate) fn for_each_owner(&self, visit: &mut dyn FnMut(&PackedToken, u64)) -> OwnerNumbers {
        let mut numbers: Vec<u32> = vec![NONE; self.owners.len()];
        let mut next = 0;
        for (&deadline, &head) in self.expiry.iter() {
            let mut id = head;
            while id != NONE {
                let owner = self.owner(id);
                visit(&owner.token, deadline);
                numbers[id as usize] = next;
                next += 1;
                id = owner.next;
            }
        }
        OwnerNumbers(numbers)
    }

    /// Visits the locks [`Tree::iter`] lists, in its order, each as a [`Step`] from the
    /// previous one, naming owners by `numbers`, which [`Tree::for_each_owner`] gave for the
    /// table as it is. It reads no clock and builds no path, token or list of the locks.
    pub(crate) fn for_each_step(&self, numbers: &OwnerNumbers, visit: &mut dyn FnMut(&Step)) {
        let numbers = &numbers.0;
        // The previous lock's path, the root first.
        let mut previous: Vec<NodeId> = vec![ROOT];
        let mut down: SmallVec<[&[u8]; 8]> = SmallVec::new();
        // Owners were numbered in the order of their leases, locks come in tree order: each
        // lock's number is a read anywhere in the list, asked for a few locks ahead.
        let soon = |owner: OwnerId| {
            if let Some(number) = numbers.get(owner as usize) {
                prefetch(number);
            }
        };
        // How many segments each node of `previous` stands for, so that a climb is counted
        // without reading the nodes it leaves again.
        let mut counts: Vec<usize> = vec![0];
        self.walk_persisted::<false>(&soon, &mut |path, _, held| {
            let shared = previous
                .iter()
                .zip(path)
                .take_while(|(a, b)| a == b)
                .count();
            // A node may stand for several segments (see `Node`); a step counts and names
            // segments, so that the encoding does not depend on how the tree stores them.
            let up = counts[shared..].iter().sum();
            counts.truncate(shared);
            down.clear();
            for &node in &path[shared..] {
                let segment: &[u8] = &self.nodes[node as usize].segment;
                // Nearly every node stands for one segment: split only those that hold a
                // terminator.
                if segment.contains(&0) {
                    let before = down.len();
                    down.extend(segment.split(|&b| b == 0));
                    counts.push(down.len() - before);
                } else {
                    down.push(segment);
                    counts.push(1);
                }
            }
            visit(&Step {
                up,
                down: &down,
                mode: held.mode(),
                owner: numbers[held.owner() as usize],
                fence: held.fence,
                note: self.notes.get(path[path.len() - 1], held.owner),
            });
            previous.clear();
            previous.extend_from_slice(path);
        });
    }
}

/// Every filed owner's number, by its slot, in [`Tree::for_each_owner`]'s order.
pub(crate) struct OwnerNumbers(Vec<u32>);

/// Up to two owners: the first, and whether another one is there too.
#[derive(Clone, Copy)]
struct Owners {
    first: OwnerId,
    more: bool,
}

impl Owners {
    const NONE: Owners = Owners {
        first: NONE,
        more: false,
    };

    fn add(&mut self, owner: OwnerId) {
        if self.first == NONE {
            self.first = owner;
        } else if self.first != owner {
            self.more = true;
        }
    }

    fn other_than(&self, owner: OwnerId) -> bool {
        self.first != NONE && (self.more || self.first != owner)
    }
}

/// One node of the builder's current path.
struct Level {
    node: NodeId,
    /// How many segments the node stands for (none for the root).
    segments: usize,
    /// The owners holding any lock on this node or above it, and those holding `WRITE`.
    any: Owners,
    writers: Owners,
    /// Locks strictly beneath this node so far, by mode, and the latest lease of a small owner
    /// among them: written to the node when the builder leaves it.
    below: [u32; 2],
    latest: u64,
    /// The locks on this node, by mode, and the latest lease of a small owner among them: added
    /// to the parent's `below` and `latest` when the builder leaves the node, so that a split
    /// (`split_level`) gives them to the node it puts between the two.
    own: [u32; 2],
    own_latest: u64,
    /// The last lock placed on this node: its mode and owner, for the order of the next.
    last: Option<(Mode, OwnerId)>,
    /// The node's children so far, in order: linked to it when the builder leaves it.
    children: Vec<NodeId>,
}

/// Why the builder refused what it was given; the caller names it for its own errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A step climbs above the root, descends to a segment that does not come after its
    /// sibling, or names a lock that does not come after the previous one on its node; or an
    /// owner's lease comes before the previous owner's.
    OutOfOrder,
    /// The lock conflicts with one of another owner on its path.
    Conflicting,
    /// One token was introduced as two owners.
    RepeatedOwner,
    /// No such owner has been introduced.
    UnknownOwner,
    /// More nodes or owners than a table can number.
    TooLarge,
}

/// A table built from its owners in the order of their leases, then its locks as the steps of
/// a walk in tree order (see the top of this file). Every method checks what it is given against
/// what came before, so a payload that is out of order or holds conflicting locks is refused;
/// the segments and tokens themselves are checked by the caller.
pub(crate) struct Builder {
    table: Tree,
    stack: Vec<Level>,
    /// Emptied children lists, kept for the next levels.
    spare: Vec<Vec<NodeId>>,
    /// The first owner of the lease being listed, and the last one, for the next owner's links.
    lease: Option<(u64, OwnerId, OwnerId)>,
    heads: Vec<(u64, OwnerId)>,
    /// Segments below the root on the current path: the sum of the stack's `segments`.
    depth: usize,
    /// The segments of one descent joined as a node stores them, kept for the next descent.
    joined: Vec<u8>,
}

impl Builder {
    pub(crate) fn new() -> Builder {
        let mut builder = Builder {
            table: Tree::loaded(),
            stack: Vec::new(),
            spare: Vec::new(),
            lease: None,
            heads: Vec::new(),
            depth: 0,
            joined: Vec::new(),
        };
        builder.push_level(ROOT, 0);
        builder
    }

    /// A new owner, with its lease, which is not before the previous owner's; its id is the
    /// number of owners introduced before it. It is filed in its lease's list at once; the
    /// index of leases and the token index are made at the end (`finish`).
    pub(crate) fn owner(&mut self, token: PackedToken, deadline: u64) -> Result<OwnerId, Refused> {
        let id = self.table.owners.len() as OwnerId;
        if id >= MAX_ID {
            return Err(Refused::TooLarge);
        }
        // A lease of 0 (only a forged payload holds one) loads as 1, as it would enter a table.
        let deadline = super::lease(deadline);
        let mut prev = NONE;
        match &mut self.lease {
            Some((lease, _, last)) if *lease == deadline => {
                prev = *last;
                *last = id;
            }
            Some((lease, _, _)) if *lease > deadline => return Err(Refused::OutOfOrder),
            _ => {
                self.close_lease();
                self.lease = Some((deadline, id, id));
            }
        }
        let table = &mut self.table;
        if prev != NONE {
            table.owner_mut(prev).next = id;
        }
        table.token_bytes += token.heap_bytes();
        table.owners.push(Some(Owner {
            token,
            deadline,
            prev,
            next: NONE,
            lock: Tagged(NONE),
        }));
        Ok(id)
    }

    /// Ends the list of owners of one lease: its first owner heads it in the expiry index.
    fn close_lease(&mut self) {
        if let Some((lease, head, _)) = self.lease.take() {
            self.heads.push((lease, head));
        }
    }

    /// Starts loading what placing a lock of `owner` reads, without waiting for it.
    pub(crate) fn prefetch_owner(&self, owner: OwnerId) {
        if let Some(slot) = self.table.owners.get(owner as usize) {
            prefetch(slot);
        }
    }

    /// How many owners were introduced.
    pub(crate) fn owners(&self) -> usize {
        self.table.owners.len()
    }

    fn push_level(&mut self, node: NodeId, segments: usize) {
        let above = self.stack.last();
        let level = Level {
            node,
            segments,
            any: above.map_or(Owners::NONE, |l| l.any),
            writers: above.map_or(Owners::NONE, |l| l.writers),
            below: [0, 0],
            latest: 0,
            own: [0, 0],
            own_latest: 0,
            last: None,
            children: self.spare.pop().unwrap_or_default(),
        };
        self.depth += segments;
        self.stack.push(level);
    }

    /// The segment at `index` (0 for the first below the root) of the current path, as stored.
    fn segment_at(&self, index: usize) -> &[u8] {
        let mut start = 0;
        for level in &self.stack {
            if index < start + level.segments {
                let stored = &*self.table.nodes[level.node as usize].segment;
                return stored
                    .split(|&b| b == 0)
                    .nth(index - start)
                    .unwrap_or_default();
            }
            start += level.segments;
        }
        &[]
    }

    /// Moves from the previous lock's node to the next one's: up `up` segments, then down to
    /// one new child standing for all of `down`. A climb must descend again, to a segment after
    /// the one it left (the locks of a node come before anything beneath it, and siblings in
    /// byte order).
    pub(crate) fn reach(&mut self, up: usize, down: &[&[u8]]) -> Result<(), Refused> {
        if up > self.depth {
            return Err(Refused::OutOfOrder);
        }
        if up > 0 {
            let sibling = self.segment_at(self.depth - up);
            if down.first().is_none_or(|&first| first <= sibling) {
                return Err(Refused::OutOfOrder);
            }
        }
        let mut remaining = up;
        while remaining > 0 {
            let Some(last) = self.stack.last() else {
                return Err(Refused::OutOfOrder);
            };
            if last.segments <= remaining {
                remaining -= last.segments;
                self.leave();
            } else {
                // The climb ends on a virtual segment of this node: the descent that follows
                // makes it a branching.
                self.split_level(last.segments - remaining)?;
                remaining = 0;
            }
        }
        if !down.is_empty() {
            self.descend(down)?;
        }
        Ok(())
    }

    /// Splits the current node, whose locks and everything beneath have all been placed, after
    /// its first `keep` segments (fewer than it stands for), as `Tree::split` splits a node: a
    /// new node takes those segments and the node's place under its parent, and the node keeps
    /// the rest, its locks and everything beneath, as the new node's first child; the builder
    /// leaves the node and stays on the new one.
    fn split_level(&mut self, keep: usize) -> Result<(), Refused> {
        let table = &mut self.table;
        let top = table.nodes.len() as NodeId;
        if top >= MAX_ID {
            return Err(Refused::TooLarge);
        }
        let Some(mut level) = self.stack.pop() else {
            return Err(Refused::OutOfOrder);
        };
        self.depth -= level.segments;
        let id = level.node;
        let whole = table.nodes[id as usize].segment.to_vec();
        let Some(at) = whole
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b == 0)
            .nth(keep - 1)
            .map(|(at, _)| at)
        else {
            return Err(Refused::OutOfOrder);
        };
        let parent = self.stack.last_mut().ok_or(Refused::OutOfOrder)?;
        // `id` is the last child the parent was given, and `top` takes its place.
        if let Some(last) = parent.children.last_mut() {
            *last = top;
        }
        table.nodes.push(Node {
            segment: Segment::new(&whole[..at]),
            parent: parent.node,
            ..Node::default()
        });
        table.live_nodes += 1;
        let node = &mut table.nodes[id as usize];
        table.segment_heap -= node.segment.heap_allocation();
        node.segment = Segment::new(&whole[at + 1..]);
        node.parent = top;
        table.segment_heap += node.segment.heap_allocation();
        table.segment_heap += table.nodes[top as usize].segment.heap_allocation();
        // The terminator between the two parts is in neither.
        table.segment_bytes -= 1;
        // The big owners' marks on `top` count what they hold on `id` and beneath it, which
        // are `id`'s marks and locks (`mark_ancestors` gave them to `id`'s ancestors then).
        let marks = table.big_marks_through(id);
        for (owner, mode, count) in marks {
            table.mark(top, owner, mode, count);
        }
        self.push_level(top, keep);
        if let Some(new) = self.stack.last_mut() {
            new.children.push(id);
        }
        level.segments -= keep;
        self.depth += level.segments;
        self.stack.push(level);
        self.leave();
        Ok(())
    }

    /// Leaves the current node: gives it its fork (marks, bound, children) when it has
    /// children beneath its children or several (a node whose only child is a leaf reads its
    /// marks from that child's locks), and adds its marks and bound to its parent's.
    fn leave(&mut self) {
        let Some(mut level) = self.stack.pop() else {
            return;
        };
        let table = &mut self.table;
        let mut fork = Fork {
            below: level.below,
            latest: level.latest,
            table: NONE,
        };
        let mut forked = true;
        match level.children[..] {
            [] => forked = false,
            [only] => {
                table.nodes[level.node as usize].child = only;
                let child = &table.nodes[only as usize];
                forked = child.child != NONE || child.fork != NONE;
            }
            _ => {
                let keys = NodeKeys {
                    nodes: &table.nodes,
                    hasher: &table.hasher,
                };
                let hashed = level
                    .children
                    .iter()
                    .map(|child| (keys.hash(child), *child))
                    .collect();
                // Siblings come in strictly increasing order, so none repeats.
                if let Ok(children) = LinearTable::build(hashed, |a, b| a == b, keys) {
                    fork.table = table.tables.len() as u32;
                    table.inner_bytes += children.heap_bytes();
                    table.tables.push(children);
                }
            }
        }
        if forked {
            table.new_fork(level.node, fork);
        }
        level.children.clear();
        self.spare.push(level.children);
        self.depth -= level.segments;
        if let Some(parent) = self.stack.last_mut() {
            parent.below[0] += level.below[0] + level.own[0];
            parent.below[1] += level.below[1] + level.own[1];
            parent.latest = parent.latest.max(level.latest).max(level.own_latest);
        }
    }

    /// Descends to a new child of the current node standing for `segments` (one or more), as
    /// a grant creates the segments the tree lacks: the node has no child with the first one,
    /// its children so far all coming before it.
    fn descend(&mut self, segments: &[&[u8]]) -> Result<(), Refused> {
        let table = &mut self.table;
        let id = table.nodes.len() as NodeId;
        if id >= MAX_ID {
            return Err(Refused::TooLarge);
        }
        let parent = self.stack.last_mut().ok_or(Refused::OutOfOrder)?;
        parent.children.push(id);
        self.joined.clear();
        for (i, segment) in segments.iter().enumerate() {
            if i > 0 {
                self.joined.push(0);
            }
            self.joined.extend_from_slice(segment);
        }
        table.nodes.push(Node {
            segment: Segment::new(&self.joined),
            parent: parent.node,
            ..Node::default()
        });
        table.live_nodes += 1;
        table.segment_bytes += self.joined.len();
        table.segment_heap += table.nodes[id as usize].segment.heap_allocation();
        self.push_level(id, segments.len());
        Ok(())
    }

    /// Places `owner`'s lock of `mode` on the current node, with its fence and note.
    pub(crate) fn hold(
        &mut self,
        owner: OwnerId,
        mode: Mode,
        fence: u64,
        note: Option<&Note>,
    ) -> Result<(), Refused> {
        let table = &mut self.table;
        let Some(deadline) = table
            .owners
            .get(owner as usize)
            .and_then(Option::as_ref)
            .map(|o| o.deadline)
        else {
            return Err(Refused::UnknownOwner);
        };
        let depth = self.stack.len() - 1;
        let level = &mut self.stack[depth];
        if let Some((last_mode, last_owner)) = level.last {
            let order = last_mode.cmp(&mode).then_with(|| {
                table
                    .owner(last_owner)
                    .token
                    .cmp_text(&table.owner(owner).token)
            });
            if order.is_ge() {
                return Err(Refused::OutOfOrder);
            }
        }
        let conflicting = match mode {
            Mode::Write => level.any.other_than(owner),
            Mode::Read => level.writers.other_than(owner),
        };
        if conflicting {
            return Err(Refused::Conflicting);
        }
        level.any.add(owner);
        if mode == Mode::Write {
            level.writers.add(owner);
        }
        level.last = Some((mode, owner));
        let node = level.node;
        let big = table.is_big(owner);
        level.own[mode.index()] += 1;
        if !big {
            level.own_latest = level.own_latest.max(deadline);
        }
        if big {
            table.mark_ancestors(node, owner, mode, 1);
        }
        let lock = Tagged::new(owner, mode);
        // As a grant does (`Tree::grant_to`): an owner's first lock gives the owner its note,
        // which its locks then carry without an entry each; a lock with another note, or none
        // under an owner's note, keeps an entry of its own.
        if let Some(note) = note {
            if table.lock_count(owner) == 0 && !table.notes.has_owner_note(owner) {
                table.notes.set_owner(owner, note);
            }
        }
        table.add_holder(node, Held { fence, owner: lock });
        table.add_owner_lock(owner, Tagged::new(node, mode));
        if !table.notes.is_owners(owner, note) {
            table.notes.set(node, lock, note);
        }
        Ok(())
    }

    /// The table, its counter raised to `next_fence`, once its owners are indexed by token
    /// (refused if one token was introduced twice) and the expiry index holds their leases. The
    /// token index is built in one go, a segment after the other, rather than an owner at a
    /// time: inserting a million owners one by one costs a million scattered probes of it. An
    /// owner that holds no lock (all its locks were left out of the payload, see `cuts`) is
    /// forgotten here.
    pub(crate) fn finish(mut self, next_fence: u64) -> Result<LockTable, Refused> {
        while !self.stack.is_empty() {
            self.leave();
        }
        self.close_lease();
        let table = &mut self.table;
        table.expiry = SortedRuns::from_sorted(std::mem::take(&mut self.heads));
        let mut idle = Vec::new();
        let mut hashed = Vec::with_capacity(table.owners.len());
        for (id, owner) in table.owners.iter().enumerate() {
            if let Some(owner) = owner {
                if owner.lock.0 == NONE {
                    idle.push(id as OwnerId);
                } else {
                    hashed.push((table.hasher.hash_one(owner.token.stored()), id as OwnerId));
                }
            }
        }
        let keys = OwnerKeys {
            owners: &table.owners,
            hasher: &table.hasher,
        };
        table.owner_index = LinearTable::build(
            hashed,
            |&a, &b| {
                let token = |id: OwnerId| keys.owners[id as usize].as_ref().map(|o| &o.token);
                token(a) == token(b)
            },
            keys,
        )
        .map_err(|_| Refused::RepeatedOwner)?;
        for id in idle {
            table.unfile(id);
            table.free_owner_slot(id);
        }
        table.raise_next_fence(next_fence);
        Ok(LockTable::from_tree(Box::new(self.table)))
    }
}
