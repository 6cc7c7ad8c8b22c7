//! The lock table of one project: where `WRITE /A` is decided.
//!
//! Every locked path has a node in a tree with one node per path segment, and so has every
//! ancestor of a locked path. A node holds the locks taken on its exact path and, as Gray's
//! intention marks, the number of `READ` and `WRITE` locks held strictly beneath it. A request
//! for `mode` on `path` by `token` is then decided by looking at O(depth) nodes:
//!
//! * the locks held on `path` and on each of its ancestors, because they cover `path`;
//! * the marks on `path`'s own node, because they count the locks that `path` would cover.
//!
//! Locks of the requesting token never conflict with the request, so the marks alone do not
//! settle a non-zero count: the token's own locks beneath `path` are subtracted. That costs what
//! the requester itself holds, never what others hold.
//!
//! Nodes live in an arena and find their children through a hash table of child ids keyed by
//! the child's own segment, so a step down the tree is one hash of one segment, and a segment is
//! stored once. Owners (tokens) are interned the same way; a lock refers to its owner by id.
//! Expiry is indexed per owner by its earliest deadline: the locks of one grant share a deadline,
//! and `RENEW` moves all of an owner's locks together.
//!
//! Time never comes from inside: every method that needs it takes `now` in milliseconds. A lock
//! whose deadline is not after `now` is expired. The mutating methods assume the caller ran
//! [`LockTable::reclaim_expired`] first, as the Redis layer does when it opens a key for
//! writing; the reading methods filter expired locks themselves, because a replica must hide
//! expired locks without reclaiming them.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::lock::{LockInfo, Mode, Token};
use crate::path::Path;

type NodeId = u32;
type OwnerId = u32;

const ROOT: NodeId = 0;

#[derive(Clone, Debug)]
struct Held {
    owner: OwnerId,
    mode: Mode,
    deadline: u64,
    fence: u64,
}

/// The locks on one path. Nearly every locked path has exactly one, which is kept inside the
/// node instead of in an allocation of its own.
#[derive(Clone, Debug, Default)]
enum HeldList {
    #[default]
    Empty,
    One(Held),
    Many(Vec<Held>),
}

impl HeldList {
    fn as_slice(&self) -> &[Held] {
        match self {
            HeldList::Empty => &[],
            HeldList::One(held) => std::slice::from_ref(held),
            HeldList::Many(all) => all,
        }
    }

    fn iter(&self) -> std::slice::Iter<'_, Held> {
        self.as_slice().iter()
    }

    fn iter_mut(&mut self) -> std::slice::IterMut<'_, Held> {
        match self {
            HeldList::Empty => [].iter_mut(),
            HeldList::One(held) => std::slice::from_mut(held).iter_mut(),
            HeldList::Many(all) => all.iter_mut(),
        }
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn is_empty(&self) -> bool {
        matches!(self, HeldList::Empty)
    }

    fn insert(&mut self, at: usize, held: Held) {
        *self = match std::mem::take(self) {
            HeldList::Empty => HeldList::One(held),
            HeldList::One(first) => {
                let mut all = Vec::with_capacity(2);
                all.push(first);
                all.insert(at, held);
                HeldList::Many(all)
            }
            HeldList::Many(mut all) => {
                all.reserve_exact(1);
                all.insert(at, held);
                HeldList::Many(all)
            }
        };
    }

    /// Removes and returns the lock at `at`, which must exist.
    fn remove(&mut self, at: usize) -> Option<Held> {
        let (removed, rest) = match std::mem::take(self) {
            HeldList::Empty => (None, HeldList::Empty),
            HeldList::One(held) => (Some(held), HeldList::Empty),
            HeldList::Many(mut all) => {
                let removed = (at < all.len()).then(|| all.remove(at));
                let rest = match all.len() {
                    0 => HeldList::Empty,
                    1 => all.pop().map_or(HeldList::Empty, HeldList::One),
                    _ => HeldList::Many(all),
                };
                (removed, rest)
            }
        };
        *self = rest;
        removed
    }
}

impl<'a> IntoIterator for &'a HeldList {
    type Item = &'a Held;
    type IntoIter = std::slice::Iter<'a, Held>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// A segment's bytes, kept inside the node when short (most file and folder names are), which
/// spares an allocation per node.
#[derive(Clone, Debug)]
enum Segment {
    Inline {
        len: u8,
        bytes: [u8; Segment::INLINE],
    },
    Heap(Box<[u8]>),
}

impl Segment {
    const INLINE: usize = 22;

