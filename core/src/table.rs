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
//! Nodes live in an arena. A node with one child points at it directly; a node with more finds
//! them through a hash table of child ids keyed by the child's own segment, so a step down the
//! tree is one comparison or one hash of one segment, and a segment is stored once. Owners
//! (tokens) are interned in a hash table too; a lock refers to its owner by id. Expiry is
//! indexed per owner by its earliest deadline: the locks of one grant share a deadline, and
//! `RENEW` moves all of an owner's locks together.
//!
//! Memory is what a million locks cost, so the common case is kept inline and the rare one
//! spills: a node (64 bytes, one cache line) holds its one lock and its one child, an owner
//! holds its one lock and, when short or a canonical UUID, its token. Paths with several locks
//! and owners with several locks keep them in side maps.
//!
//! Time never comes from inside: every method that needs it takes `now` in milliseconds. A lock
//! whose deadline is not after `now` is expired. The mutating methods assume the caller ran
//! [`LockTable::reclaim_expired`] first, as the Redis layer does when it opens a key for
//! writing; the reading methods filter expired locks themselves, because a replica must hide
//! expired locks without reclaiming them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::bytes::SmallBytes;
use crate::lock::{LockInfo, Mode, PackedToken, Token};
use crate::path::Path;

type NodeId = u32;
type OwnerId = u32;

const ROOT: NodeId = 0;

/// The mode of a lock reference, kept in the top bit of its id so that the reference fits in
/// 32 bits.
const READ_BIT: u32 = 1 << 31;
/// An empty slot: no lock, no child, no table, no neighbour.
const NONE: u32 = u32::MAX;
/// A slot whose entries outgrew it and live in a side map of the table.
const SPILLED: u32 = u32::MAX - 1;
/// Ids stay below the sentinels and the mode bit. Reaching it would take 2^31 nodes or owners,
/// over 100 GiB, but the check keeps a tagged id from ever being misread.
const MAX_ID: u32 = READ_BIT - 2;

/// A node or owner id with a mode: a lock seen from its owner, or an owner seen from its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Tagged(u32);

impl Tagged {
    fn new(id: u32, mode: Mode) -> Tagged {
        Tagged(match mode {
            Mode::Write => id,
            Mode::Read => id | READ_BIT,
        })
    }

    fn id(self) -> u32 {
        self.0 & !READ_BIT
    }

    fn mode(self) -> Mode {
        if self.0 & READ_BIT == 0 {
            Mode::Write
        } else {
            Mode::Read
        }
    }
}

/// One lock, as stored on its path's node. Packed to 20 bytes, so that a node holding one lock
/// fits in a cache line.
#[derive(Clone, Copy, Debug)]
#[repr(C, packed(4))]
struct Held {
    deadline: u64,
    fence: u64,
    owner: Tagged,
}

impl Held {
    const EMPTY: Held = Held {
        deadline: 0,
        fence: 0,
        owner: Tagged(NONE),
    };

    fn owner(&self) -> OwnerId {
        self.owner.id()
    }

    fn mode(&self) -> Mode {
        self.owner.mode()
    }
}

/// A segment's bytes, kept inside the node when short, as most file and folder names are.
type Segment = SmallBytes;

/// One path segment of the tree. A million locks make a million nodes, so the node is laid out
/// to take one 64-byte cache line: the common cases (one lock on the path, one child) are kept
/// inline, and the rare ones spill into the table's side structures.
#[derive(Clone, Debug)]
struct Node {
    /// The segment as it appears in trie keys (escaped, without its terminator); empty for the
    /// root and for free slots.
    segment: Segment,
    /// The lock on this exact path when there is one. Its owner is `NONE` when there is none,
    /// and `SPILLED` when several share the path; they are then in `LockTable::crowded`, in
    /// canonical order: writers first, then by token. The order keeps listings, persistence and
    /// digests identical on every server, and lets a reader's check stop at the first `READ`.
    lock: Held,
    parent: NodeId,
    /// The intention marks: locks of each mode held strictly beneath, by `Mode::index`.
    below: [u32; 2],
    /// The only child, when there is exactly one and no table: chains of folders with one
    /// locked file cost no allocation.
    child: NodeId,
    /// The index in `LockTable::tables` of the children's table, or `NONE`.
    table: u32,
}

