//! The lock table of one project: where `WRITE /A` is decided.
//!
//! Every locked path has a node in a tree of path segments, and so has every ancestor of a
//! locked path where something else is held or branches off: the segments a path adds beneath
//! the tree's nodes are one node, as a radix tree compresses its paths, until a lock or a branch
//! on one of them splits it (see `tree::Node`). A node holds the locks taken on its exact path
//! and, as Gray's intention marks, the number of `READ` and `WRITE` locks held strictly beneath
//! it. A request
//! for `mode` on `path` by `token` is then decided by looking at O(depth) nodes: the locks held
//! on `path` and on each of its ancestors, and the marks on `path`'s own node (see `conflicts`
//! for how the marks are read when the locks beneath are the requester's own or have lapsed).
//!
//! Nodes live in an arena. A node with one child points at it directly; a node with more finds
//! them through a hash table of child ids keyed by the child's first segment, so a step down the
//! tree is one comparison or one hash of one segment, and a segment is stored once. Owners
//! (tokens) are interned in a hash table too; a lock refers to its owner by id.
//!
//! An owner is one lease (`owners`): its locks share its deadline, so `RENEW` moves one number
//! whatever the owner holds, and expiry is indexed per owner (`expiry`). An owner with many
//! locks is big (`big`): its locks are counted per owner on their ancestors, so its own commands
//! cost the depth of their paths, not its size, and when it is released whole or lapses it is
//! buried in one step and its locks are freed in the background (`free_some`), as Redis's lazy
//! free does with a large value. Every command is thereby independent of how many locks the
//! project and the owner hold.
//!
//! Memory is what a million locks cost, so the common case is kept inline and the rare one
//! spills: a node (40 bytes) holds its segment, its one lock and its one child, and only a node
//! with children has a fork beside it (its marks, bound and children's table), unless its only
//! child is a leaf, whose own locks are then its marks (a folder of one locked file); an owner
//! holds its one lock and, when short or a canonical UUID, its token. Paths with several locks
//! and owners with several locks keep them in side maps. Free slots are handed out lowest first
//! (`free`), so that the arenas' tails empty as locks go and `trim_some` gives them back.
//!
//! Time never comes from inside: every method that needs it takes `now` in milliseconds. A lock
//! whose owner's deadline is not after `now` has lapsed: it blocks nobody and is listed nowhere.
//! Lapsed locks linger until something reclaims them, a few owners at a time, so that no call
//! pays for a mass expiry: the reading methods filter them by `now` (a replica must hide them
//! without reclaiming them), and a request reclaims the lapsed owners it meets in its way (a
//! bounded number), leaving the rest to the expiry cycle. A request may therefore be granted
//! over lapsed locks still stored beneath its path; persistence and digests carry only live
//! locks ([`Tree::live`]), so no payload ever holds two conflicting locks.
//!
//! Each part owns its state, one file each:
//!
//! * `ids`: node and owner ids, the sentinels sharing their bits, the mode tag.
//! * `tree`: the node arena, children, the locks on a path, intention marks, keys and walks.
//! * `owners`: owner interning, leases, and each owner's list of locks.
//! * `big`: big owners' sets and marks, burying and the background freeing.
//! * `expiry`: the deadline index over owners, and reclaiming what lapsed.
//! * `conflicts`: deciding a request, and the read-only queries.
//! * `integrity`: `check_integrity`, apart from what it checks.
//! * `defrag`: moving all of that storage for the server's active defragmentation, through a
//!   mover the caller hands in, a bounded piece at a time.
//! * `chunks`, `rehash`, `idmap`, `sorted`, `free`: the storage under them, which never moves
//!   what it holds and grows or shrinks a small step at a time, so that no call pauses Redis for
//!   long at any size.
//!
//! Copies share that storage ([`Tree::share`], what `COPY` does). Every part of it is a
//! vector of small pieces (chunks of the arenas, segments of the hash tables, runs of the
//! expiry index) that can sit behind `Arc`s, so a copy costs a step per piece, about one per
//! 2,048 nodes or owners or 1,024 index entries, and the first write to a piece that the other
//! copy still holds copies that piece alone. `COPY` of a project of ten million locks therefore
//! takes some 20,000 steps (under a millisecond), and no write after it copies more than one
//! piece per element it writes. The arenas' chunks stay plain vectors until they are first
//! shared, so a table that was never copied pays nothing for this on its common path.

mod big;
mod chunks;
mod compact;
mod conflicts;
mod crowd;
mod cuts;
mod defrag;
pub(crate) mod dense;
mod expiry;
mod form;
mod free;
mod idmap;
mod ids;
mod integrity;
mod notes;
mod owners;
mod rehash;
mod segment;
mod sorted;
mod tree;