    fn new(bytes: &[u8]) -> Segment {
        if bytes.len() <= Segment::INLINE {
            let mut inline = [0; Segment::INLINE];
            inline[..bytes.len()].copy_from_slice(bytes);
            Segment::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            }
        } else {
            Segment::Heap(bytes.into())
        }
    }
}

impl Default for Segment {
    fn default() -> Self {
        Segment::new(&[])
    }
}

impl std::ops::Deref for Segment {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Segment::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Segment::Heap(bytes) => bytes,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Node {
    /// The segment as it appears in trie keys (escaped, without its terminator); empty for the
    /// root and for free slots.
    segment: Segment,
    parent: NodeId,
    /// The intention marks: locks of each mode held strictly beneath, by `Mode::index`.
    below: [u32; 2],
    /// The locks on this exact path, in canonical order: writers first, then by token. The
    /// order keeps listings, persistence and digests identical on every server, and lets a
    /// reader's check stop at the first `READ`.
    held: HeldList,
    /// Boxed and made on demand: most nodes are leaves, and an empty table still costs 32 bytes.
    children: Option<Box<HashTable<NodeId>>>,
}

impl Node {
    fn is_unused(&self) -> bool {
        self.held.is_empty() && self.below == [0, 0]
    }

    fn children(&self) -> impl Iterator<Item = &NodeId> {
        self.children.iter().flat_map(|table| table.iter())
    }
}

#[derive(Clone, Debug)]
struct Owner {
    token: Token,
    locks: Vec<(NodeId, Mode)>,
    /// The earliest deadline among `locks`, as filed in the expiry index.
    earliest: u64,
}

/// The modes whose locks beneath a path block a request for `mode` there.
fn blocking_count(mode: Mode, counts: [u32; 2]) -> u64 {
    match mode {
        Mode::Write => u64::from(counts[0]) + u64::from(counts[1]),
        Mode::Read => u64::from(counts[Mode::Write.index()]),
    }
}

/// The locks of one project.
#[derive(Clone, Debug)]
pub struct LockTable {
    nodes: Vec<Node>,
    free_nodes: Vec<NodeId>,
    owners: Vec<Option<Owner>>,
    free_owners: Vec<OwnerId>,
    /// Owner ids, found by hashing the owner's token.
    owner_index: HashTable<OwnerId>,
    hasher: DefaultHashBuilder,
    /// `(earliest deadline, owner)`, so that reclaiming costs what it reclaims.
    expiry: BTreeSet<(u64, OwnerId)>,
    next_fence: u64,
    len: usize,
    live_nodes: usize,
    segment_bytes: usize,
    token_bytes: usize,
}

impl Default for LockTable {
    fn default() -> Self {
        LockTable::new()
    }
}

/// Bytes a node costs beyond its segment: the arena slot and its share of a parent's table.
const NODE_OVERHEAD: usize = std::mem::size_of::<Node>() + 8;
/// Bytes a lock costs beyond its owner: its entry in the node and in the owner's list.
const LOCK_OVERHEAD: usize = std::mem::size_of::<Held>() + 8;
/// Bytes an owner costs beyond its token: the slot, its index entry and its expiry entry.
const OWNER_OVERHEAD: usize = std::mem::size_of::<Option<Owner>>() + 8 + 24;

impl LockTable {
    pub fn new() -> LockTable {
        LockTable {
            nodes: vec![Node::default()],
            free_nodes: Vec::new(),
            owners: Vec::new(),
            free_owners: Vec::new(),
            owner_index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            expiry: BTreeSet::new(),
            next_fence: 1,
            len: 0,
            live_nodes: 0,
            segment_bytes: 0,
            token_bytes: 0,
        }
    }

    /// The number of locks stored, including expired ones not yet reclaimed.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// An estimate of the heap bytes the table uses, for `MEMORY USAGE`. It depends only on what
    /// the table holds, so a released lock takes its bytes back exactly.
    pub fn memory_estimate(&self) -> usize {
        let owners = self.owners.len() - self.free_owners.len();
        std::mem::size_of::<LockTable>()
            + (self.live_nodes + 1) * NODE_OVERHEAD
            + self.segment_bytes
            + self.len * LOCK_OVERHEAD
            + owners * OWNER_OVERHEAD
            + self.token_bytes
    }