const _: () = assert!(std::mem::size_of::<Node>() == 64);

impl Default for Node {
    fn default() -> Self {
        Node {
            segment: Segment::default(),
            lock: Held::EMPTY,
            parent: ROOT,
            below: [0, 0],
            child: NONE,
            table: NONE,
        }
    }
}

impl Node {
    fn is_unused(&self) -> bool {
        self.lock.owner.0 == NONE && self.below == [0, 0]
    }
}

/// A token that holds locks. Most owners hold one lock, which is kept inline.
#[derive(Clone, Debug)]
struct Owner {
    token: PackedToken,
    /// The earliest deadline among the owner's locks, as filed in the expiry index.
    earliest: u64,
    /// The neighbours in the list of owners filed under the same earliest deadline.
    prev: OwnerId,
    next: OwnerId,
    /// The owner's only lock (`Tagged(node, mode)`), `NONE` before its first, or `SPILLED`
    /// when it holds several, listed in `LockTable::owner_locks`.
    lock: Tagged,
    filed: bool,
}

const _: () = assert!(std::mem::size_of::<Option<Owner>>() == 48);

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
    /// The children's tables of nodes with two or more children, found by `Node::table`.
    tables: Vec<HashTable<NodeId>>,
    free_tables: Vec<u32>,
    /// The locks of paths that hold several (readers sharing a path), by node.
    crowded: HashMap<NodeId, Vec<Held>>,
    owners: Vec<Option<Owner>>,
    free_owners: Vec<OwnerId>,
    /// The locks of owners that hold several, by owner.
    owner_locks: HashMap<OwnerId, Vec<Tagged>>,
    /// Owner ids, found by hashing the owner's token.
    owner_index: HashTable<OwnerId>,
    hasher: DefaultHashBuilder,
    /// The first owner of each earliest deadline; the others follow through `Owner::next`.
    /// Grants made together share a deadline, so a million locks take few entries, and
    /// reclaiming costs what it reclaims.
    expiry: BTreeMap<u64, OwnerId>,
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
/// Bytes a lock costs beyond its node and owner: its share of the side maps and expiry index.
const LOCK_OVERHEAD: usize = 8;
/// Bytes an owner costs beyond its token: the slot and its index entry.
const OWNER_OVERHEAD: usize = std::mem::size_of::<Option<Owner>>() + 8;

