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
//! whose deadline is not after `now` is expired. Expired locks linger until something reclaims
//! them, a few owners at a time, so that no call pays for a mass expiry: the reading methods
//! filter them by `now` (a replica must hide them without reclaiming them), and the deciding
//! methods count them, so a caller first reclaims what is in the way of its request
//! ([`LockTable::reclaim_blockers`]) and its own token's due locks, as [`crate::Project`] does.
//!
//! Each part owns its state, one file each:
//!
//! * `ids`: node and owner ids, the sentinels sharing their bits, the mode tag.
//! * `tree`: the node arena, children, the locks on a path, intention marks, keys and walks.
//! * `owners`: owner interning and each owner's list of locks.
//! * `expiry`: the deadline index over owners, and reclaiming what is due.
//! * `conflicts`: the read-only queries (is it blocked, who blocks it, what lies beneath).
//! * `integrity`: `check_integrity`, apart from what it checks.
//! * `chunks`, `rehash`, `idmap`, `sorted`: the storage under them, which never moves what it
//!   holds and grows or shrinks a small step at a time, so that no call pauses Redis for long at
//!   any size.
//!
//! Copies share that storage ([`LockTable::share`], what `COPY` does). Every part of it is a
//! vector of small pieces (chunks of the arenas, segments of the hash tables, runs of the
//! expiry index) that can sit behind `Arc`s, so a copy costs a step per piece, about one per
//! 2,048 nodes or owners or 1,024 index entries, and the first write to a piece that the other
//! copy still holds copies that piece alone. `COPY` of a project of ten million locks therefore
//! takes some 20,000 steps (under a millisecond), and no write after it copies more than one
//! piece per element it writes: a chunk per node on its path, one of owners, one segment of
//! each hash table and one run of the expiry index. The
//! arenas' chunks stay plain vectors until they are first shared, so a table that was never
//! copied pays nothing for this on its common path.

mod chunks;
mod conflicts;
mod expiry;
mod idmap;
mod ids;
mod integrity;
mod notes;
mod owners;
mod rehash;
mod sorted;
mod tree;

use hashbrown::DefaultHashBuilder;

use crate::lock::{LockInfo, Mode, Note, PackedToken, Token};
use crate::path::Path;
use chunks::Chunks;
use idmap::IdMap;
use ids::{NodeId, OwnerId, Tagged, ROOT};
use notes::Notes;
use owners::Owner;
use rehash::LinearTable;
use sorted::SortedRuns;
use tree::{Held, Node};