    /// How much work freeing the table is, in allocations, for Redis's lazy-free decision.
    pub fn free_effort(&self) -> usize {
        self.live_nodes + self.len + self.owners.len()
    }

    /// The fence the next successful acquire will take.
    pub fn next_fence(&self) -> u64 {
        self.next_fence
    }

    /// Raises the fence counter to at least `next`; it never goes down, so a fence is never
    /// reused.
    pub fn raise_next_fence(&mut self, next: u64) {
        self.next_fence = self.next_fence.max(next);
    }

    /// The earliest deadline of any stored lock.
    pub fn next_deadline(&self) -> Option<u64> {
        self.expiry.first().map(|entry| entry.0)
    }

    /// Grants every `(mode, path)` to `token` for `ttl` milliseconds, all or nothing. Returns
    /// the fence of the grant, or `None` when any of them is blocked by another owner's lock.
    pub fn acquire(
        &mut self,
        now: u64,
        token: &Token,
        ttl: u64,
        items: &[(Mode, Path)],
    ) -> Option<u64> {
        if items
            .iter()
            .any(|(mode, path)| self.is_blocked(token, *mode, path))
        {
            return None;
        }
        let fence = self.next_fence;
        self.grant(token, now.saturating_add(ttl), fence, items);
        Some(fence)
    }

    /// Records a grant that was already decided: by `acquire`, or by a master whose effect a
    /// replica or an AOF replay applies. Re-granting a `(path, mode)` the token holds refreshes
    /// its deadline and fence. Returns how many new locks it added.
    pub fn grant(
        &mut self,
        token: &Token,
        deadline: u64,
        fence: u64,
        items: &[(Mode, Path)],
    ) -> usize {
        self.raise_next_fence(fence.saturating_add(1));
        let owner = self.intern(token);
        let added = items
            .iter()
            .filter(|(mode, path)| self.insert(path, owner, *mode, deadline, fence))
            .count();
        self.refile(owner);
        added
    }

    /// Frees `token`'s locks at `paths` (every mode held there), or all of its locks when
    /// `paths` is `None`. Returns the locks freed.
    pub fn release(&mut self, token: &Token, paths: Option<&[Path]>) -> Vec<LockInfo> {
        let Some(owner) = self.find_owner(token) else {
            return Vec::new();
        };
        let targets: Vec<(NodeId, Mode)> = match paths {
            None => self.owner(owner).locks.clone(),
            Some(paths) => paths
                .iter()
                .filter_map(|path| self.locate(path))
                .flat_map(|node| Mode::ALL.map(|mode| (node, mode)))
                .collect(),
        };
        let freed = targets
            .into_iter()
            .filter_map(|(node, mode)| self.remove(node, owner, mode))
            .collect();
        self.refile(owner);
        freed
    }

    /// Moves the deadline of every lock of `token` to `deadline`. Returns how many it moved.
    pub fn renew(&mut self, token: &Token, deadline: u64) -> usize {
        let Some(owner) = self.find_owner(token) else {
            return 0;
        };
        let locks = self.owner(owner).locks.clone();
        for &(node, mode) in &locks {
            if let Some(held) = self.nodes[node as usize]
                .held
                .iter_mut()
                .find(|h| h.owner == owner && h.mode == mode)
            {
                held.deadline = deadline;
            }
        }
        self.refile(owner);
        locks.len()
    }

    /// Removes every lock whose deadline is not after `now`, earliest owner first, and returns
    /// them.
    pub fn reclaim_expired(&mut self, now: u64) -> Vec<LockInfo> {
        let mut reclaimed = Vec::new();
        while let Some(&(earliest, owner)) = self.expiry.first() {
            if earliest > now {
                break;
            }
            let due: Vec<(NodeId, Mode)> = self
                .owner(owner)
                .locks
                .iter()
                .copied()
                .filter(|&(node, mode)| {
                    self.held_by(node, owner, mode)
                        .is_some_and(|h| h.deadline <= now)
                })
                .collect();
            let before = reclaimed.len();
            reclaimed.extend(
                due.into_iter()
                    .filter_map(|(node, mode)| self.remove(node, owner, mode)),
            );
            if reclaimed.len() == before {
                // Unreachable while the index mirrors the locks; dropping the entry keeps the
                // loop finite even if it did not.
                self.expiry.remove(&(earliest, owner));
            } else {
                self.refile(owner);
            }
        }
        reclaimed
    }

