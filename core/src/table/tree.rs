//! The node arena: one node per path segment, or per chain of segments with nothing held or
//! branching between them, its children, the locks held on its exact path, and the intention
//! marks counting the locks beneath it.

use std::hash::BuildHasher;

use hashbrown::DefaultHashBuilder;

use super::chunks::Chunks;
use super::ids::{NodeId, OwnerId, Tagged, MAX_ID, NONE, ROOT, SPILLED};
use super::rehash::{prefetch, LinearTable, Rehasher};
use super::Tree;
use crate::bytes::ShortBytes;
use crate::lock::{LockInfo, Mode};
use crate::path::Path;

/// One lock, as stored on its path's node: its fence and its owner. The deadline is the
/// owner's (one lease per owner, see `owners`), so renewing a token's locks touches none of
/// them. Packed to 12 bytes, so that a node holding one lock fits in a cache line.
#[derive(Clone, Copy, Debug)]
#[repr(C, packed(4))]
pub(super) struct Held {
    pub(super) fence: u64,
    pub(super) owner: Tagged,
}

impl Held {
    pub(super) const EMPTY: Held = Held {
        fence: 0,
        owner: Tagged(NONE),
    };

    pub(super) fn owner(&self) -> OwnerId {
        self.owner.id()
    }

    pub(super) fn mode(&self) -> Mode {
        self.owner.mode()
    }
}

/// A segment's bytes, kept inside the node when short (up to 15 bytes), as most file and folder
/// names are.
pub(super) type Segment = ShortBytes;

/// One path segment of the tree, or a chain of them. A million locks make a million nodes,
/// nearly all of them leaves (the files), so the node keeps what every node needs in 40 bytes:
/// its segments, its one lock inline (the common case; the rare ones spill into the table's side
/// structures), its parent and its only child. What only a node with children needs, its
/// intention marks, its bound and its children's table, is a [`Fork`] beside it; a node whose
/// only child is a leaf has none, as its marks and bound are that leaf's own locks (see
/// `below`).
///
/// A node may stand for several segments, as a radix tree compresses its paths: a path created
/// beneath a node gets one node for all the segments the tree lacks, and a folder holding one
/// locked file costs one node, not two. The segments above the last one of such a node are
/// virtual: nothing is held on them and nothing else lies beneath them, so what lies beneath one
/// is the node's own locks and everything beneath the node. A lock or a second child on a
/// virtual segment splits the node there first (`split`), so locks, crowds, notes, cuts and
/// marks are only ever on nodes, and a node keeps its id for as long as it holds a lock.
#[derive(Clone, Debug)]
pub(super) struct Node {
    /// The segments as they appear in trie keys (escaped, each but the last followed by its
    /// terminator): one or more, never empty ones; empty for the root and for free slots. The
    /// node is filed in its parent's children under the first one (`first_segment`).
    pub(super) segment: Segment,
    /// The lock on this exact path when there is one. Its owner is `NONE` when there is none,
    /// and `SPILLED` when several share the path; they are then in `Tree::crowded` (see
    /// `crowd`).
    pub(super) lock: Held,
    pub(super) parent: NodeId,
    /// The only child, when there is exactly one and no table: chains of folders with one
    /// locked file cost no allocation.
    pub(super) child: NodeId,
    /// The index in `Tree::forks` of the node's fork, `NONE` for a node without children or
    /// whose only child is a leaf.
    pub(super) fork: u32,
}

const _: () = assert!(std::mem::size_of::<Node>() == 40);

/// What a node with children keeps beside it, in `Tree::forks`. A node has a fork when it has
/// children, which is when locks lie beneath it, unless its only child is a leaf: a thousand
/// folders of one locked file each would otherwise keep a thousand forks (20 bytes a lock), for
/// marks that are the file's own locks. A fork is given to such a node when its child gets a
/// child or a sibling comes, and taken back with its last child.
#[derive(Clone, Copy, Debug)]
#[repr(C, packed(4))]
pub(super) struct Fork {
    /// The intention marks: locks of each mode held strictly beneath, by `Mode::index`.
    pub(super) below: [u32; 2],
    /// No lock of a small owner strictly beneath the node has a deadline after this one: an
    /// upper bound, raised when such a lock comes or its owner's lease moves later, and never
    /// lowered when one goes. When it is not after `now`, everything small owners hold beneath
    /// has lapsed, so a request is decided without looking at a mountain of lapsed locks (see
    /// `conflicts`). Big owners' locks are not in it: their leases move in one step, and their
    /// liveness is read from their marks (`big`).
    pub(super) latest: u64,
    /// The index in `Tree::tables` of the children's table, or `NONE`.
    pub(super) table: u32,
}