pub(crate) use defrag::move_box as defrag_box;
#[cfg(test)]
pub(crate) use defrag::tests::MoveAll;
pub use defrag::{Progress, Relocate};
pub use form::LockTable;

use std::collections::VecDeque;

use hashbrown::DefaultHashBuilder;

use crate::alloc::allocation;
use crate::lock::{Freed, Mode, Note, PackedToken, Token};
use crate::path::Path;
use big::{BigMark, BigOwner};
// The arenas' storage serves the module too: its expiry schedule keeps an entry per project
// key in one, so that it never grows or shrinks in one step at any number of keys.
pub use chunks::Chunks;
use conflicts::{Verdict, SEARCH_BUDGET};
use crowd::Crowd;
use cuts::Cuts;
pub use free::FreeSlots;
use idmap::IdMap;
use ids::{NodeId, OwnerId, Tagged, ROOT};
use notes::Notes;
use owners::Owner;
use rehash::LinearTable;
use sorted::SortedRuns;
use tree::{Fork, Node};

/// The locks of one project in the tree form. `clone` copies what the table does not share
/// with a copy; [`Tree::share`] is the copy that costs a step per chunk.
#[derive(Clone, Debug)]
pub(crate) struct Tree {
    nodes: Chunks<Node>,
    free_nodes: FreeSlots,
    /// The forks of nodes with children (marks, bound, children's table), by `Node::fork`; a
    /// node whose only child is a leaf has none.
    forks: Chunks<Fork>,
    free_forks: FreeSlots,
    /// The children's tables of nodes with two or more children, found by `Fork::table`.
    tables: Chunks<LinearTable<NodeId>>,
    free_tables: FreeSlots,
    /// The locks of paths that several hold (readers sharing a path), by node.
    crowded: IdMap<Crowd>,
    owners: Chunks<Option<Owner>>,
    free_owners: FreeSlots,
    /// The locks of small owners that hold several, by owner.
    owner_locks: IdMap<Vec<Tagged>>,
    /// Owner ids, found by hashing the owner's token. Buried owners are not in it.
    owner_index: LinearTable<OwnerId>,
    hasher: DefaultHashBuilder,
    /// The first owner of each deadline; the others follow through `Owner::next`. Grants made
    /// together share a deadline, so a million locks take few entries, and reclaiming costs
    /// what it reclaims.
    expiry: SortedRuns<u64, OwnerId>,
    /// Big owners, by owner id (see `big`).
    bigs: IdMap<BigOwner>,
    /// By node, the big owners with locks strictly beneath it and how many, sorted by owner.
    big_marks: IdMap<Vec<BigMark>>,
    big_mark_count: usize,
    /// Locks in big owners' sets, buried or not, for the memory estimate.
    big_locks: usize,
    /// The notes of the locks that have one, by lock.
    notes: Notes,
    /// Where grants passed over conflicting locks, by node (see `cuts`).
    cuts: IdMap<Cuts>,
    /// Buried owners whose locks are still being freed, oldest first.
    graveyard: VecDeque<OwnerId>,
    /// Locks of buried owners still stored; they are not in `len`.
    buried_locks: usize,
    /// The most locks a small owner holds (`owners::SMALL`, lower in tests that want big
    /// owners among a few locks).
    small: usize,
    /// The most locks of the compact form this table turns back into when it shrinks to half
    /// of it (`form`); 0 keeps it a tree.
    compact: usize,
    next_fence: u64,
    /// Locks of owners that are not buried, lapsed or not.
    len: usize,
    live_nodes: usize,
    /// The bytes of the nodes' segments, and those of them kept on the heap (longer than a
    /// node keeps inline), as the allocator rounds them.
    segment_bytes: usize,
    segment_heap: usize,
    token_bytes: usize,
    /// The heap bytes of the hash tables that live inside other structures (nodes' children,
    /// big owners' sets, crowds' readers), kept as they change (`LinearTable::heap_bytes`).
    inner_bytes: usize,
}

/// One request to acquire: who asks, for how long, what, and the note kept with what it is
/// granted (see [`LockTable::grant_noted`]).
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub token: &'a Token,
    /// The token was just made by [`Token::generate`]: 122 random bits that nobody holds yet,
    /// so the owners' index is not searched for it (at a million owners that search is a cache
    /// miss or two, a tenth of the command).
    pub generated: bool,
    pub ttl: u64,
    pub items: &'a [(Mode, Path)],
    pub note: Option<&'a Note>,
}