    /// Whether another owner's lock blocks `token` from taking `mode` on `path`. Expired locks
    /// count, so reclaim them first.
    pub fn is_blocked(&self, token: &Token, mode: Mode, path: &Path) -> bool {
        let me = self.find_owner(token);
        let mut node = ROOT;
        let mut segments = path.escaped_segments();
        loop {
            let blocks = self.nodes[node as usize]
                .held
                .iter()
                .take_while(|h| h.mode.conflicts_with(mode))
                .any(|h| Some(h.owner) != me);
            if blocks {
                return true;
            }
            match segments.next() {
                Some(segment) => match self.child(node, segment) {
                    Some(next) => node = next,
                    None => return false,
                },
                None => break,
            }
        }
        let beneath = blocking_count(mode, self.nodes[node as usize].below);
        beneath > 0 && beneath > blocking_count(mode, self.own_beneath(me, node))
    }

    /// The live locks that block the request `items` of `token` (of nobody when `None`), each
    /// once, in tree order.
    pub fn blockers(
        &self,
        now: u64,
        token: Option<&Token>,
        items: &[(Mode, Path)],
    ) -> Vec<LockInfo> {
        let me = token.and_then(|t| self.find_owner(t));
        let excluded = |owner: OwnerId| token.is_some() && Some(owner) == me;
        let mut found = BTreeSet::new();
        for (mode, path) in items {
            let mut node = ROOT;
            let mut key = Vec::with_capacity(path.key().len());
            let mut segments = path.escaped_segments();
            let reached = loop {
                for held in &self.nodes[node as usize].held {
                    if held.mode.conflicts_with(*mode)
                        && !excluded(held.owner)
                        && held.deadline > now
                    {
                        found.insert(self.info(&key, held));
                    }
                }
                match segments.next() {
                    Some(segment) => match self.child(node, segment) {
                        Some(next) => {
                            push_segment(&mut key, segment);
                            node = next;
                        }
                        None => break false,
                    },
                    None => break true,
                }
            };
            if reached {
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
            self.walk(node, &mut key, &mut |table, key, held| {
                if held.deadline > now {
                    out.push(table.info(key, held));
                }
            });
        }
        out
    }

    /// Every stored lock, expired or not, in tree order: the canonical order that persistence
    /// and digests rely on.
    pub fn iter(&self) -> impl Iterator<Item = LockInfo> + '_ {
        let mut out = Vec::with_capacity(self.len);
        self.walk(ROOT, &mut Vec::new(), &mut |table, key, held| {
            out.push(table.info(key, held));
        });
        out.into_iter()
    }

    /// The number of nodes in use: locked paths and their ancestors. Zero once every lock is
    /// gone, which is how tests show that a released lock leaves nothing behind.
    pub fn node_count(&self) -> usize {
        self.live_nodes + usize::from(!self.nodes[ROOT as usize].is_unused())
    }