const _: () = assert!(std::mem::size_of::<Fork>() == 20);

impl Default for Node {
    fn default() -> Self {
        Node {
            segment: Segment::default(),
            lock: Held::EMPTY,
            parent: ROOT,
            child: NONE,
            fork: NONE,
        }
    }
}

impl Node {
    /// Neither a lock here nor anything beneath.
    pub(super) fn is_unused(&self) -> bool {
        self.lock.owner.0 == NONE && self.fork == NONE && self.child == NONE
    }
}

/// How `walk_down` ended.
pub(super) enum Walk {
    /// `visit` answered true.
    Stopped,
    /// The path leaves the tree: nothing is at or beneath it.
    Left,
    /// The path's own node.
    Reached(NodeId),
    /// The path ends on a virtual segment of this node (see [`Node`]): nothing is held on the
    /// path itself, and what lies beneath it is the node's own locks and what lies beneath the
    /// node.
    Within(NodeId),
}

/// A node's first segment, under which its parent files it.
pub(super) fn first_segment(stored: &[u8]) -> &[u8] {
    match stored.iter().position(|&b| b == 0) {
        Some(end) => &stored[..end],
        None => stored,
    }
}

/// How a node's segments meet the rest of a trie key, whose first segment is the node's first.
enum Meet {
    /// The key goes through every segment of the node; the rest of the key after them starts
    /// at this offset.
    Through(usize),
    /// The key's common segments with the node end at the terminator at this offset of the
    /// node's segments: the key ends there, or goes elsewhere.
    Inside(usize),
}

/// How the node's `stored` segments meet `rest`, a trie key (each segment terminated) whose
/// first segment is the node's first.
fn meet(stored: &[u8], rest: &[u8]) -> Meet {
    if rest.len() > stored.len() && rest[stored.len()] == 0 && rest.starts_with(stored) {
        return Meet::Through(stored.len() + 1);
    }
    // The key stops or turns inside the node, so the node has several segments: the common
    // ones end at the last terminator of the bytes both share, which include the first segment
    // and its terminator.
    let common = stored.iter().zip(rest).take_while(|(a, b)| a == b).count();
    let end = stored[..common].iter().rposition(|&b| b == 0);
    Meet::Inside(end.unwrap_or(first_segment(stored).len()))
}

/// The children's tables' view of their entries: a child is filed under its first segment's hash,
/// and as the entries are ids, re-hashing one reads its node.
#[derive(Clone, Copy)]
pub(super) struct NodeKeys<'a> {
    pub(super) nodes: &'a Chunks<Node>,
    pub(super) hasher: &'a DefaultHashBuilder,
}

impl Rehasher<NodeId> for NodeKeys<'_> {
    fn hash(&self, &child: &NodeId) -> u64 {
        self.hasher
            .hash_one(first_segment(&self.nodes[child as usize].segment))
    }

    fn prefetch(&self, &child: &NodeId) {
        prefetch(&self.nodes[child as usize]);
    }
}

impl Tree {
    /// The intention marks of `node`: locks of each mode strictly beneath it. A node without a
    /// fork has none beneath it but its only child's own locks, that child being a leaf.
    pub(super) fn below(&self, node: NodeId) -> [u32; 2] {
        let node = &self.nodes[node as usize];
        match node.fork {
            NONE if node.child == NONE => [0, 0],
            NONE => self.own_counts(node.child),
            fork => self.forks[fork as usize].below,
        }
    }

    /// The bound of the leases of small owners' locks strictly beneath `node`; for a node
    /// without a fork, that of its only child's own locks (the child is a leaf).
    pub(super) fn latest(&self, node: NodeId) -> u64 {
        let node = &self.nodes[node as usize];
        match node.fork {
            NONE if node.child == NONE => 0,
            NONE => self.own_latest(node.child),
            fork => self.forks[fork as usize].latest,
        }
    }

    /// The locks of each mode on `node`'s exact path.
    fn own_counts(&self, node: NodeId) -> [u32; 2] {
        let mut counts = [0, 0];
        match self.nodes[node as usize].lock.owner {
            Tagged(NONE) => {}
            Tagged(SPILLED) => {
                if let Some(crowd) = self.crowd(node) {
                    counts[Mode::Read.index()] = crowd.readers.len() as u32;
                    counts[Mode::Write.index()] = crowd.writers.len() as u32;
                }
            }
            one => counts[one.mode().index()] = 1,
        }
        counts
    }