/// What an acquire did: the fence of its grant, or `None` when a live lock of another owner
/// blocks it, and the lapsed owners it reclaimed on the way (its own, and those in its way).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acquired {
    pub fence: Option<u64>,
    pub lapsed: Freed,
}

/// What a release did: how many locks it freed and where waiters they held up are to be looked
/// for, and the lapsed owners it reclaimed (its own, when its lease had lapsed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Released {
    pub count: usize,
    pub freed: Freed,
    pub lapsed: Freed,
}

impl Default for Tree {
    fn default() -> Self {
        Tree::new()
    }
}

/// Lapsed owners a request reclaims among those it met in its way, besides big ones (a step
/// each): enough for the common case, bounded so that a request meeting a crowd of lapsed
/// owners costs a fixed share of their reclaiming, the expiry cycle doing the rest.
const MET_RECLAIMED: usize = 32;

/// The lease a table keeps for a deadline: the deadline itself, but 1 for 0. No server grants a
/// lease of 0 (it would lapse at time 0), only a forged effect or payload could ask for one, and
/// 1 has lapsed just the same; a lease of 0 is what marks an owner unfiled (see `Owner`), so
/// every deadline that enters a table, in either form, passes here once, where it enters:
/// `LockTable`'s grants and renewals before they choose a form, an acquire's deadline where
/// either form computes it, a payload's owner in the dense loader. Inside the table it is a
/// lease already (`Tree::file` only checks that, in debug builds).
pub(super) fn lease(deadline: u64) -> u64 {
    deadline.max(1)
}

impl Tree {
    pub fn new() -> Tree {
        let mut table = Tree {
            nodes: Chunks::default(),
            free_nodes: FreeSlots::default(),
            forks: Chunks::default(),
            free_forks: FreeSlots::default(),
            tables: Chunks::default(),
            free_tables: FreeSlots::default(),
            crowded: IdMap::default(),
            owners: Chunks::default(),
            free_owners: FreeSlots::default(),
            owner_locks: IdMap::default(),
            owner_index: LinearTable::default(),
            hasher: DefaultHashBuilder::default(),
            expiry: SortedRuns::default(),
            bigs: IdMap::default(),
            big_marks: IdMap::default(),
            big_mark_count: 0,
            big_locks: 0,
            notes: Notes::default(),
            cuts: IdMap::default(),
            graveyard: VecDeque::new(),
            buried_locks: 0,
            small: owners::SMALL,
            compact: 0,
            next_fence: 1,
            len: 0,
            live_nodes: 0,
            segment_bytes: 0,
            segment_heap: 0,
            token_bytes: 0,
            inner_bytes: 0,
        };
        table.nodes.push(Node::default());
        table
    }

    /// A copy of the table that shares all of its storage with this one, in a step per chunk
    /// (some 20,000 at ten million locks) rather than one per lock. Either side's first write
    /// to a shared chunk copies that chunk alone, so the two stay independent. It takes `&mut`
    /// because the arenas' chunks this table owns outright become shared.
    pub fn share(&mut self) -> Tree {
        Tree {
            nodes: self.nodes.share(),
            // The free sets are bitmaps, a bit per slot: a copy of one is 1.25 MB at ten
            // million slots.
            free_nodes: self.free_nodes.clone(),
            forks: self.forks.share(),
            free_forks: self.free_forks.clone(),
            tables: self.tables.share(),
            free_tables: self.free_tables.clone(),
            // The hash tables and the expiry index always keep their pieces behind `Arc`s
            // (children's tables sit inside the arena's chunks, where a copy of a chunk must not
            // copy their entries), so a clone of them is already a step per piece.
            crowded: self.crowded.clone(),
            owners: self.owners.share(),
            free_owners: self.free_owners.clone(),
            owner_locks: self.owner_locks.clone(),
            owner_index: self.owner_index.clone(),
            hasher: self.hasher.clone(),
            expiry: self.expiry.clone(),
            bigs: self.bigs.clone(),
            big_marks: self.big_marks.clone(),
            big_mark_count: self.big_mark_count,
            big_locks: self.big_locks,
            notes: self.notes.clone(),
            cuts: self.cuts.clone(),
            graveyard: self.graveyard.clone(),
            buried_locks: self.buried_locks,
            small: self.small,
            compact: self.compact,
            next_fence: self.next_fence,
            len: self.len,
            live_nodes: self.live_nodes,
            segment_bytes: self.segment_bytes,
            segment_heap: self.segment_heap,
            token_bytes: self.token_bytes,
            inner_bytes: self.inner_bytes,
        }
    }