    /// Recomputes every derived structure from the locks themselves and reports the first
    /// disagreement: intention marks, owners' lists, the expiry index, the counts, the canonical
    /// order, the tree's links, and the absence of nodes that nothing needs.
    pub fn check_integrity(&self) -> Result<(), String> {
        let mut owned: BTreeMap<OwnerId, BTreeSet<(NodeId, Mode)>> = BTreeMap::new();
        let mut len = 0;
        let mut live = 0;
        let mut segment_bytes = 0;
        let mut stack = vec![ROOT];
        while let Some(id) = stack.pop() {
            let node = &self.nodes[id as usize];
            if id != ROOT {
                live += 1;
                segment_bytes += node.segment.len();
                if node.is_unused() {
                    return Err(format!("unused node {id}"));
                }
            }
            let mut below = [0u32; 2];
            for &child in node.children() {
                let c = &self.nodes[child as usize];
                if c.parent != id || self.child(id, &c.segment) != Some(child) {
                    return Err(format!("node {child} is not linked to its parent {id}"));
                }
                for mode in Mode::ALL {
                    below[mode.index()] += c.below[mode.index()]
                        + c.held.iter().filter(|h| h.mode == mode).count() as u32;
                }
                stack.push(child);
            }
            if below != node.below {
                return Err(format!(
                    "marks at node {id} are {:?}, expected {below:?}",
                    node.below
                ));
            }
            let order: Vec<(Mode, &Token)> = node
                .held
                .iter()
                .map(|h| (h.mode, &self.owner(h.owner).token))
                .collect();
            if !order.windows(2).all(|w| w[0] < w[1]) {
                return Err(format!("locks at node {id} are not in canonical order"));
            }
            for held in &node.held {
                len += 1;
                if held.fence == 0 || held.fence >= self.next_fence {
                    return Err(format!("fence {} is not below the counter", held.fence));
                }
                owned.entry(held.owner).or_default().insert((id, held.mode));
            }
        }
        if len != self.len || live != self.live_nodes || segment_bytes != self.segment_bytes {
            return Err("the counts disagree with the tree".into());
        }
        let mut expiry = BTreeSet::new();
        let mut token_bytes = 0;
        for (id, slot) in self.owners.iter().enumerate() {
            let Some(owner) = slot else { continue };
            let id = id as OwnerId;
            token_bytes += owner.token.as_bytes().len();
            let listed: BTreeSet<(NodeId, Mode)> = owner.locks.iter().copied().collect();
            if listed.len() != owner.locks.len() || owned.remove(&id).unwrap_or_default() != listed
            {
                return Err(format!(
                    "owner {:?}'s list disagrees with the tree",
                    owner.token
                ));
            }
            if self.find_owner(&owner.token) != Some(id) {
                return Err(format!("owner {:?} is not indexed", owner.token));
            }
            let earliest = owner
                .locks
                .iter()
                .filter_map(|&(n, m)| self.held_by(n, id, m).map(|h| h.deadline))
                .min();
            match earliest {
                Some(earliest) if earliest == owner.earliest => {
                    expiry.insert((earliest, id));
                }
                _ => return Err(format!("owner {:?} is filed wrongly", owner.token)),
            }
        }
        if !owned.is_empty() {
            return Err("locks held by owners that do not exist".into());
        }
        if expiry != self.expiry || token_bytes != self.token_bytes {
            return Err("the expiry index disagrees with the owners".into());
        }
        Ok(())
    }

    fn owner(&self, id: OwnerId) -> &Owner {
        // Ids come from the table's own structures, which only hold live owners.
        self.owners[id as usize].as_ref().expect("a live owner id")
    }

    fn find_owner(&self, token: &Token) -> Option<OwnerId> {
        let hash = self.hasher.hash_one(token.as_bytes());
        self.owner_index
            .find(hash, |&id| {
                self.owners[id as usize]
                    .as_ref()
                    .is_some_and(|o| o.token == *token)
            })
            .copied()
    }

    /// The owner id of `token`, created when it holds nothing yet.
    fn intern(&mut self, token: &Token) -> OwnerId {
        if let Some(id) = self.find_owner(token) {
            return id;
        }
        let owner = Owner {
            token: token.clone(),
            locks: Vec::new(),
            earliest: u64::MAX,
        };
        let id = match self.free_owners.pop() {
            Some(id) => {
                self.owners[id as usize] = Some(owner);
                id
            }
            None => {
                self.owners.push(Some(owner));
                (self.owners.len() - 1) as OwnerId
            }
        };
        self.token_bytes += token.as_bytes().len();
        let hash = self.hasher.hash_one(token.as_bytes());
        let (owners, hasher) = (&self.owners, &self.hasher);
        self.owner_index.insert_unique(hash, id, |&other| {
            let token = owners[other as usize].as_ref().map(|o| o.token.as_bytes());
            hasher.hash_one(token.unwrap_or_default())
        });
        id
    }

    /// Files an owner in the expiry index under its earliest deadline, or forgets it when it
    /// holds nothing any more.
    fn refile(&mut self, id: OwnerId) {
        let Some(owner) = self.owners[id as usize].as_ref() else {
            return;
        };
        let old = owner.earliest;
        let earliest = owner
            .locks
            .iter()
            .filter_map(|&(node, mode)| self.held_by(node, id, mode).map(|h| h.deadline))
            .min();
        self.expiry.remove(&(old, id));
        match earliest {
            Some(earliest) => {
                self.expiry.insert((earliest, id));
                if let Some(owner) = self.owners[id as usize].as_mut() {
                    owner.earliest = earliest;
                }
            }
            None => {
                let hash = self.hasher.hash_one(owner.token.as_bytes());
                if let Ok(entry) = self.owner_index.find_entry(hash, |&other| other == id) {
                    entry.remove();
                }
                self.token_bytes -= owner.token.as_bytes().len();
                self.owners[id as usize] = None;
                self.free_owners.push(id);
            }
        }
    }