impl LockTable {
    pub fn new() -> LockTable {
        LockTable {
            nodes: vec![Node::default()],
            free_nodes: Vec::new(),
            tables: Vec::new(),
            free_tables: Vec::new(),
            crowded: HashMap::new(),
            owners: Vec::new(),
            free_owners: Vec::new(),
            owner_locks: HashMap::new(),
            owner_index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            expiry: BTreeMap::new(),
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
        self.expiry.first_key_value().map(|(&deadline, _)| deadline)
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
        let token = PackedToken::new(token);
        let me = self.find_owner(&token);
        if items
            .iter()
            .any(|(mode, path)| self.is_blocked_for(me, *mode, path))
        {
            return None;
        }
        let fence = self.next_fence;
        let owner = me.unwrap_or_else(|| self.add_owner(token));
        self.grant_to(owner, now.saturating_add(ttl), fence, items);
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
        let owner = self.intern(PackedToken::new(token));
        self.grant_to(owner, deadline, fence, items)
    }

    fn grant_to(
        &mut self,
        owner: OwnerId,
        deadline: u64,
        fence: u64,
        items: &[(Mode, Path)],
    ) -> usize {
        self.raise_next_fence(fence.saturating_add(1));
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
        let Some(owner) = self.find_owner(&PackedToken::new(token)) else {
            return Vec::new();
        };
        let mut freed = Vec::new();
        match paths {
            None => {
                // Each removal takes the lock off the owner's list, so this ends.
                while let Some(&lock) = self.locks_of(owner).last() {
                    freed.extend(self.remove(lock.id(), owner, lock.mode()));
                }
            }
            Some(paths) => {
                for path in paths {
                    if let Some(node) = self.locate(path) {
                        for mode in Mode::ALL {
                            freed.extend(self.remove(node, owner, mode));
                        }
                    }
                }
            }
        }
        self.refile(owner);
        freed
    }

    /// Moves the deadline of every lock of `token` to `deadline`. Returns how many it moved.
    pub fn renew(&mut self, token: &Token, deadline: u64) -> usize {
        let Some(owner) = self.find_owner(&PackedToken::new(token)) else {
            return 0;
        };
        let locks = self.locks_of(owner).to_vec();
        for lock in &locks {
            if let Some(held) = self
                .held_mut(lock.id())
                .iter_mut()
                .find(|h| h.owner == Tagged::new(owner, lock.mode()))
            {
                held.deadline = deadline;
            }
        }
        self.refile(owner);
        locks.len()
    }

    /// Removes every lock whose deadline is not after `now`, and returns them: by owner, earlier
    /// deadlines first. Owners that share a deadline come in an order that depends on history
    /// and may differ between servers, so callers use the set, not the order (replicas apply an
    /// `EXPIRE` effect and reclaim the same set themselves).
    pub fn reclaim_expired(&mut self, now: u64) -> Vec<LockInfo> {
        let mut reclaimed = Vec::new();
        while let Some((&earliest, &owner)) = self.expiry.first_key_value() {
            if earliest > now {
                break;
            }
            let due: Vec<Tagged> = self
                .locks_of(owner)
                .iter()
                .copied()
                .filter(|lock| {
                    self.held_by(lock.id(), owner, lock.mode())
                        .is_some_and(|h| h.deadline <= now)
                })
                .collect();
            let before = reclaimed.len();
            reclaimed.extend(
                due.into_iter()
                    .filter_map(|lock| self.remove(lock.id(), owner, lock.mode())),
            );
            if reclaimed.len() == before {
                // Unreachable while the index mirrors the locks; unfiling the owner keeps the
                // loop finite even if it did not.
                self.unfile(owner);
            } else {
                self.refile(owner);
            }
        }
        reclaimed
    }

    /// Whether another owner's lock blocks `token` from taking `mode` on `path`. Expired locks
    /// count, so reclaim them first.
    pub fn is_blocked(&self, token: &Token, mode: Mode, path: &Path) -> bool {
        self.is_blocked_for(self.find_owner(&PackedToken::new(token)), mode, path)
    }

    /// Whether any lock at all (whoever holds it) blocks `mode` on `path`, in O(depth).
    pub fn conflicts(&self, mode: Mode, path: &Path) -> bool {
        self.is_blocked_for(None, mode, path)
    }

    /// `is_blocked` for the owner `me`, or for a token that holds nothing when `None`.
    fn is_blocked_for(&self, me: Option<OwnerId>, mode: Mode, path: &Path) -> bool {
        let mut node = ROOT;
        let mut segments = path.escaped_segments();
        loop {
            let blocks = self
                .held(node)
                .iter()
                .take_while(|h| h.mode().conflicts_with(mode))
                .any(|h| Some(h.owner()) != me);
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
        let me = token.and_then(|t| self.find_owner(&PackedToken::new(t)));
        let excluded = |owner: OwnerId| token.is_some() && Some(owner) == me;
        let mut found = BTreeSet::new();
        for (mode, path) in items {
            let mut node = ROOT;
            let mut key = Vec::with_capacity(path.key().len());
            let mut segments = path.escaped_segments();
            let reached = loop {
                for held in self.held(node) {
                    if held.mode().conflicts_with(*mode)
                        && !excluded(held.owner())
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
    /// order, the tree's links, the inline and spilled forms, and the absence of nodes that
    /// nothing needs.
    pub fn check_integrity(&self) -> Result<(), String> {
        let mut owned: BTreeMap<OwnerId, BTreeSet<Tagged>> = BTreeMap::new();
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
            if node.child != NONE && node.table != NONE {
                return Err(format!("node {id} has both an only child and a table"));
            }
            if node.table != NONE && self.tables[node.table as usize].is_empty() {
                return Err(format!("node {id} keeps an empty table"));
            }
            let spilled = node.lock.owner.0 == SPILLED;
            if spilled != self.crowded.contains_key(&id) || (spilled && self.held(id).len() < 2) {
                return Err(format!("the locks of node {id} are spilled wrongly"));
            }
            let mut below = [0u32; 2];
            for child in self.children(id) {
                let c = &self.nodes[child as usize];
                if c.parent != id || self.child(id, &c.segment) != Some(child) {
                    return Err(format!("node {child} is not linked to its parent {id}"));
                }
                for mode in Mode::ALL {
                    below[mode.index()] += c.below[mode.index()]
                        + self.held(child).iter().filter(|h| h.mode() == mode).count() as u32;
                }
                stack.push(child);
            }
            if below != node.below {
                return Err(format!(
                    "marks at node {id} are {:?}, expected {below:?}",
                    node.below
                ));
            }
            let order: Vec<(Mode, &PackedToken)> = self
                .held(id)
                .iter()
                .map(|h| (h.mode(), &self.owner(h.owner()).token))
                .collect();
            let ascending = |a: &(Mode, &PackedToken), b: &(Mode, &PackedToken)| {
                a.0.cmp(&b.0).then_with(|| a.1.cmp_text(b.1)).is_lt()
            };
            if !order.windows(2).all(|w| ascending(&w[0], &w[1])) {
                return Err(format!("locks at node {id} are not in canonical order"));
            }
            for held in self.held(id) {
                len += 1;
                let fence = held.fence;
                if fence == 0 || fence >= self.next_fence {
                    return Err(format!("fence {fence} is not below the counter"));
                }
                owned
                    .entry(held.owner())
                    .or_default()
                    .insert(Tagged::new(id, held.mode()));
            }
        }
        if len != self.len || live != self.live_nodes || segment_bytes != self.segment_bytes {
            return Err("the counts disagree with the tree".into());
        }
        if self.crowded.keys().any(|&node| {
            self.nodes
                .get(node as usize)
                .is_none_or(|n| n.lock.owner.0 != SPILLED)
        }) {
            return Err("a spilled lock list belongs to no node".into());
        }
        let mut expected = BTreeSet::new();
        let mut token_bytes = 0;
        for (id, slot) in self.owners.iter().enumerate() {
            let Some(owner) = slot else { continue };
            let id = id as OwnerId;
            token_bytes += owner.token.heap_bytes();
            let spilled = owner.lock.0 == SPILLED;
            if spilled != self.owner_locks.contains_key(&id)
                || (spilled && self.locks_of(id).len() < 2)
            {
                return Err(format!(
                    "owner {:?}'s locks are spilled wrongly",
                    owner.token
                ));
            }
            let listed: BTreeSet<Tagged> = self.locks_of(id).iter().copied().collect();
            if listed.len() != self.locks_of(id).len()
                || owned.remove(&id).unwrap_or_default() != listed
            {
                return Err(format!(
                    "owner {:?}'s list disagrees with the tree",
                    owner.token
                ));
            }
            if self.find_owner(&owner.token) != Some(id) {
                return Err(format!("owner {:?} is not indexed", owner.token));
            }
            let earliest = listed
                .iter()
                .filter_map(|l| self.held_by(l.id(), id, l.mode()).map(|h| h.deadline))
                .min();
            match earliest {
                Some(earliest) if owner.filed && earliest == owner.earliest => {
                    expected.insert((earliest, id));
                }
                _ => return Err(format!("owner {:?} is filed wrongly", owner.token)),
            }
        }
        if !owned.is_empty() {
            return Err("locks held by owners that do not exist".into());
        }
        let mut filed = BTreeSet::new();
        for (&deadline, &head) in &self.expiry {
            let (mut prev, mut id) = (NONE, head);
            while id != NONE {
                let Some(owner) = self.owners.get(id as usize).and_then(Option::as_ref) else {
                    return Err(format!("the expiry list of {deadline} holds a free owner"));
                };
                if owner.prev != prev || !filed.insert((deadline, id)) {
                    return Err(format!("the expiry list of {deadline} is linked wrongly"));
                }
                (prev, id) = (id, owner.next);
            }
        }
        if expected != filed || token_bytes != self.token_bytes {
            return Err("the expiry index disagrees with the owners".into());
        }
        Ok(())
    }

    fn owner(&self, id: OwnerId) -> &Owner {
        // Ids come from the table's own structures, which only hold live owners.
        self.owners[id as usize].as_ref().expect("a live owner id")
    }

    fn owner_mut(&mut self, id: OwnerId) -> &mut Owner {
        self.owners[id as usize].as_mut().expect("a live owner id")
    }

    fn find_owner(&self, token: &PackedToken) -> Option<OwnerId> {
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
    fn intern(&mut self, token: PackedToken) -> OwnerId {
        match self.find_owner(&token) {
            Some(id) => id,
            None => self.add_owner(token),
        }
    }

    /// A new owner for a token that has none.
    fn add_owner(&mut self, token: PackedToken) -> OwnerId {
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
        let (owners, hasher) = (&self.owners, &self.hasher);
        self.owner_index.insert_unique(hash, id, |&other| {
            let token = owners[other as usize].as_ref().map(|o| o.token.stored());
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
        let earliest = self
            .locks_of(id)
            .iter()
            .filter_map(|l| self.held_by(l.id(), id, l.mode()).map(|h| h.deadline))
            .min();
        if owner.filed && earliest == Some(owner.earliest) {
            return;
        }
        self.unfile(id);
        match earliest {
            Some(earliest) => self.file(id, earliest),
            None => {
                let Some(owner) = self.owners[id as usize].take() else {
                    return;
                };
                let hash = self.hasher.hash_one(owner.token.stored());
                if let Ok(entry) = self.owner_index.find_entry(hash, |&other| other == id) {
                    entry.remove();
                }
                self.token_bytes -= owner.token.heap_bytes();
                self.free_owners.push(id);
            }
        }
    }

    /// Puts an unfiled owner first in the list of `earliest`.
    fn file(&mut self, id: OwnerId, earliest: u64) {
        let next = self.expiry.insert(earliest, id).unwrap_or(NONE);
        if next != NONE {
            self.owner_mut(next).prev = id;
        }
        let owner = self.owner_mut(id);
        owner.earliest = earliest;
        owner.prev = NONE;
        owner.next = next;
        owner.filed = true;
    }

    /// Takes an owner out of its expiry list, if it is in one.
    fn unfile(&mut self, id: OwnerId) {
        let owner = self.owner_mut(id);
        if !owner.filed {
            return;
        }
        let (earliest, prev, next) = (owner.earliest, owner.prev, owner.next);
        owner.filed = false;
        owner.prev = NONE;
        owner.next = NONE;
        if prev != NONE {
            self.owner_mut(prev).next = next;
        } else if next != NONE {
            self.expiry.insert(earliest, next);
        } else {
            self.expiry.remove(&earliest);
        }
        if next != NONE {
            self.owner_mut(next).prev = prev;
        }
    }

    /// The locks an owner holds, as `Tagged(node, mode)`.
    fn locks_of(&self, id: OwnerId) -> &[Tagged] {
        let owner = self.owner(id);
        match owner.lock.0 {
            NONE => &[],
            SPILLED => self.owner_locks.get(&id).map_or(&[], Vec::as_slice),
            _ => std::slice::from_ref(&owner.lock),
        }
    }

    fn add_owner_lock(&mut self, id: OwnerId, lock: Tagged) {
        let Some(owner) = self.owners[id as usize].as_mut() else {
            return;
        };
        match owner.lock.0 {
            NONE => owner.lock = lock,
            SPILLED => {
                let all = self.owner_locks.entry(id).or_default();
                // Exact growth: nearly every owner holds one or two locks, and a default
                // growth would reserve four.
                all.reserve_exact(1);
                all.push(lock);
            }
            _ => {
                self.owner_locks.insert(id, vec![owner.lock, lock]);
                owner.lock = Tagged(SPILLED);
            }
        }
    }

    fn remove_owner_lock(&mut self, id: OwnerId, lock: Tagged) {
        let Some(owner) = self.owners[id as usize].as_mut() else {
            return;
        };
        if owner.lock == lock {
            owner.lock = Tagged(NONE);
        } else if owner.lock.0 == SPILLED {
            if let Some(all) = self.owner_locks.get_mut(&id) {
                // From the end: releasing everything takes the last lock each time, which keeps
                // it linear in the owner's locks.
                if let Some(i) = all.iter().rposition(|&l| l == lock) {
                    all.swap_remove(i);
                }
                if let [only] = all[..] {
                    owner.lock = only;
                    self.owner_locks.remove(&id);
                }
            }
        }
    }

    /// The locks on `node`'s exact path, in canonical order.
    fn held(&self, node: NodeId) -> &[Held] {
        let slot = &self.nodes[node as usize].lock;
        match slot.owner.0 {
            NONE => &[],
            SPILLED => self.crowded.get(&node).map_or(&[], Vec::as_slice),
            _ => std::slice::from_ref(slot),
        }
    }

    fn held_mut(&mut self, node: NodeId) -> &mut [Held] {
        let slot = &mut self.nodes[node as usize].lock;
        match slot.owner.0 {
            NONE => &mut [],
            SPILLED => self
                .crowded
                .get_mut(&node)
                .map_or(&mut [], Vec::as_mut_slice),
            _ => std::slice::from_mut(slot),
        }
    }

    fn held_by(&self, node: NodeId, owner: OwnerId, mode: Mode) -> Option<&Held> {
        let wanted = Tagged::new(owner, mode);
        self.held(node).iter().find(|h| h.owner == wanted)
    }

    fn insert_held(&mut self, node: NodeId, at: usize, held: Held) {
        let slot = &mut self.nodes[node as usize].lock;
        match slot.owner.0 {
            NONE => *slot = held,
            SPILLED => {
                let all = self.crowded.entry(node).or_default();
                all.reserve_exact(1);
                all.insert(at, held);
            }
            _ => {
                let mut all = Vec::with_capacity(2);
                all.push(*slot);
                all.insert(at, held);
                self.crowded.insert(node, all);
                *slot = Held {
                    owner: Tagged(SPILLED),
                    ..Held::EMPTY
                };
            }
        }
    }

    fn remove_held(&mut self, node: NodeId, at: usize) -> Option<Held> {
        let slot = &mut self.nodes[node as usize].lock;
        match slot.owner.0 {
            NONE => None,
            SPILLED => {
                let all = self.crowded.get_mut(&node)?;
                let removed = (at < all.len()).then(|| all.remove(at));
                if let [only] = all[..] {
                    *slot = only;
                    self.crowded.remove(&node);
                }
                removed
            }
            _ => (at == 0).then(|| std::mem::replace(slot, Held::EMPTY)),
        }
    }

    fn children(&self, node: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        let node = &self.nodes[node as usize];
        let only = (node.child != NONE).then_some(node.child);
        let table = (node.table != NONE).then(|| self.tables[node.table as usize].iter().copied());
        only.into_iter().chain(table.into_iter().flatten())
    }

    fn child(&self, node: NodeId, segment: &[u8]) -> Option<NodeId> {
        let node = &self.nodes[node as usize];
        if node.child != NONE {
            return (*self.nodes[node.child as usize].segment == *segment).then_some(node.child);
        }
        if node.table == NONE {
            return None;
        }
        let hash = self.hasher.hash_one(segment);
        self.tables[node.table as usize]
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
                let id = self.nodes.len() as NodeId;
                assert!(id < MAX_ID, "too many paths in one project");
                self.nodes.push(fresh);
                id
            }
        };
        self.live_nodes += 1;
        self.segment_bytes += segment.len();
        self.add_child(node, id);
        id
    }

    fn add_child(&mut self, parent: NodeId, child: NodeId) {
        let p = &mut self.nodes[parent as usize];
        if p.child == NONE && p.table == NONE {
            p.child = child;
            return;
        }
        let mut moved = None;
        if p.table == NONE {
            p.table = match self.free_tables.pop() {
                Some(slot) => slot,
                None => {
                    self.tables.push(HashTable::new());
                    (self.tables.len() - 1) as u32
                }
            };
            moved = Some(std::mem::replace(&mut p.child, NONE));
        }
        let slot = p.table as usize;
        let (nodes, hasher, tables) = (&self.nodes, &self.hasher, &mut self.tables);
        let hash_of = |&c: &NodeId| hasher.hash_one(&*nodes[c as usize].segment);
        for c in moved.into_iter().chain([child]) {
            tables[slot].insert_unique(hash_of(&c), c, hash_of);
        }
    }

    fn remove_child(&mut self, parent: NodeId, child: NodeId, segment: &[u8]) {
        let p = &mut self.nodes[parent as usize];
        if p.child == child {
            p.child = NONE;
            return;
        }
        if p.table == NONE {
            return;
        }
        let slot = p.table;
        let table = &mut self.tables[slot as usize];
        if let Ok(entry) = table.find_entry(self.hasher.hash_one(segment), |&c| c == child) {
            entry.remove();
        }
        // A table lives until its node has no child left; converting back at one child would
        // allocate and free a table each time a second child comes and goes.
        if table.is_empty() {
            *table = HashTable::new();
            p.table = NONE;
            self.free_tables.push(slot);
        }
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
            deadline,
            fence,
            owner: Tagged::new(owner, mode),
        };
        let mut node = ROOT;
        for segment in path.escaped_segments() {
            node = self.child_or_insert(node, segment);
        }
        if let Some(existing) = self
            .held_mut(node)
            .iter_mut()
            .find(|h| h.owner == held.owner)
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
        let locks = self.held(node);
        let position = locks
            .iter()
            .position(|h| {
                h.mode()
                    .cmp(&mode)
                    .then_with(|| self.owner(h.owner()).token.cmp_text(token))
                    .is_gt()
            })
            .unwrap_or(locks.len());
        self.insert_held(node, position, held);
        self.add_owner_lock(owner, Tagged::new(node, mode));
        self.len += 1;
        true
    }

    /// Removes one lock and every node that only it needed. The caller refiles the owner.
    fn remove(&mut self, node: NodeId, owner: OwnerId, mode: Mode) -> Option<LockInfo> {
        let wanted = Tagged::new(owner, mode);
        let at = self.held(node).iter().position(|h| h.owner == wanted)?;
        let held = self.remove_held(node, at)?;
        let info = self.info_owned(self.key_of(node), &held);
        let mut current = node;
        while current != ROOT {
            let parent = self.nodes[current as usize].parent;
            self.nodes[parent as usize].below[mode.index()] -= 1;
            if self.nodes[current as usize].is_unused() {
                self.unlink_node(current);
            }
            current = parent;
        }
        self.remove_owner_lock(owner, Tagged::new(node, mode));
        self.len -= 1;
        Some(info)
    }

    fn unlink_node(&mut self, id: NodeId) {
        let node = std::mem::take(&mut self.nodes[id as usize]);
        self.remove_child(node.parent, id, &node.segment);
        self.live_nodes -= 1;
        self.segment_bytes -= node.segment.len();
        self.free_nodes.push(id);
    }

    /// The trie key of a node, built by walking up to the root twice: once to size it, so that
    /// it takes one allocation, and once to fill it from the end.
    fn key_of(&self, node: NodeId) -> Vec<u8> {
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

    fn info(&self, key: &[u8], held: &Held) -> LockInfo {
        self.info_owned(key.to_vec(), held)
    }

    fn info_owned(&self, key: Vec<u8>, held: &Held) -> LockInfo {
        LockInfo {
            path: Path::from_trusted_key(key),
            mode: held.mode(),
            token: self.owner(held.owner()).token.to_token(),
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

    /// Visits every lock at and beneath `node` in tree order: a node's locks, then its children
    /// in byte order of their segments. `key` is the node's trie key on entry and on return.
    fn walk(&self, node: NodeId, key: &mut Vec<u8>, visit: &mut dyn FnMut(&Self, &[u8], &Held)) {
        for held in self.held(node) {
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
        let mut children: Vec<NodeId> = self.children(node).collect();
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
        for child in self.children(node) {
            let c = &self.nodes[child as usize];
            let here = self.held(child);
            let relevant_here = here.iter().any(|h| h.mode().conflicts_with(mode));
            if !relevant_here && blocking_count(mode, c.below) == 0 {
                continue;
            }
            let length = key.len();
            push_segment(key, &c.segment);
            for held in here {
                if held.mode().conflicts_with(mode)
                    && !excluded(held.owner())
                    && held.deadline > now
                {
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