    /// A table whose owners become big past `small` locks (at least 2), and that turns into
    /// the compact form of `compact` locks when it shrinks to half of that (never when 0).
    pub(super) fn with_limits(small: usize, compact: usize) -> Tree {
        Tree {
            small: small.max(2),
            compact,
            ..Tree::new()
        }
    }

    /// An empty table with the limits of [`LockTable::new`]'s, for a load to fill: it turns
    /// into the compact form when it shrinks, as a table that grew does.
    pub(super) fn loaded() -> Tree {
        Tree::with_limits(owners::SMALL, compact::DEFAULT_LOCKS)
    }

    /// The limits [`Tree::with_limits`] took: the compact form's, then a small owner's.
    pub(super) fn limits(&self) -> (usize, usize) {
        (self.compact, self.small)
    }

    /// Whether the table may fit in the compact form, at a glance: few enough locks and path
    /// bytes, and nothing that only the tree keeps (cuts, big owners, owners being freed).
    /// [`compact::Compact::from_tree`] decides.
    pub(super) fn may_compact(&self) -> bool {
        self.may_compact_within(2)
    }

    /// [`Tree::may_compact`] against the limits divided by `share` (1 for a table just loaded,
    /// see `compact::Compact::from_loaded`).
    pub(super) fn may_compact_within(&self, share: usize) -> bool {
        self.compact > 0
            && self.len <= self.compact / share
            && self.buried_locks == 0
            && self.graveyard.is_empty()
            && self.bigs.is_empty()
            && self.cuts.is_empty()
            && self.segment_bytes + self.token_bytes < compact::MAX_BYTES / share
    }

    /// The number of locks stored, lapsed ones not yet reclaimed included, but not those of a
    /// released or reclaimed big owner still being freed (`free_some`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Locks of owners released or reclaimed whole that are still stored, being freed in the
    /// background (`free_some`); they count for nothing.
    pub fn freeing(&self) -> usize {
        self.buried_locks
    }

    /// The heap bytes the table uses, for `MEMORY USAGE`: its own allocation, its arenas and
    /// their free-slot maps, its hash tables by their capacities (kept as they change, so a
    /// step each), the expiry index's runs (a read per run, one per hundred distinct deadlines
    /// or more), the notes, and the bytes kept beside them: segments and tokens too long to
    /// keep inline, small owners' lists of locks, big owners' marks. It reads what the table
    /// holds, not the clock, and an emptied table costs what a new one does but for the
    /// capacity its first chunks grew to.
    pub fn memory_estimate(&self) -> usize {
        // What no table measures: the lists of small owners holding several locks, a 4-byte
        // entry per lock and a vector's slack and rounding (`reserve_for_one`). The locks in
        // them are those neither in a big owner's set nor inline in an owner of one lock.
        let owners = self.owners.len() - self.free_owners.len();
        let inline = owners - self.owner_locks.len() - self.bigs.len();
        let listed = (self.len + self.buried_locks).saturating_sub(self.big_locks + inline);
        let lists = listed * 5 + self.owner_locks.len() * 8;
        allocation(std::mem::size_of::<Tree>())
            + self.nodes.heap_bytes()
            + self.owners.heap_bytes()
            + self.tables.heap_bytes()
            + self.free_nodes.heap_bytes()
            + self.free_owners.heap_bytes()
            + self.free_tables.heap_bytes()
            + self.forks.heap_bytes()
            + self.free_forks.heap_bytes()
            + self.inner_bytes
            + self.crowded.heap_bytes()
            + self.owner_locks.heap_bytes()
            + lists
            + self.owner_index.heap_bytes()
            + self.expiry.heap_bytes()
            + self.bigs.heap_bytes()
            + self.big_marks.heap_bytes()
            // A node's marks are a vector, nearly always of one big owner's mark.
            + self.big_marks.len() * allocation(std::mem::size_of::<BigMark>())
            + self.big_mark_count.saturating_sub(self.big_marks.len()) * std::mem::size_of::<BigMark>()
            + self.notes.bytes()
            + self.cuts.heap_bytes()
            + self.graveyard.capacity() * std::mem::size_of::<OwnerId>()
            + self.segment_heap
            + self.token_bytes
    }