    fn held_by(&self, node: NodeId, owner: OwnerId, mode: Mode) -> Option<&Held> {
        self.nodes[node as usize]
            .held
            .iter()
            .find(|h| h.owner == owner && h.mode == mode)
    }

    fn child(&self, node: NodeId, segment: &[u8]) -> Option<NodeId> {
        let hash = self.hasher.hash_one(segment);
        self.nodes[node as usize]
            .children
            .as_ref()?
            .find(hash, |&c| *self.nodes[c as usize].segment == *segment)
            .copied()
    }

    /// The node of `path`, when it exists.
    fn locate(&self, path: &Path) -> Option<NodeId> {
        path.escaped_segments()
            .try_fold(ROOT, |node, segment| self.child(node, segment))
    }

    /// The child of `node` for `segment`, created when missing.
    fn child_or_insert(&mut self, node: NodeId, segment: &[u8]) -> NodeId {
        if let Some(child) = self.child(node, segment) {
            return child;
        }
        let fresh = Node {
            segment: Segment::new(segment),
            parent: node,
            ..Node::default()
        };
        let id = match self.free_nodes.pop() {
            Some(id) => {
                self.nodes[id as usize] = fresh;
                id
            }
            None => {
                self.nodes.push(fresh);
                (self.nodes.len() - 1) as NodeId
            }
        };
        self.live_nodes += 1;
        self.segment_bytes += segment.len();
        // The table is taken out of its node while it grows, because rehashing reads the
        // segments of the other nodes.
        let hash = self.hasher.hash_one(segment);
        let mut table = self.nodes[node as usize]
            .children
            .take()
            .unwrap_or_default();
        let (nodes, hasher) = (&self.nodes, &self.hasher);
        table.insert_unique(hash, id, |&c| hasher.hash_one(&*nodes[c as usize].segment));
        self.nodes[node as usize].children = Some(table);
        id
    }

    /// Adds one lock, or refreshes it when the owner already holds that mode on that path.
    /// Returns whether the lock is new.
    fn insert(
        &mut self,
        path: &Path,
        owner: OwnerId,
        mode: Mode,
        deadline: u64,
        fence: u64,
    ) -> bool {
        let held = Held {
            owner,
            mode,
            deadline,
            fence,
        };
        let mut node = ROOT;
        for segment in path.escaped_segments() {
            node = self.child_or_insert(node, segment);
        }
        if let Some(existing) = self.nodes[node as usize]
            .held
            .iter_mut()
            .find(|h| h.owner == owner && h.mode == mode)
        {
            // The path existed, so nothing was created on the way down.
            *existing = held;
            return false;
        }
        let mut up = node;
        while up != ROOT {
            up = self.nodes[up as usize].parent;
            self.nodes[up as usize].below[mode.index()] += 1;
        }
        let token = &self.owner(owner).token;
        let position = self.nodes[node as usize]
            .held
            .iter()
            .position(|h| (h.mode, &self.owner(h.owner).token) > (mode, token))
            .unwrap_or(self.nodes[node as usize].held.len());
        // Exact growth: nearly every owner holds one or two locks, and a default first
        // allocation would reserve four.
        self.nodes[node as usize].held.insert(position, held);
        if let Some(o) = self.owners[owner as usize].as_mut() {
            o.locks.reserve_exact(1);
            o.locks.push((node, mode));
        }
        self.len += 1;
        true
    }

    /// Removes one lock and every node that only it needed. The caller refiles the owner.
    fn remove(&mut self, node: NodeId, owner: OwnerId, mode: Mode) -> Option<LockInfo> {
        let at = self.nodes[node as usize]
            .held
            .iter()
            .position(|h| h.owner == owner && h.mode == mode)?;
        let key = self.key_of(node);
        let held = self.nodes[node as usize].held.remove(at)?;
        let info = self.info(&key, &held);
        let mut current = node;
        while current != ROOT {
            let parent = self.nodes[current as usize].parent;
            self.nodes[parent as usize].below[mode.index()] -= 1;
            if self.nodes[current as usize].is_unused() {
                self.unlink_node(current);
            }
            current = parent;
        }
        if let Some(o) = self.owners[owner as usize].as_mut() {
            if let Some(i) = o.locks.iter().position(|&l| l == (node, mode)) {
                o.locks.swap_remove(i);
            }
        }
        self.len -= 1;
        Some(info)
    }