    /// A bound of the leases of the small owners holding `node`'s exact path: the owner's own
    /// lease for a lock kept in the node, the crowd's bound for several.
    fn own_latest(&self, node: NodeId) -> u64 {
        match self.nodes[node as usize].lock.owner {
            Tagged(NONE) => 0,
            Tagged(SPILLED) => self.crowd(node).map_or(0, |crowd| crowd.latest),
            one if self.is_big(one.id()) => 0,
            one => self.owner(one.id()).deadline,
        }
    }

    /// Gives a node without a fork one, with the marks and bound it had without: it is getting
    /// a second child, or its only child its first.
    fn give_fork(&mut self, node: NodeId) {
        let fork = Fork {
            below: self.below(node),
            latest: self.latest(node),
            table: NONE,
        };
        self.new_fork(node, fork);
    }

    /// The index of `node`'s children's table, or `NONE`.
    pub(super) fn table_of(&self, node: NodeId) -> u32 {
        match self.nodes[node as usize].fork {
            NONE => NONE,
            fork => self.forks[fork as usize].table,
        }
    }

    pub(super) fn children(&self, node: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        let child = self.nodes[node as usize].child;
        let only = (child != NONE).then_some(child);
        let table = self.table_of(node);
        let table = (table != NONE).then(|| self.tables[table as usize].iter().copied());
        only.into_iter().chain(table.into_iter().flatten())
    }

    /// The child of `node` whose first segment is `segment`.
    pub(super) fn child(&self, node: NodeId, segment: &[u8]) -> Option<NodeId> {
        let only = self.nodes[node as usize].child;
        if only != NONE {
            return (first_segment(&self.nodes[only as usize].segment) == segment).then_some(only);
        }
        let table = self.table_of(node);
        if table == NONE {
            return None;
        }
        let hash = self.hasher.hash_one(segment);
        self.tables[table as usize]
            .find(hash, |&c| {
                first_segment(&self.nodes[c as usize].segment) == segment
            })
            .copied()
    }

    /// Visits the root, then each node down `path` while the tree has it, with the segments
    /// that led there (empty for the root); stops as soon as `visit` answers true. The one walk
    /// of the conflict checks: O(depth), whatever the project holds.
    pub(super) fn walk_down(
        &self,
        path: &Path,
        mut visit: impl FnMut(NodeId, &[u8]) -> bool,
    ) -> Walk {
        if visit(ROOT, &[]) {
            return Walk::Stopped;
        }
        let mut node = ROOT;
        let mut rest = path.key();
        while !rest.is_empty() {
            let Some(next) = self.child(node, first_segment(rest)) else {
                return Walk::Left;
            };
            let stored = &*self.nodes[next as usize].segment;
            match meet(stored, rest) {
                Meet::Through(after) => rest = &rest[after..],
                // The key ends on one of the node's virtual segments, or leaves the tree there.
                Meet::Inside(end) if rest.len() == end + 1 => return Walk::Within(next),
                Meet::Inside(_) => return Walk::Left,
            }
            node = next;
            if visit(node, stored) {
                return Walk::Stopped;
            }
        }
        Walk::Reached(node)
    }