    /// How much work freeing the table is, in allocations, for Redis's lazy-free decision and
    /// the engine's own (`lazyfree`): the tables and tokens of what it holds, and the arenas'
    /// chunks, which stay as many as the most it held at once.
    pub fn free_effort(&self) -> usize {
        self.live_nodes
            + self.len
            + self.buried_locks
            + self.owners.len()
            + self.nodes.allocations()
            + self.forks.allocations()
            + self.tables.allocations()
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

    /// Decides a [`Request`] and grants it unless blocked ([`LockTable::acquire_with`]),
    /// leaving the lapsed owners in its way alone unless `reclaim` is set (a caller that cleared
    /// the way first, see [`Tree::clear_way`]). The token's own lapsed lease is reclaimed in
    /// any case.
    pub fn acquire_with(&mut self, now: u64, request: &Request, reclaim: bool) -> Acquired {
        let packed = PackedToken::new(request.token);
        let mut me = if request.generated {
            None
        } else {
            self.find_owner(&packed)
        };
        let mut lapsed = Freed::default();
        if let Some(id) = me.filter(|&id| !self.is_live(id, now)) {
            self.reclaim_owner(id, true, &mut lapsed);
            me = None;
        }
        let mut dead = Vec::new();
        let mut budget = SEARCH_BUDGET;
        let verdict = request
            .items
            .iter()
            .map(|(mode, path)| self.decide(me, *mode, path, now, &mut dead, &mut budget))
            .find(|verdict| *verdict != Verdict::Free)
            .unwrap_or(Verdict::Free);
        if reclaim {
            self.reclaim_met(now, &dead, &mut lapsed);
        }
        if verdict != Verdict::Free {
            return Acquired {
                fence: None,
                lapsed,
            };
        }
        let fence = self.next_fence;
        let deadline = lease(now.saturating_add(request.ttl));
        let owner = match me {
            Some(id) => {
                if deadline > self.owner(id).deadline {
                    self.set_lease(id, deadline);
                }
                id
            }
            None => self.add_owner(packed, deadline),
        };
        self.grant_to(owner, fence, request.items, request.note);
        Acquired {
            fence: Some(fence),
            lapsed,
        }
    }

    /// Reclaims what an acquire of `items` by `token` would meet in its way at `now`, without
    /// deciding it: the token's own lapsed lease and the lapsed owners on and beneath the paths
    /// (a bounded number), described for the waiters they held up.
    pub fn clear_way(&mut self, now: u64, token: &Token, items: &[(Mode, Path)]) -> Freed {
        let mut me = self.find_owner(&PackedToken::new(token));
        let mut lapsed = Freed::default();
        if let Some(id) = me.filter(|&id| !self.is_live(id, now)) {
            self.reclaim_owner(id, true, &mut lapsed);
            me = None;
        }
        let mut dead = Vec::new();
        let mut budget = SEARCH_BUDGET;
        for (mode, path) in items {
            self.decide(me, *mode, path, now, &mut dead, &mut budget);
        }
        self.reclaim_met(now, &dead, &mut lapsed);
        lapsed
    }

    /// Reclaims the lapsed owners a request met: every big one (a step each) and up to
    /// `MET_RECLAIMED` small ones.
    fn reclaim_met(&mut self, now: u64, dead: &[OwnerId], lapsed: &mut Freed) {
        let mut small = 0;
        for &owner in dead {
            // An owner met twice, or freed by an earlier reclaim, is skipped; so is one whose slot
            // a later owner took meanwhile (it is live).
            let still = self.owners[owner as usize]
                .as_ref()
                .is_some_and(|o| o.deadline != 0 && o.deadline <= now);
            if !still {
                continue;
            }
            if !self.is_big(owner) {
                if small == MET_RECLAIMED {
                    continue;
                }
                small += 1;
            }
            self.reclaim_owner(owner, true, lapsed);
        }
    }

    /// Records a grant that was already decided ([`LockTable::grant_noted`]): the token's lease
    /// becomes the later of what it was and `deadline`, re-granting a `(path, mode)` the token
    /// holds refreshes its fence, and `Some` note is kept with every lock the grant takes or
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
        let packed = PackedToken::new(token);
        let owner = match self.find_owner(&packed) {
            Some(id) => {
                if deadline > self.owner(id).deadline {
                    self.set_lease(id, deadline);
                }
                id
            }
            None => self.add_owner(packed, deadline),
        };
        self.grant_to(owner, fence, items, note)
    }