/// The locks of one project. `clone` copies what the table does not share with a copy;
/// [`LockTable::share`] is the copy that costs a step per chunk.
#[derive(Clone, Debug)]
pub struct LockTable {
    nodes: Chunks<Node>,
    free_nodes: Chunks<NodeId>,
    /// The children's tables of nodes with two or more children, found by `Node::table`.
    tables: Chunks<LinearTable<NodeId>>,
    free_tables: Chunks<u32>,
    /// The locks of paths that hold several (readers sharing a path), by node.
    crowded: IdMap<Vec<Held>>,
    owners: Chunks<Option<Owner>>,
    free_owners: Chunks<OwnerId>,
    /// The locks of owners that hold several, by owner.
    owner_locks: IdMap<Vec<Tagged>>,
    /// Owner ids, found by hashing the owner's token.
    owner_index: LinearTable<OwnerId>,
    hasher: DefaultHashBuilder,
    /// The first owner of each earliest deadline; the others follow through `Owner::next`.
    /// Grants made together share a deadline, so a million locks take few entries, and
    /// reclaiming costs what it reclaims.
    expiry: SortedRuns<u64, OwnerId>,
    /// The notes of the locks that have one, by lock.
    notes: Notes,
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
        let mut table = LockTable {
            nodes: Chunks::default(),
            free_nodes: Chunks::default(),
            tables: Chunks::default(),
            free_tables: Chunks::default(),
            crowded: IdMap::default(),
            owners: Chunks::default(),
            free_owners: Chunks::default(),
            owner_locks: IdMap::default(),
            owner_index: LinearTable::default(),
            hasher: DefaultHashBuilder::default(),
            expiry: SortedRuns::default(),
            notes: Notes::default(),
            next_fence: 1,
            len: 0,
            live_nodes: 0,
            segment_bytes: 0,
            token_bytes: 0,
        };
        table.nodes.push(Node::default());
        table
    }

    /// A copy of the table that shares all of its storage with this one, in a step per chunk
    /// (some 20,000 at ten million locks) rather than one per lock. Either side's first write
    /// to a shared chunk copies that chunk alone, so the two stay independent. It takes `&mut`
    /// because the arenas' chunks this table owns outright become shared.
    pub fn share(&mut self) -> LockTable {
        LockTable {
            nodes: self.nodes.share(),
            free_nodes: self.free_nodes.share(),
            tables: self.tables.share(),
            free_tables: self.free_tables.share(),
            // The hash tables and the expiry index always keep their pieces behind `Arc`s
            // (children's tables sit inside the arena's chunks, where a copy of a chunk must not
            // copy their entries), so a clone of them is already a step per piece.
            crowded: self.crowded.clone(),
            owners: self.owners.share(),
            free_owners: self.free_owners.share(),
            owner_locks: self.owner_locks.clone(),
            owner_index: self.owner_index.clone(),
            hasher: self.hasher.clone(),
            expiry: self.expiry.clone(),
            notes: self.notes.clone(),
            next_fence: self.next_fence,
            len: self.len,
            live_nodes: self.live_nodes,
            segment_bytes: self.segment_bytes,
            token_bytes: self.token_bytes,
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
            + self.notes.bytes()
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
        self.grant_to(owner, now.saturating_add(ttl), fence, items, None);
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
        self.grant_noted(token, deadline, fence, items, None)
    }

    /// [`LockTable::grant`] with a note: `Some` keeps it with every lock the grant takes or
    /// refreshes, in place of the note they had (an empty note takes theirs away); `None` leaves
    /// the notes of refreshed locks as they were, and new locks without one.
    pub fn grant_noted(
        &mut self,
        token: &Token,
        deadline: u64,
        fence: u64,
        items: &[(Mode, Path)],
        note: Option<&Note>,
    ) -> usize {
        let owner = self.intern(PackedToken::new(token));
        self.grant_to(owner, deadline, fence, items, note)
    }

    fn grant_to(
        &mut self,
        owner: OwnerId,
        deadline: u64,
        fence: u64,
        items: &[(Mode, Path)],
        note: Option<&Note>,
    ) -> usize {
        self.raise_next_fence(fence.saturating_add(1));
        let mut added = 0;
        for (mode, path) in items {
            added += usize::from(self.insert(path, owner, *mode, deadline, fence));
            if let Some(note) = note {
                self.note_lock(path, Tagged::new(owner, *mode), note);
            }
        }
        self.refile(owner);
        added
    }

    /// Keeps `note` with the lock `owner` (tagged with its mode) holds on `path`, or takes its
    /// note away when `note` is empty. A second walk down the path, paid only by noted grants.
    fn note_lock(&mut self, path: &Path, owner: Tagged, note: &Note) {
        let Some(node) = self.locate(path) else {
            return;
        };
        if note.is_empty() {
            self.notes.remove(node, owner);
        } else {
            self.notes.set(node, owner, note);
        }
    }

    /// Frees `token`'s locks at `paths` (every mode held there), or all of its locks when
    /// `paths` is `None`. Returns the locks freed.
    pub fn release(&mut self, token: &Token, paths: Option<&[Path]>) -> Vec<LockInfo> {
        match self.find_owner(&PackedToken::new(token)) {
            Some(owner) => self.release_owner(owner, paths, true).1,
            None => Vec::new(),
        }
    }

    /// [`LockTable::release`] that only counts what it freed, for callers that need no more
    /// (a replica applying a `RELEASE`, a release nobody waits behind).
    pub fn release_count(&mut self, token: &Token, paths: Option<&[Path]>) -> usize {
        match self.find_owner(&PackedToken::new(token)) {
            Some(owner) => self.release_owner(owner, paths, false).0,
            None => 0,
        }
    }

    /// Frees `owner`'s locks at `paths`, or all of them: how many, and their descriptions when
    /// `describe` is set.
    fn release_owner(
        &mut self,
        owner: OwnerId,
        paths: Option<&[Path]>,
        describe: bool,
    ) -> (usize, Vec<LockInfo>) {
        let mut count = 0;
        let mut freed = Vec::new();
        let mut take = |table: &mut LockTable, node: NodeId, mode: Mode| {
            if describe {
                let info = table.remove(node, owner, mode);
                count += usize::from(info.is_some());
                freed.extend(info);
            } else {
                count += usize::from(table.remove_silently(node, owner, mode));
            }
        };
        match paths {
            None => {
                // Each removal takes the lock off the owner's list, so this ends.
                while let Some(&lock) = self.locks_of(owner).last() {
                    take(self, lock.id(), lock.mode());
                }
            }
            Some(paths) => {
                for path in paths {
                    if let Some(node) = self.locate(path) {
                        for mode in Mode::ALL {
                            take(self, node, mode);
                        }
                    }
                }
            }
        }
        self.refile(owner);
        (count, freed)
    }

    /// Moves the deadline of every lock of `token` to `deadline`. Returns how many it moved.
    pub fn renew(&mut self, token: &Token, deadline: u64) -> usize {
        match self.find_owner(&PackedToken::new(token)) {
            Some(owner) => self.renew_owner(owner, deadline),
            None => 0,
        }
    }

    fn renew_owner(&mut self, owner: OwnerId, deadline: u64) -> usize {
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

    /// The number of nodes in use: locked paths and their ancestors. Zero once every lock is
    /// gone, which is how tests show that a released lock leaves nothing behind.
    pub fn node_count(&self) -> usize {
        self.live_nodes + usize::from(!self.nodes[ROOT as usize].is_unused())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_copy_holds_the_same_chunks_until_written() {
        let mut table = LockTable::new();
        let token = Token::new(b"t").expect("a token");
        for i in 0..10_000 {
            let path = format!("/d{}/f{i}", i % 100);
            let path = Path::parse(path.as_bytes(), &Default::default()).expect("a path");
            table.grant(&token, 1_000 + i, i + 1, &[(Mode::Write, path)]);
        }
        let mut copy = table.share();
        let chunks = table.nodes.shared_with(&copy.nodes);
        assert!(chunks >= 3, "{chunks}");
        // Releasing one lock on the copy writes to the chunks of its node and of its ancestors
        // (the folder and the root, both in the first chunk), not to the others.
        let path = Path::parse(b"/d7/f9907", &Default::default()).expect("a path");
        assert_eq!(copy.release(&token, Some(&[path])).len(), 1);
        assert_eq!(table.nodes.shared_with(&copy.nodes), chunks - 2);
        assert_eq!(table.len(), copy.len() + 1);
        copy.check_integrity().expect("the copy's integrity");
        table.check_integrity().expect("the original's integrity");
    }
}