    /// Whether `node` is `top` or lies beneath it: a walk up, O(depth).
    pub(super) fn is_at_or_beneath(&self, node: NodeId, top: NodeId) -> bool {
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

    /// The node of `path`, when it exists.
    pub(super) fn locate(&self, path: &Path) -> Option<NodeId> {
        match self.walk_down(path, |_, _| false) {
            Walk::Reached(node) => Some(node),
            _ => None,
        }
    }

    /// The topmost node at or beneath `path`, when something is there, and whether it is the
    /// path's own: when not, the path ends on one of its virtual segments (see [`Node`]), and
    /// what lies on and beneath the path is what lies on and beneath that node.
    pub(super) fn locate_under(&self, path: &Path) -> Option<(NodeId, bool)> {
        match self.walk_down(path, |_, _| false) {
            Walk::Reached(node) => Some((node, true)),
            Walk::Within(node) => Some((node, false)),
            _ => None,
        }
    }

    /// The node of `path`, with the nodes the tree lacks created: one node for all the missing
    /// segments, after splitting a node whose virtual segments the path ends on or leaves.
    fn node_or_insert(&mut self, path: &Path) -> NodeId {
        let mut node = ROOT;
        let mut rest = path.key();
        while !rest.is_empty() {
            let Some(next) = self.child(node, first_segment(rest)) else {
                // The key ends with its terminator, which the node's segments leave out.
                let created = self.new_node(node, &rest[..rest.len() - 1]);
                self.add_child(node, created);
                return created;
            };
            match meet(&self.nodes[next as usize].segment, rest) {
                Meet::Through(after) => {
                    node = next;
                    rest = &rest[after..];
                }
                Meet::Inside(end) => {
                    node = self.split(next, end);
                    rest = &rest[end + 1..];
                }
            }
        }
        node
    }

    /// Splits `id` at the terminator at offset `at` of its segments: a new node takes the
    /// segments before it and `id`'s place under its parent, and `id` keeps the rest, its locks
    /// and everything beneath, as the new node's only child. The new node gets the marks and
    /// bound of what is beneath it (a fork, unless `id` is a leaf) and the big owners' marks;
    /// `id`'s parent gets a fork if it had none, its only child being no leaf any more.
    fn split(&mut self, id: NodeId, at: usize) -> NodeId {
        let whole = self.nodes[id as usize].segment.to_vec();
        let parent = self.nodes[id as usize].parent;
        let leaf = self.nodes[id as usize].child == NONE && self.nodes[id as usize].fork == NONE;
        let own = self.own_counts(id);
        let beneath = self.below(id);
        let fork = Fork {
            below: [own[0] + beneath[0], own[1] + beneath[1]],
            latest: self.own_latest(id).max(self.latest(id)),
            table: NONE,
        };
        let marks = self.big_marks_through(id);
        if self.nodes[parent as usize].fork == NONE {
            // Its only child is `id`, a leaf until now: the marks it read from it become its
            // fork's.
            self.give_fork(parent);
        }
        let top = self.new_node(parent, &whole[..at]);
        // The new node has `id`'s first segment, so it takes its place under the same hash.
        if self.nodes[parent as usize].child == id {
            self.nodes[parent as usize].child = top;
        } else {
            let slot = self.table_of(parent) as usize;
            let keys = NodeKeys {
                nodes: &self.nodes,
                hasher: &self.hasher,
            };
            let hash = keys.hash(&id);
            let table = &mut self.tables[slot];
            let before = table.heap_bytes();
            table.remove(hash, |&c| c == id, keys);
            table.insert_unique(hash, top, keys);
            self.inner_bytes = self.inner_bytes + table.heap_bytes() - before;
        }
        let node = &mut self.nodes[id as usize];
        self.segment_heap -= node.segment.heap_allocation();
        node.segment = Segment::new(&whole[at + 1..]);
        node.parent = top;
        self.segment_heap += node.segment.heap_allocation();
        // `id` gave the new node its first part, and the terminator between the two is in
        // neither.
        self.segment_bytes -= at + 1;
        self.nodes[top as usize].child = id;
        if !leaf {
            self.new_fork(top, fork);
        }
        for (owner, mode, count) in marks {
            self.mark(top, owner, mode, count);
        }
        top
    }

    /// A new node under `parent` with `segments`, not yet among its children.
    fn new_node(&mut self, parent: NodeId, segments: &[u8]) -> NodeId {
        let fresh = Node {
            segment: Segment::new(segments),
            parent,
            ..Node::default()
        };
        let id = match self.free_nodes.pop_lowest() {
            Some(id) => {
                self.nodes[id as usize] = fresh;
                id
            }
            None => {
                let id = self.nodes.len() as NodeId;
                assert!(id < MAX_ID, "too many paths in one project");
                self.nodes.push(fresh);
                id
            }
        };
        self.live_nodes += 1;
        self.segment_bytes += segments.len();
        self.segment_heap += self.nodes[id as usize].segment.heap_allocation();
        id
    }

    /// Gives `node` a fork, when it has none: it is getting its first child.
    pub(super) fn new_fork(&mut self, node: NodeId, fork: Fork) -> u32 {
        let slot = match self.free_forks.pop_lowest() {
            Some(slot) => {
                self.forks[slot as usize] = fork;
                slot
            }
            None => {
                self.forks.push(fork);
                (self.forks.len() - 1) as u32
            }
        };
        self.nodes[node as usize].fork = slot;
        slot
    }

    /// Adds `child`, a new node without locks or children, to `parent`'s children.
    pub(super) fn add_child(&mut self, parent: NodeId, child: NodeId) {
        if self.nodes[parent as usize].fork == NONE {
            if self.nodes[parent as usize].child == NONE {
                // The first child, a leaf: no fork. But `parent` is no leaf any more, so its
                // own parent, if it has no fork, needs one now, with the marks it read from
                // `parent`'s locks before the child came.
                let grand = self.nodes[parent as usize].parent;
                if parent != ROOT && self.nodes[grand as usize].fork == NONE {
                    self.give_fork(grand);
                }
                self.nodes[parent as usize].child = child;
                return;
            }
            self.give_fork(parent);
        }
        let fork = self.nodes[parent as usize].fork as usize;
        let p = &mut self.nodes[parent as usize];
        if p.child == NONE && self.forks[fork].table == NONE {
            p.child = child;
            return;
        }
        let mut moved = None;
        if self.forks[fork].table == NONE {
            self.forks[fork].table = match self.free_tables.pop_lowest() {
                Some(slot) => slot,
                None => {
                    self.tables.push(LinearTable::default());
                    (self.tables.len() - 1) as u32
                }
            };
            moved = Some(std::mem::replace(&mut p.child, NONE));
        }
        let slot = self.forks[fork].table as usize;
        let keys = NodeKeys {
            nodes: &self.nodes,
            hasher: &self.hasher,
        };
        let before = self.tables[slot].heap_bytes();
        for c in moved.into_iter().chain([child]) {
            self.tables[slot].insert_unique(keys.hash(&c), c, keys);
        }
        self.inner_bytes = self.inner_bytes + self.tables[slot].heap_bytes() - before;
    }

    /// Takes `child` off `parent`'s children; a parent left without any gives its fork back
    /// (its marks are zero by then: nothing lies beneath it).
    pub(super) fn remove_child(&mut self, parent: NodeId, child: NodeId) {
        let fork = self.nodes[parent as usize].fork;
        if fork == NONE {
            if self.nodes[parent as usize].child == child {
                self.nodes[parent as usize].child = NONE;
            }
            return;
        }
        if self.nodes[parent as usize].child == child {
            self.nodes[parent as usize].child = NONE;
        } else {
            let slot = self.forks[fork as usize].table;
            if slot == NONE {
                return;
            }
            let keys = NodeKeys {
                nodes: &self.nodes,
                hasher: &self.hasher,
            };
            let table = &mut self.tables[slot as usize];
            let before = table.heap_bytes();
            table.remove(keys.hash(&child), |&c| c == child, keys);
            self.inner_bytes = self.inner_bytes + table.heap_bytes() - before;
            // A table lives until its node has no child left; converting back at one child
            // would allocate and free a table each time a second child comes and goes.
            if table.is_empty() {
                self.forks[fork as usize].table = NONE;
                self.free_tables.insert(slot);
            }
        }
        if self.nodes[parent as usize].child == NONE && self.forks[fork as usize].table == NONE {
            self.nodes[parent as usize].fork = NONE;
            self.free_forks.insert(fork);
        }
    }

    /// Adds one lock, or refreshes its fence when the owner already holds that mode on that
    /// path. Returns whether the lock is new. The marks of every ancestor count it; a small
    /// owner's lease raises their `latest`, a big owner's lock goes into its marks instead.
    pub(super) fn insert(&mut self, path: &Path, owner: OwnerId, mode: Mode, fence: u64) -> bool {
        let held = Held {
            fence,
            owner: Tagged::new(owner, mode),
        };
        let node = self.node_or_insert(path);
        if let Some(existing) = self.holder_mut(node, held.owner) {
            // The path existed, so nothing was created on the way down.
            existing.fence = fence;
            return false;
        }
        self.cut_for(node, owner, mode, fence);
        let big = self.is_big(owner);
        let deadline = self.owner(owner).deadline;
        let mut up = node;
        while up != ROOT {
            up = self.nodes[up as usize].parent;
            // An ancestor without a fork reads its marks from the lock itself.
            let fork = self.nodes[up as usize].fork;
            if fork == NONE {
                continue;
            }
            let ancestor = &mut self.forks[fork as usize];
            ancestor.below[mode.index()] += 1;
            if !big && ancestor.latest < deadline {
                ancestor.latest = deadline;
            }
        }
        if big {
            self.mark_ancestors(node, owner, mode, 1);
        }
        self.add_holder(node, held);
        self.add_owner_lock(owner, Tagged::new(node, mode));
        true
    }

    /// Raises the bound of a small owner's lock on `node` to `deadline`: the crowd's on `node`,
    /// if one holds it, and the `latest` of every strict ancestor, stopping at the first that is
    /// already there (every ancestor above it is too).
    pub(super) fn raise_latest(&mut self, node: NodeId, deadline: u64) {
        self.raise_crowd(node, deadline);
        let mut up = node;
        while up != ROOT {
            up = self.nodes[up as usize].parent;
            // An ancestor without a fork reads the owner's lease itself.
            let fork = self.nodes[up as usize].fork;
            if fork == NONE {
                continue;
            }
            let ancestor = &mut self.forks[fork as usize];
            if ancestor.latest >= deadline {
                return;
            }
            ancestor.latest = deadline;
        }
    }

    /// Removes one lock and every node that only it needed, and takes it off its owner's list.
    /// The caller forgets an owner left with nothing (`forget_if_empty`).
    pub(super) fn remove(&mut self, node: NodeId, owner: OwnerId, mode: Mode) -> Option<LockInfo> {
        self.take_lock(node, owner, mode, true).flatten()
    }

    /// Removes a lock like `remove`, without describing it: whether there was one.
    pub(super) fn remove_silently(&mut self, node: NodeId, owner: OwnerId, mode: Mode) -> bool {
        self.take_lock(node, owner, mode, false).is_some()
    }

    /// Removes `owner`'s lock of `mode` at `node`, and the nodes it alone kept. `None` when
    /// there was no such lock; otherwise its description when `describe` is set. Building one
    /// rebuilds the path and the token, which a release with nobody waiting never reads.
    fn take_lock(
        &mut self,
        node: NodeId,
        owner: OwnerId,
        mode: Mode,
        describe: bool,
    ) -> Option<Option<LockInfo>> {
        let wanted = Tagged::new(owner, mode);
        let held = self.take_holder(node, wanted)?;
        let info = describe.then(|| self.info(node, &self.key_of(node), &held));
        // The note goes with its lock, so that a node or owner id given again finds none.
        if !self.notes.is_empty() {
            self.notes.remove(node, wanted);
        }
        if self.is_big(owner) {
            self.mark_ancestors(node, owner, mode, -1);
        }
        let mut current = node;
        while current != ROOT {
            let parent = self.nodes[current as usize].parent;
            let fork = self.nodes[parent as usize].fork;
            if fork != NONE {
                self.forks[fork as usize].below[mode.index()] -= 1;
            }
            if self.nodes[current as usize].is_unused() {
                self.unlink_node(current);
            }
            current = parent;
        }
        // The root is never unlinked; its cuts go once it keeps nothing they could cut, so an
        // emptied table costs what a new one does.
        if self.nodes[ROOT as usize].is_unused() {
            self.drop_cuts(ROOT);
        }
        self.remove_owner_lock(owner, Tagged::new(node, mode));
        Some(info)
    }

    pub(super) fn unlink_node(&mut self, id: NodeId) {
        self.remove_child(self.nodes[id as usize].parent, id);
        let node = std::mem::take(&mut self.nodes[id as usize]);
        self.drop_cuts(id);
        self.live_nodes -= 1;
        self.segment_bytes -= node.segment.len();
        self.segment_heap -= node.segment.heap_allocation();
        self.free_nodes.insert(id);
    }

    /// The trie key of a node, built by walking up to the root twice: once to size it, so that
    /// it takes one allocation, and once to fill it from the end.
    pub(super) fn key_of(&self, node: NodeId) -> Vec<u8> {
        let ancestry = || {
            std::iter::successors(Some(node), |&id| Some(self.nodes[id as usize].parent))
                .take_while(|&id| id != ROOT)
                .map(|id| &*self.nodes[id as usize].segment)
        };
        let mut key = vec![0; ancestry().map(|segment| segment.len() + 1).sum()];
        let mut end = key.len();
        for segment in ancestry() {
            // The terminator at `end - 1` is already zero.
            let start = end - 1 - segment.len();
            key[start..end - 1].copy_from_slice(segment);
            end = start;
        }
        key
    }

    /// The description of the lock `held` on `node`, whose trie key is `key`.
    pub(super) fn info(&self, node: NodeId, key: &[u8], held: &Held) -> LockInfo {
        let owner = self.owner(held.owner());
        LockInfo {
            path: Path::from_trusted_key(key),
            mode: held.mode(),
            token: owner.token.to_token(),
            deadline: owner.deadline,
            fence: held.fence,
            note: self.notes.get(node, held.owner).cloned(),
        }
    }

    /// Visits every lock at and beneath `node` in tree order: a node's locks, then its children
    /// in byte order of their segments. `key` is the node's trie key on entry and on return.
    pub(super) fn walk(&self, node: NodeId, key: &mut Vec<u8>, visit: &mut Visit<'_>) {
        self.walk_where(node, key, &|_, _| true, &|_, _| true, visit);
    }

    /// `walk`, visiting a node's locks only when `here` says one of them may matter, and
    /// descending beneath it only when `descend` says something there does.
    ///
    /// The walk keeps its own stack rather than recursing: a path may be thousands of segments
    /// deep, and neither the server's stack nor a test thread's may bound what it can list.
    /// Each entry is a node still to visit and the length of its parent's key, a prefix of the
    /// key at the time the entry is taken, since everything visited in between lies beneath
    /// that parent.
    pub(super) fn walk_where(
        &self,
        node: NodeId,
        key: &mut Vec<u8>,
        descend: &dyn Fn(&Self, NodeId) -> bool,
        here: &dyn Fn(&Self, NodeId) -> bool,
        visit: &mut Visit<'_>,
    ) {
        let start = key.len();
        if here(self, node) {
            for held in self.canonical_holders(node) {
                visit(self, node, key, &held);
            }
        }
        let mut stack: Vec<(NodeId, usize)> = Vec::new();
        // Children go on the stack last first, so they come off it in byte order.
        if descend(self, node) {
            stack.extend(
                self.sorted_children(node)
                    .into_iter()
                    .rev()
                    .map(|c| (c, start)),
            );
        }
        while let Some((child, parent_length)) = stack.pop() {
            key.truncate(parent_length);
            push_segment(key, &self.nodes[child as usize].segment);
            if here(self, child) {
                for held in self.canonical_holders(child) {
                    visit(self, child, key, &held);
                }
            }
            if descend(self, child) {
                let length = key.len();
                stack.extend(
                    self.sorted_children(child)
                        .into_iter()
                        .rev()
                        .map(|c| (c, length)),
                );
            }
        }
        key.truncate(start);
    }

    /// What the big owners' marks on a new node above `id` must count, as `(owner, mode,
    /// count)`: `id`'s own marks and its locks of big owners. A split gives them to the node it
    /// makes, in the tree and in the load builder alike.
    pub(super) fn big_marks_through(&self, id: NodeId) -> Vec<(OwnerId, Mode, i32)> {
        let mut marks: Vec<(OwnerId, Mode, i32)> = Vec::new();
        for mark in self.big_marks_at(id) {
            for mode in Mode::ALL {
                let count = mark.below[mode.index()];
                if count > 0 {
                    marks.push((mark.owner, mode, count as i32));
                }
            }
        }
        for held in self.holders(id) {
            if self.is_big(held.owner()) {
                marks.push((held.owner(), held.mode(), 1));
            }
        }
        marks
    }

    /// The node's children in the byte order of their segments. Each child's segment is read
    /// once, for a key of its first eight bytes, and the keys are sorted: comparing segments
    /// in place read each child's node at every comparison, a cache miss each in a big folder
    /// (a fifth of a `DUMP`'s time at a thousand children a folder). Children whose keys are
    /// equal (a shared first eight bytes, or a segment that is a shorter one's padding) are
    /// then ordered by their whole segments.
    pub(super) fn sorted_children(&self, node: NodeId) -> Vec<NodeId> {
        let mut sorted = SortedChildren::default();
        self.sort_children(node, &mut sorted);
        sorted.keyed.into_iter().map(|(_, child)| child).collect()
    }

    /// [`Tree::sorted_children`] into buffers the caller keeps from one node to the next: a walk
    /// of a million nodes allocated three lists for each.
    pub(super) fn sort_children(&self, node: NodeId, sorted: &mut SortedChildren) {
        let SortedChildren {
            children,
            keyed,
            scratch,
            present,
        } = sorted;
        children.clear();
        keyed.clear();
        // Gathered straight from the table's segments, room made once: through the chained
        // iterator of `children`, which tells nothing of its length, the copy was a twentieth of
        // a `DUMP`'s samples at a thousand children a folder.
        let only = self.nodes[node as usize].child;
        if only != NONE {
            children.push(only);
        }
        let table = self.table_of(node);
        if table != NONE {
            self.tables[table as usize].append_to(children);
        }
        // A folder holding a good part of the table's nodes is read in the arena's order, as
        // it was filled, rather than its table's, which is its hash order: a million children
        // read in hash order missed the cache and the TLB once each, where in the arena's order
        // a node's neighbours share its lines and pages. The children are put in that order
        // through one bit a node, which costs the arena's length over 64 words, less than a
        // radix pass over the children once they are a sixteenth of the arena.
        let slots = self.nodes.len();
        if children.len() >= RADIX_FROM && children.len() * 16 >= slots {
            present.clear();
            present.resize(slots.div_ceil(64), 0);
            for &child in children.iter() {
                present[child as usize / 64] |= 1 << (child % 64);
            }
            children.clear();
            for (word, &bits) in present.iter().enumerate() {
                let mut bits = bits;
                while bits != 0 {
                    children.push((word * 64) as NodeId + bits.trailing_zeros());
                    bits &= bits - 1;
                }
            }
        }
        // The children's nodes lie anywhere in the arena: each is asked for some children
        // ahead of reading it, far enough that the memory's latency (a hundred nanoseconds and
        // more) is covered by the work on the children between (a few nanoseconds each).
        const AHEAD: usize = 24;
        let ask = |child: NodeId| prefetch_node(&self.nodes[child as usize]);
        for &child in children.iter().take(AHEAD) {
            ask(child);
        }
        for (i, &child) in children.iter().enumerate() {
            if let Some(&next) = children.get(i + AHEAD) {
                ask(next);
            }
            keyed.push((order_key(&self.nodes[child as usize].segment), child));
        }
        // By the key alone: siblings' segments differ, so ties are ordered below in any case.
        sort_by_key(keyed, scratch);
        let mut start = 0;
        while start < keyed.len() {
            let key = keyed[start].0;
            let end = start
                + keyed[start..]
                    .iter()
                    .take_while(|(other, _)| *other == key)
                    .count();
            if end - start > 1 {
                keyed[start..end].sort_unstable_by(|&(_, a), &(_, b)| {
                    (*self.nodes[a as usize].segment).cmp(&*self.nodes[b as usize].segment)
                });
            }
            start = end;
        }
    }
}

/// Asks for a node without waiting for it: both cache lines a node of 40 bytes may straddle.
#[inline]
pub(super) fn prefetch_node(node: &Node) {
    prefetch(node);
    let bytes = std::ptr::from_ref(node).cast::<u8>();
    // SAFETY: the node's last byte lies within the node, which `node` borrows.
    prefetch(unsafe { &*bytes.add(std::mem::size_of::<Node>() - 1) });
}

/// A node's children as [`Tree::sort_children`] leaves them: `keyed` in the byte order of their
/// segments, each child beside its sort key; `children` is its scratch list.
#[derive(Default)]
pub(super) struct SortedChildren {
    children: Vec<NodeId>,
    pub(super) keyed: Vec<(u64, NodeId)>,
    /// The radix sort's second buffer.
    scratch: Vec<(u64, NodeId)>,
    /// A bit for each of the arena's nodes, set for the children of a big folder.
    present: Vec<u64>,
}

/// Below this many children a comparison sort is quicker than the radix sort's passes.
const RADIX_FROM: usize = 64;

/// Sorts `keyed` by its keys (equal keys in no particular order): a least-significant-digit
/// radix sort of the key's bytes, skipping the bytes on which every key agrees, for a big
/// folder; a comparison sort otherwise. At a thousand children a folder the comparison sort,
/// whose branches go either way on keys in no order, was a sixteenth of a `DUMP`'s samples;
/// the radix sort's passes read and write the list in order and branch on nothing.
fn sort_by_key(keyed: &mut Vec<(u64, NodeId)>, scratch: &mut Vec<(u64, NodeId)>) {
    if keyed.len() < RADIX_FROM {
        keyed.sort_unstable_by_key(|&(key, _)| key);
        return;
    }
    let first = keyed[0].0;
    let mut differ = 0u64;
    let mut counts = [[0u32; 256]; 8];
    for &(key, _) in keyed.iter() {
        differ |= key ^ first;
        for (byte, count) in counts.iter_mut().enumerate() {
            count[(key >> (8 * byte)) as usize & 0xff] += 1;
        }
    }
    scratch.clear();
    scratch.resize(keyed.len(), (0, 0));
    for (byte, count) in counts.iter().enumerate() {
        if (differ >> (8 * byte)) & 0xff == 0 {
            continue;
        }
        let mut starts = [0u32; 256];
        let mut sum = 0;
        for (start, &n) in starts.iter_mut().zip(count.iter()) {
            *start = sum;
            sum += n;
        }
        for &entry in keyed.iter() {
            let digit = (entry.0 >> (8 * byte)) as usize & 0xff;
            scratch[starts[digit] as usize] = entry;
            starts[digit] += 1;
        }
        std::mem::swap(keyed, scratch);
    }
}

/// What `walk` calls for each lock: the table, the lock's node, the node's trie key, the lock.
pub(super) type Visit<'a> = dyn FnMut(&Tree, NodeId, &[u8], &Held) + 'a;

/// A segment's first eight bytes as a big-endian number, zeros past its end: two segments
/// whose keys differ are in the order of their keys, and equal keys say nothing.
fn order_key(segment: &[u8]) -> u64 {
    let mut head = [0u8; 8];
    let len = segment.len().min(8);
    head[..len].copy_from_slice(&segment[..len]);
    u64::from_be_bytes(head)
}

pub(super) fn push_segment(key: &mut Vec<u8>, escaped: &[u8]) {
    key.extend_from_slice(escaped);
    key.push(0);
}

/// Makes room for one more element: exactly at first, since nearly every path and owner holds
/// one or two locks and a default growth would reserve four; by doubling past a few, so that a
/// token holding thousands of locks is not copied on each.
pub(super) fn reserve_for_one<T>(all: &mut Vec<T>) {
    if all.len() < 8 {
        all.reserve_exact(1);
    } else {
        all.reserve(1);
    }
}