    fn grant_to(
        &mut self,
        owner: OwnerId,
        fence: u64,
        items: &[(Mode, Path)],
        note: Option<&Note>,
    ) -> usize {
        self.raise_next_fence(fence.saturating_add(1));
        // What the grant's locks are to carry: `Some(None)` takes their notes away.
        let wanted = note.map(|note| Some(note).filter(|n| !n.is_empty()));
        // The grant that creates an owner gives it its note, which its locks then carry
        // without an entry each (see `notes`).
        if let Some(Some(note)) = wanted {
            if self.lock_count(owner) == 0 && !self.notes.has_owner_note(owner) {
                self.notes.set_owner(owner, note);
            }
        }
        let mut added = 0;
        for (mode, path) in items {
            let new = self.insert(path, owner, *mode, fence);
            added += usize::from(new);
            // A new lock without a note carries none; a refreshed one keeps its own.
            let Some(carried) = wanted.or(new.then_some(None)) else {
                continue;
            };
            // Only a lock whose note is not its owner's, or that may have an entry to drop, costs
            // a second walk down to its node.
            if self.notes.is_owners(owner, carried) && (new || !self.notes.has_lock_entries()) {
                continue;
            }
            self.note_lock(path, Tagged::new(owner, *mode), carried);
        }
        // A request that only re-granted what the token holds adds nothing; an owner created for
        // it holds something, since a request names at least one path.
        self.forget_if_empty(owner);
        added
    }

    /// Keeps `note` with the lock `owner` (tagged with its mode) holds on `path` (`None`: no
    /// note).
    fn note_lock(&mut self, path: &Path, owner: Tagged, note: Option<&Note>) {
        if let Some(node) = self.locate(path) {
            self.notes.set(node, owner, note);
        }
    }

    /// Frees `token`'s live locks at `paths` (every mode held there), or all of them when `paths`
    /// is `None`: all of a big owner's at once, by burying it. A token whose lease lapsed by
    /// `now` frees nothing and is reclaimed as lapsed. The freed locks are described for the
    /// waiters they held up when `describe` is set.
    pub fn release(
        &mut self,
        now: u64,
        token: &Token,
        paths: Option<&[Path]>,
        describe: bool,
    ) -> Released {
        let mut released = Released::default();
        let Some(owner) = self.find_owner(&PackedToken::new(token)) else {
            return released;
        };
        if !self.is_live(owner, now) {
            self.reclaim_owner(owner, describe, &mut released.lapsed);
            return released;
        }
        released.count = self.release_owner(owner, paths, describe, &mut released.freed);
        released
    }

    /// [`Tree::release`] as a master decided it, for a replica or an AOF replay: no time
    /// involved. Returns how many locks it freed.
    pub fn release_decided(&mut self, token: &Token, paths: Option<&[Path]>) -> usize {
        match self.find_owner(&PackedToken::new(token)) {
            Some(owner) => self.release_owner(owner, paths, false, &mut Freed::default()),
            None => 0,
        }
    }

    fn release_owner(
        &mut self,
        owner: OwnerId,
        paths: Option<&[Path]>,
        describe: bool,
        freed: &mut Freed,
    ) -> usize {
        let Some(paths) = paths else {
            let count = self.lock_count(owner);
            self.drop_owner(owner, describe, freed);
            return count;
        };
        let before = freed.locks;
        for path in paths {
            let Some(node) = self.locate(path) else {
                continue;
            };
            for mode in Mode::ALL {
                if describe {
                    if let Some(info) = self.remove(node, owner, mode) {
                        freed.probes.push((info.mode, info.path));
                        freed.locks += 1;
                    }
                } else if self.remove_silently(node, owner, mode) {
                    freed.locks += 1;
                }
            }
        }
        self.forget_if_empty(owner);
        self.trim_some(TRIM_PER_CHANGE);
        freed.locks - before
    }

    /// Sets the lease of `token`'s locks to `deadline`, unless it lapsed by `now`: then it is
    /// reclaimed (a lapsed lease is not revived) and nothing is renewed. Returns how many locks
    /// it renewed, in one step whatever the owner holds, and what lapsed.
    pub fn renew(&mut self, now: u64, token: &Token, deadline: u64) -> (usize, Freed) {
        let mut lapsed = Freed::default();
        let Some(owner) = self.find_owner(&PackedToken::new(token)) else {
            return (0, lapsed);
        };
        if !self.is_live(owner, now) {
            self.reclaim_owner(owner, true, &mut lapsed);
            return (0, lapsed);
        }
        self.set_lease(owner, deadline);
        (self.lock_count(owner), lapsed)
    }

    /// [`Tree::renew`] as a master decided it, for a replica or an AOF replay.
    pub fn renew_decided(&mut self, token: &Token, deadline: u64) -> usize {
        match self.find_owner(&PackedToken::new(token)) {
            Some(owner) => {
                self.set_lease(owner, deadline);
                self.lock_count(owner)
            }
            None => 0,
        }
    }