    fn unlink_node(&mut self, id: NodeId) {
        let node = std::mem::take(&mut self.nodes[id as usize]);
        let hash = self.hasher.hash_one(&*node.segment);
        let parent = &mut self.nodes[node.parent as usize];
        if let Some(table) = parent.children.as_mut() {
            if let Ok(entry) = table.find_entry(hash, |&c| c == id) {
                entry.remove();
            }
            if table.is_empty() {
                parent.children = None;
            }
        }
        self.live_nodes -= 1;
        self.segment_bytes -= node.segment.len();
        self.free_nodes.push(id);
    }

    /// The trie key of a node, built by walking up to the root.
    fn key_of(&self, mut node: NodeId) -> Vec<u8> {
        let mut segments = Vec::new();
        while node != ROOT {
            segments.push(&self.nodes[node as usize].segment);
            node = self.nodes[node as usize].parent;
        }
        let mut key = Vec::new();
        for segment in segments.iter().rev() {
            push_segment(&mut key, segment);
        }
        key
    }

    fn info(&self, key: &[u8], held: &Held) -> LockInfo {
        LockInfo {
            path: Path::from_trusted_key(key.to_vec()),
            mode: held.mode,
            token: self.owner(held.owner).token.clone(),
            deadline: held.deadline,
            fence: held.fence,
        }
    }

    /// How many locks of each mode the owner holds strictly beneath `node`.
    fn own_beneath(&self, owner: Option<OwnerId>, node: NodeId) -> [u32; 2] {
        let mut counts = [0, 0];
        let Some(owner) = owner else {
            return counts;
        };
        for &(lock, mode) in &self.owner(owner).locks {
            let mut up = lock;
            while up != ROOT {
                up = self.nodes[up as usize].parent;
                if up == node {
                    counts[mode.index()] += 1;
                    break;
                }
            }
        }
        counts
    }

    /// Visits every lock at and beneath `node` in tree order: a node's locks, then its children
    /// in byte order of their segments. `key` is the node's trie key on entry and on return.
    fn walk(&self, node: NodeId, key: &mut Vec<u8>, visit: &mut dyn FnMut(&Self, &[u8], &Held)) {
        for held in &self.nodes[node as usize].held {
            visit(self, key, held);
        }
        for child in self.sorted_children(node) {
            let length = key.len();
            push_segment(key, &self.nodes[child as usize].segment);
            self.walk(child, key, visit);
            key.truncate(length);
        }
    }

    fn sorted_children(&self, node: NodeId) -> Vec<NodeId> {
        let mut children: Vec<NodeId> = self.nodes[node as usize].children().copied().collect();
        children.sort_unstable_by(|&a, &b| {
            self.nodes[a as usize]
                .segment
                .cmp(&self.nodes[b as usize].segment)
        });
        children
    }

    /// Collects the live locks strictly beneath `node` that block `mode`, descending only into
    /// subtrees whose intention marks say they hold such a lock.
    fn collect_beneath(
        &self,
        node: NodeId,
        key: &mut Vec<u8>,
        now: u64,
        excluded: &dyn Fn(OwnerId) -> bool,
        mode: Mode,
        found: &mut BTreeSet<LockInfo>,
    ) {
        for &child in self.nodes[node as usize].children() {
            let c = &self.nodes[child as usize];
            let relevant_here = c.held.iter().any(|h| h.mode.conflicts_with(mode));
            if !relevant_here && blocking_count(mode, c.below) == 0 {
                continue;
            }
            let length = key.len();
            push_segment(key, &c.segment);
            for held in &c.held {
                if held.mode.conflicts_with(mode) && !excluded(held.owner) && held.deadline > now {
                    found.insert(self.info(key, held));
                }
            }
            if blocking_count(mode, c.below) > 0 {
                self.collect_beneath(child, key, now, excluded, mode, found);
            }
            key.truncate(length);
        }
    }
}

fn push_segment(key: &mut Vec<u8>, escaped: &[u8]) {
    key.extend_from_slice(escaped);
    key.push(0);
}