    /// The number of nodes in use: locked paths and the ancestors they keep (a chain of segments
    /// being one node, see `tree::Node`). Zero once every lock is gone, which is how tests show
    /// that a released lock leaves nothing behind.
    pub fn node_count(&self) -> usize {
        self.live_nodes + usize::from(!self.nodes[ROOT as usize].is_unused())
    }

    /// Whether an arena's last slot is free, for `trim_some` to give back.
    fn has_free_tail(&self) -> bool {
        let tail = |len: usize, free: &FreeSlots| len > 0 && free.contains((len - 1) as u32);
        tail(self.nodes.len(), &self.free_nodes)
            || tail(self.forks.len(), &self.free_forks)
            || tail(self.owners.len(), &self.free_owners)
            || tail(self.tables.len(), &self.free_tables)
    }

    /// Gives back up to `budget` free slots from the arenas' ends, and returns how many. The
    /// root's slot is never free.
    fn trim_some(&mut self, budget: usize) -> usize {
        let mut done = 0;
        while done < budget {
            let before = done;
            let last = self.nodes.len().saturating_sub(1) as u32;
            if last != ROOT && self.free_nodes.remove(last) {
                self.nodes.pop();
                done += 1;
            }
            let last = self.owners.len().saturating_sub(1) as u32;
            if !self.owners.is_empty() && self.free_owners.remove(last) {
                self.owners.pop();
                done += 1;
            }
            let last = self.tables.len().saturating_sub(1) as u32;
            if !self.tables.is_empty() && self.free_tables.remove(last) {
                self.tables.pop();
                done += 1;
            }
            let last = self.forks.len().saturating_sub(1) as u32;
            if !self.forks.is_empty() && self.free_forks.remove(last) {
                self.forks.pop();
                done += 1;
            }
            if done == before {
                break;
            }
        }
        done
    }
}

/// Free slots a change gives back from the arenas' ends after it frees locks: a few dozen
/// pointer moves, so that a project that shrinks by releases gives its memory back without the
/// background having to.
const TRIM_PER_CHANGE: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_copy_holds_the_same_chunks_until_written() {
        let mut table = Tree::new();
        let token = Token::new(b"t").expect("a token");
        for i in 0..10_000 {
            let path = format!("/d{}/f{i}", i % 100);
            let path = Path::parse(path.as_bytes(), &Default::default()).expect("a path");
            table.grant_noted(&token, 1_000 + i, i + 1, &[(Mode::Write, path)], None);
        }
        let mut copy = table.share();
        let chunks = table.nodes.shared_with(&copy.nodes);
        assert!(chunks >= 3, "{chunks}");
        let forks = table.forks.shared_with(&copy.forks);
        assert_eq!(forks, 1, "the root's and the folders' forks");
        // Releasing one lock on the copy writes to the chunk of its node, and to the forks of
        // its ancestors (the folder and the root, both in the first chunk of forks), not to the
        // others.
        let path = Path::parse(b"/d7/f9907", &Default::default()).expect("a path");
        assert_eq!(copy.release_decided(&token, Some(&[path])), 1);
        assert_eq!(table.nodes.shared_with(&copy.nodes), chunks - 1);
        assert_eq!(table.forks.shared_with(&copy.forks), 0);
        assert_eq!(table.len(), copy.len() + 1);
        copy.check_integrity().expect("the copy's integrity");
        table.check_integrity().expect("the original's integrity");
    }

    #[test]
    fn a_folder_whose_only_child_is_a_leaf_keeps_no_fork() {
        let path = |p: &str| Path::parse(p.as_bytes(), &Default::default()).expect("a path");
        let mut table = Tree::new();
        let token = |i: u64| Token::new(format!("t{i}").as_bytes()).expect("a token");
        for i in 0..100 {
            let grant = [(Mode::Write, path(&format!("/d{i}/f{i}")))];
            table.grant_noted(&token(i), 60_000, i + 1, &grant, None);
        }
        table.check_integrity().expect("integrity");
        // The root's fork alone: each folder reads its marks from its file's lock.
        assert_eq!(table.forks.len() - table.free_forks.len(), 1);
        let now = 1_000;
        let request = |table: &mut Tree, t: u64, p: &str| {
            let items = [(Mode::Write, path(p))];
            let request = Request {
                token: &token(t),
                generated: false,
                ttl: 1_000,
                items: &items,
                note: None,
            };
            table.acquire_with(now, &request, true).fence.is_some()
        };
        assert!(
            !request(&mut table, 500, "/d7"),
            "the folder's file is held"
        );
        // Each folder and its file are one node (see `tree::Node`). The file getting a child
        // gives that node no fork, its only child being a leaf; the folder getting a second
        // child splits the node and gives the folder its fork, with the marks it read from the
        // file.
        table.grant_noted(
            &token(7),
            60_000,
            200,
            &[(Mode::Read, path("/d7/f7/x"))],
            None,
        );
        table.grant_noted(&token(8), 60_000, 201, &[(Mode::Read, path("/d8/g"))], None);
        table.check_integrity().expect("integrity");
        assert_eq!(table.forks.len() - table.free_forks.len(), 2);
        // The hundred folders with their files, `x`, `/d8` split off its file, and `g`.
        assert_eq!(table.live_nodes, 100 + 3);
        assert!(!request(&mut table, 500, "/d7"));
        assert!(!request(&mut table, 500, "/d8"));
        // Released again, the tree keeps no node and no fork beyond what it holds.
        for i in 0..100 {
            let paths = [path(&format!("/d{i}/f{i}"))];
            assert_eq!(table.release_decided(&token(i), Some(&paths)), 1);
            table.check_integrity().expect("integrity");
        }
        assert!(
            request(&mut table, 500, "/d9"),
            "nothing beneath /d9 any more"
        );
        assert!(
            !request(&mut table, 500, "/d7/f7"),
            "/d7/f7/x is still held"
        );
        table.check_integrity().expect("integrity");
    }

    #[test]
    fn a_chain_of_segments_is_one_node_until_a_lock_or_a_sibling_splits_it() {
        let path = |p: &str| Path::parse(p.as_bytes(), &Default::default()).expect("a path");
        let token = |t: &str| Token::new(t.as_bytes()).expect("a token");
        let mut table = Tree::new();
        table.grant_noted(
            &token("deep"),
            60_000,
            1,
            &[(Mode::Write, path("/a/b/c/d"))],
            None,
        );
        table.check_integrity().expect("integrity");
        assert_eq!(table.live_nodes, 1, "one node for the four segments");
        let now = 1_000;
        // A path ending on a virtual segment has the node's lock beneath it; one leaving the
        // chain has nothing.
        for (p, blocked) in [
            ("/a", true),
            ("/a/b/c", true),
            ("/a/b/x", false),
            ("/a/bc", false),
        ] {
            assert_eq!(
                table.is_blocked(now, &token("other"), Mode::Read, &path(p)),
                blocked,
                "{p}"
            );
        }
        assert!(table.is_blocked(now, &token("other"), Mode::Read, &path("/a/b/c/d/e")));
        let listed = |locks: Vec<crate::lock::LockInfo>| -> Vec<Path> {
            locks.into_iter().map(|l| l.path).collect()
        };
        assert_eq!(listed(table.locks(now, &path("/a/b"))), [path("/a/b/c/d")]);
        assert!(table.locks(now, &path("/a/x")).is_empty());
        assert_eq!(
            listed(table.locks_of_token(now, &path("/a/b/c"), &token("deep"))),
            [path("/a/b/c/d")]
        );
        let blockers = table.blockers(now, Some(&token("other")), &[(Mode::Read, path("/a/b"))]);
        assert_eq!(listed(blockers), [path("/a/b/c/d")]);
        // A lock on a virtual segment, and a sibling beneath another, split the node there; the
        // lock on `/a/b/c/d` keeps its node.
        let node = table.locate(&path("/a/b/c/d")).expect("the lock's node");
        table.grant_noted(
            &token("reader"),
            60_000,
            2,
            &[(Mode::Read, path("/a/b"))],
            None,
        );
        table.grant_noted(
            &token("side"),
            60_000,
            3,
            &[(Mode::Write, path("/a/x"))],
            None,
        );
        table.check_integrity().expect("integrity");
        assert_eq!(table.locate(&path("/a/b/c/d")), Some(node));
        assert!(
            table.locate(&path("/a/b/c")).is_none(),
            "still a virtual segment"
        );
        // `/a`, `/b` (the reader's), `c/d`, and `x`.
        assert_eq!(table.live_nodes, 4);
        assert!(table.is_blocked(now, &token("other"), Mode::Write, &path("/a/b/c")));
        assert!(!table.is_blocked(now, &token("other"), Mode::Read, &path("/a/b/x")));
        for (t, p) in [("deep", "/a/b/c/d"), ("reader", "/a/b"), ("side", "/a/x")] {
            assert_eq!(table.release_decided(&token(t), Some(&[path(p)])), 1);
            table.check_integrity().expect("integrity");
        }
        assert_eq!(table.live_nodes, 0);
    }
}
