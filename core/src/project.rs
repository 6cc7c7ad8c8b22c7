//! A project: its lock table and its queue of waiting requests, served first come, first served.
//!
//! The fairness rule: a request (waiting or not) is refused while it conflicts with a lock or
//! with an earlier waiting request of another owner. So a writer waiting on `/A` is not starved
//! by readers that keep arriving after it, while a request that conflicts with no waiter is never
//! held up by the queue.
//!
//! Waiting requests are indexed by path ([`WaitIndex`]), and only the waiters at the front of
//! the queue near a change are ever looked at: those that no earlier waiter conflicts with. When
//! locks go (release, expiry), only waiters related to the freed paths can have become grantable,
//! because a lock blocks only requests on related paths, and of those only the ones at the front,
//! because a waiter behind an earlier one stays behind it (or behind its locks, once that one is
//! granted) whatever else happens to the locks. A waiter leaving without a grant (timeout,
//! disconnect) can let through the later waiters it conflicted with, which are related to its
//! own paths. A grant never unblocks anyone (the granted request's locks block exactly what it
//! blocked as a waiter), so one pass in arrival order over these candidates grants what
//! re-scanning the whole queue would.
//!
//! So a release costs O(depth × log n) per waiter it looks at, and it looks at the ones it
//! grants, plus those that another lock still holds, or that an earlier waiter holds up on
//! another of their paths: a chain of writers on one path hands over in O(depth × log n) each,
//! not O(n). The index ignores owners when it decides who is at the front; a waiter whose
//! token another waiter also has is therefore always a candidate, and the exact check (which
//! does know owners) decides. Tokens shared between waiters are rare, so that set is small.
//!
//! Expiry here is lazy and bounded: a request reclaims only the expired locks in its way (and
//! its own token's), a change reclaims a fixed few more, and a waiter that only expired locks
//! hold up has them reclaimed when it is looked at; the rest of a mass expiry is the expiry
//! cycle's, in bounded steps. What went is kept as [`Lapsed`] until the caller takes it to
//! replicate, so a command on a project where millions of locks just expired costs what it
//! touches, not the millions.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

use crate::alloc::allocation;
use crate::lock::{Freed, Items, Mode, Note, Token};
use crate::path::Path;
use crate::queue::{distinct, WaitIndex};
use crate::table::{defrag_box, LockTable, Progress, Relocate, Request};

/// A request waiting for its locks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub token: Token,
    pub ttl: u64,
    pub items: Items,
    /// The request's note, kept until it is granted and then with its locks.
    pub note: Option<Note>,
}

/// A waiter granted by [`Project::wake`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub waiter: u64,
    pub token: Token,
    pub deadline: u64,
    pub fence: u64,
    pub items: Items,
    /// The waiter's note, which the grant kept with the locks.
    pub note: Option<Note>,
}

/// What lazy expiry reclaimed during a change, kept until the caller takes it
/// ([`Project::take_lapsed`]) to replicate it and answer the waiters it let in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lapsed {
    /// The owners reclaimed, in order, each with the time it was reclaimed at: all of the
    /// token's locks due by that time went, which is what a replica applies.
    pub owners: Vec<(u64, Token)>,
    /// How many locks went.
    pub locks: usize,
    /// The waiters that what went let in.
    pub grants: Vec<Grant>,
}

impl Lapsed {
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty() && self.grants.is_empty()
    }
}

/// A project: its locks, and what a change leaves for its caller or someone waits for. A
/// project key costs its table and one word while nobody waits and nothing lapsed is left to
/// take: the queue and the lapsed record are allocated when first needed and dropped when they
/// empty, so that a million keys of one lock each cost what their locks do.
#[derive(Debug, Default)]
pub struct Project {
    locks: LockTable,
    /// The side record while there is one, and the keeper's tag: a number that whoever keeps
    /// the project stores with it and the engine never reads. The module keeps there the
    /// project's entry in its expiry schedule, so that the entry is found, moved and removed
    /// without a map from key names to entries. Copies start without one (0).
    side: SideSlot,
}

/// What a project keeps only for a while: allocated when first needed, dropped once both parts
/// are empty.
#[derive(Debug, Default)]
struct Side {
    /// Lazy expiry not yet taken by the caller; empty between changes.
    lapsed: Lapsed,
    /// The waiting requests.
    queue: Queue,
    /// The keeper's tag while the side exists (see [`SideSlot`]). A `Cell`, as the keeper sets
    /// it through a shared reference.
    tag: Cell<u64>,
}

// A key holding a project costs this allocation besides its table's: three words (the table,
// and the side or the tag). glibc's malloc (Valkey's default build) adds an 8-byte header and
// rounds to 16, so three words take a 32-byte chunk where four took 48: 16 bytes a project.
// Redis 8's jemalloc has a 24-byte class (8 bytes a project); Redis 7.0's, as Debian builds it,
// has none and keeps giving 32.
const _: () = assert!(std::mem::size_of::<Project>() == 24);

/// The side record or, while there is none, the keeper's tag, in one word, since nearly every
/// project has a tag (a lease in the expiry schedule) and nearly none a side. The word holds
/// either the address of a boxed [`Side`] (even, as a `Side` is aligned to 8), whose `tag`
/// then holds the tag, or `tag << 1 | 1` with no provenance. A `Cell`, because the module sets
/// the tag where the server hands it the project to read (a keyspace event, a value leaving
/// its key).
struct SideSlot {
    word: Cell<*mut Side>,
}

// The word's odd values must not be addresses of a side, and a tag must fill the rest of it.
const _: () = assert!(std::mem::align_of::<Side>() >= 2 && usize::BITS == 64);

// SAFETY: the slot owns the side its word points to, as a `Box<Side>` would, and `Side` is
// `Send`; the tag is a plain number. It is not `Sync`, as the `Cell` says.
unsafe impl Send for SideSlot {}
const _: () = {
    const fn send<T: Send>() {}
    send::<Side>()
};

impl Default for SideSlot {
    fn default() -> SideSlot {
        SideSlot {
            word: Cell::new(SideSlot::tagged(0)),
        }
    }
}

impl Drop for SideSlot {
    fn drop(&mut self) {
        self.clear();
    }
}

impl std::fmt::Debug for SideSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.get() {
            Some(side) => side.fmt(f),
            None => write!(f, "tag {}", self.tag()),
        }
    }
}

impl SideSlot {
    /// The word of `tag` and no side.
    fn tagged(tag: u64) -> *mut Side {
        // The top bit is lost to the mark; the keeper's tags fit (see `Project::MAX_TAG`).
        std::ptr::without_provenance_mut(((tag << 1) | 1) as usize)
    }

    /// The side's address, while there is one.
    fn address(&self) -> Option<*mut Side> {
        let word = self.word.get();
        (word.addr() & 1 == 0).then_some(word)
    }

    fn get(&self) -> Option<&Side> {
        // SAFETY: an even word is the address of the live `Side` this slot owns (`insert`), and
        // nothing takes it mutably while `self` is borrowed (`get_mut` needs `&mut self`).
        self.address().map(|side| unsafe { &*side })
    }

    fn get_mut(&mut self) -> Option<&mut Side> {
        // SAFETY: as in `get`, with the slot, and so its side, borrowed mutably.
        self.address().map(|side| unsafe { &mut *side })
    }

    fn get_or_insert(&mut self) -> &mut Side {
        if self.address().is_none() {
            let side = Box::new(Side {
                tag: Cell::new(self.tag()),
                ..Side::default()
            });
            self.word.set(Box::into_raw(side));
        }
        // SAFETY: the word now holds the address of the slot's side, borrowed with `self`.
        unsafe { &mut *self.word.get() }
    }

    /// Drops the side, keeping its tag.
    fn clear(&mut self) {
        if let Some(side) = self.address() {
            // SAFETY: the word held the address `Box::into_raw` gave for the slot's side, and
            // is overwritten before the box is dropped, so it is freed once.
            let side = unsafe { Box::from_raw(side) };
            self.word.set(SideSlot::tagged(side.tag.get()));
        }
    }

    fn tag(&self) -> u64 {
        match self.get() {
            Some(side) => side.tag.get(),
            None => (self.word.get().addr() >> 1) as u64,
        }
    }

    fn set_tag(&self, tag: u64) {
        debug_assert!(tag <= Project::MAX_TAG, "a project's tag keeps 63 bits");
        match self.get() {
            Some(side) => side.tag.set(tag),
            None => self.word.set(SideSlot::tagged(tag)),
        }
    }

    /// Moves the side's allocation through `to` (see [`Project::defrag`]).
    fn defrag<R: Relocate + ?Sized>(&mut self, to: &mut R) {
        if let Some(side) = self.address() {
            // SAFETY: the address is the slot's box; `ManuallyDrop` keeps it from being freed
            // here if the mover unwinds, and the word takes the box's address after the move
            // (the same one when the mover left it).
            let mut side = std::mem::ManuallyDrop::new(unsafe { Box::from_raw(side) });
            defrag_box(&mut side, to);
            self.word
                .set(Box::into_raw(std::mem::ManuallyDrop::into_inner(side)));
        }
    }
}

/// The waiting requests of a project, and their index.
#[derive(Debug, Default)]
struct Queue {
    index: WaitIndex,
    waiters: BTreeMap<u64, Waiter>,
    /// The waiters of each token, to know which waiters share theirs. Ordered maps rather than
    /// hash tables here and in the index: a hash table that doubles stalls the command that
    /// makes it grow, about a millisecond at 7,000 waiters. Looked up by a borrowed token, so
    /// that a waiter leaving copies nothing.
    by_token: BTreeMap<Token, TokenWaiters>,
    /// Waiters whose token another waiter also has: the index's idea of the front does not
    /// know owners, so these are always retried (see the top of this file).
    shared: BTreeSet<u64>,
}

/// The waiters of one token: nearly always one.
#[derive(Debug)]
enum TokenWaiters {
    One(u64),
    Many(BTreeSet<u64>),
}

/// The index of a project nobody waits on.
static NO_WAITERS: WaitIndex = WaitIndex::new();

/// Copies carry the locks but not the waiters: a waiter belongs to the key it asked for.
impl Clone for Project {
    fn clone(&self) -> Project {
        Project::from_locks(self.locks.clone())
    }
}

impl Project {
    /// Moves the project's allocations through `to` for the server's active defragmentation,
    /// from `cursor` (0 starts) until done or `to` says stop: its side record, then its table
    /// ([`LockTable::defrag`]). The project's own allocation is its owner's to move. The
    /// waiters' queue is not walked: it holds requests for as long as they wait, and a queue
    /// long enough to fragment memory is rare.
    pub fn defrag<R: Relocate + ?Sized>(&mut self, to: &mut R, cursor: u64) -> Progress {
        if cursor == 0 {
            self.side.defrag(to);
        }
        self.locks.defrag(to, cursor)
    }

    /// The copy `COPY` makes: the locks, sharing their storage with this project's (see
    /// [`LockTable::share`]), so it costs a step per chunk of storage; no waiters.
    pub fn copy(&mut self) -> Project {
        Project::from_locks(self.locks.share())
    }
}

impl Queue {
    /// Whether an earlier waiter than `before`, of another owner, conflicts with `items`: a
    /// look at the oldest waiting items on the related paths, O(depth) per item.
    fn behind_a_waiter(&self, token: &Token, items: &[(Mode, Path)], before: u64) -> bool {
        let other_owner = |id: u64| self.waiters.get(&id).is_some_and(|w| w.token != *token);
        items
            .iter()
            .any(|(mode, path)| self.index.any_earlier(*mode, path, before, other_owner))
    }

    fn remove_waiter(&mut self, id: u64) -> Option<Waiter> {
        let waiter = self.waiters.remove(&id)?;
        self.forget_waiter(id, &waiter);
        Some(waiter)
    }

    /// Takes `waiter`'s entries out of the index and the token sets.
    fn forget_waiter(&mut self, id: u64, waiter: &Waiter) {
        distinct(&waiter.items, |mode, path| {
            self.index.remove(id, mode, path)
        });
        match self.by_token.get_mut(&waiter.token) {
            Some(TokenWaiters::One(only)) if *only == id => {
                self.by_token.remove(&waiter.token);
            }
            Some(TokenWaiters::Many(ids)) => {
                ids.remove(&id);
                self.shared.remove(&id);
                if let (1, Some(&last)) = (ids.len(), ids.first()) {
                    // The token's last waiter no longer shares it.
                    self.shared.remove(&last);
                    self.by_token
                        .insert(waiter.token.clone(), TokenWaiters::One(last));
                }
            }
            _ => {}
        }
    }
}

/// Records the owners lazy expiry reclaimed at `now` in the side's lapsed record, for the
/// caller to replicate and count (see [`Project::take_lapsed`]); the one place that does.
/// Returns where to look for the waiters they held up; nothing when nothing was reclaimed.
fn record_lapsed(side: &mut SideSlot, now: u64, freed: Freed) -> Vec<(Mode, Path)> {
    if freed.tokens.is_empty() {
        return Vec::new();
    }
    let lapsed = &mut side.get_or_insert().lapsed;
    lapsed
        .owners
        .extend(freed.tokens.into_iter().map(|t| (now, t)));
    lapsed.locks += freed.locks;
    freed.probes
}

impl Project {
    /// The largest tag a project keeps: one bit of its word marks a tag from a side's address.
    pub const MAX_TAG: u64 = u64::MAX >> 1;

    pub fn new() -> Project {
        Project::default()
    }

    pub fn from_locks(locks: LockTable) -> Project {
        Project {
            locks,
            ..Project::default()
        }
    }

    pub fn locks(&self) -> &LockTable {
        &self.locks
    }

    /// The lock table, for changes that the queue need not hear about (applying a master's
    /// effects on a replica, where nobody waits).
    pub fn locks_mut(&mut self) -> &mut LockTable {
        &mut self.locks
    }

    /// The bytes the project takes on the heap, as the allocator rounds them, for `MEMORY
    /// USAGE`: its own allocation and its table's. While someone waits, the queue's allocation
    /// and its waiters' entries are added; what a waiter costs beyond them (its index entries,
    /// its paths) is not counted, as waiters come and go within their timeouts.
    pub fn memory_estimate(&self) -> usize {
        let queue = self.side.get().map_or(0, |side| {
            allocation(std::mem::size_of::<Side>())
                + side.queue.waiters.len() * std::mem::size_of::<(u64, Waiter)>()
        });
        allocation(std::mem::size_of::<Project>()) + self.locks.memory_estimate() + queue
    }

    /// The queue, while someone waits.
    fn queue(&self) -> Option<&Queue> {
        self.side
            .get()
            .map(|side| &side.queue)
            .filter(|queue| !queue.waiters.is_empty())
    }

    /// Drops the side once nobody waits and nothing lapsed is left to take, so that the
    /// project costs its table alone.
    fn trim_side(&mut self) {
        let empty = |side: &Side| side.queue.waiters.is_empty() && side.lapsed.is_empty();
        if self.side.get().is_some_and(empty) {
            self.side.clear();
        }
    }

    pub fn waiting(&self) -> usize {
        self.queue().map_or(0, |queue| queue.waiters.len())
    }

    /// Whether the project holds nothing: no lock (lapsed or not, but for those already
    /// released or reclaimed whole and still being freed in the background) and no waiter.
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty() && self.waiting() == 0
    }

    /// The number its keeper stored with it (0 until it does); see the field.
    pub fn tag(&self) -> u64 {
        self.side.tag()
    }

    /// Stores `tag`, at most [`Project::MAX_TAG`], with the project.
    pub fn set_tag(&self, tag: u64) {
        self.side.set_tag(tag);
    }

    /// The ids of the waiting requests, oldest first.
    pub fn waiter_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.queue()
            .into_iter()
            .flat_map(|queue| queue.waiters.keys().copied())
    }

    /// The path index of the waiters, for tests of its consistency.
    pub fn wait_index(&self) -> &WaitIndex {
        self.side
            .get()
            .map_or(&NO_WAITERS, |side| &side.queue.index)
    }

    /// The waiting requests with an item at or beneath `under`, oldest first, with their ids:
    /// `WAITERS`. The index keeps the ids waiting in each subtree, so this costs O(depth) plus
    /// O(log n) per waiter it returns, however long the queue is elsewhere.
    pub fn waiters_under(&self, under: &Path) -> Vec<(u64, &Waiter)> {
        let Some(queue) = self.queue() else {
            return Vec::new();
        };
        queue
            .index
            .ids_under(under)
            .into_iter()
            .filter_map(|id| queue.waiters.get(&id).map(|waiter| (id, waiter)))
            .collect()
    }

    /// Grants `items` to `token` unless a live lock or an earlier waiting request of another
    /// owner conflicts. The token's own lapsed lease, and lapsed owners in the way, are
    /// reclaimed first (see [`Project::take_lapsed`]), so a lapsed lease is free to take.
    pub fn acquire(
        &mut self,
        now: u64,
        token: &Token,
        ttl: u64,
        items: &[(Mode, Path)],
    ) -> Option<u64> {
        self.acquire_request(
            now,
            &Request {
                token,
                generated: false,
                ttl,
                items,
                note: None,
            },
        )
    }

    /// [`Project::acquire`] of a whole [`Request`]: `ACQUIRE` as the module makes it, with its
    /// note kept with the locks as [`LockTable::grant_noted`] does.
    pub fn acquire_request(&mut self, now: u64, request: &Request) -> Option<u64> {
        let Some(queue) = self.queue() else {
            let acquired = self.locks.acquire_with(now, request, true);
            self.lapse(now, acquired.lapsed);
            return acquired.fence;
        };
        if queue.behind_a_waiter(request.token, request.items, u64::MAX) {
            return None;
        }
        // What goes may let waiters in; they are granted before this request is decided, in the
        // order a replica applies the effects (reclaimed owners, the waiters' grants, this
        // grant), since a waiter of the same token re-granting a path would otherwise leave
        // another fence on it.
        let cleared = self.locks.clear_way(now, request.token, request.items);
        self.lapse(now, cleared);
        let acquired = self.locks.acquire_with(now, request, false);
        self.lapse(now, acquired.lapsed);
        acquired.fence
    }

    /// The bounded share of expiry a change does before it runs: the locks of `token` when its
    /// lease lapsed (a lease that lapsed is gone before its owner renews or releases it), and at
    /// most `others` more lapsed owners, earliest first. The rest is left to the expiry cycle,
    /// or to the requests it gets in the way of. See [`Project::take_lapsed`].
    pub fn reclaim_lazily(&mut self, now: u64, token: Option<&Token>, others: usize) {
        let describe = self.queue().is_some();
        if let Some(token) = token {
            let freed = self.locks.reclaim_expired_of(now, token, describe);
            self.lapse(now, freed);
        }
        if others > 0 && self.locks.next_deadline().is_some_and(|due| due <= now) {
            let freed = self.locks.reclaim_some_expired(now, others, describe);
            self.lapse(now, freed);
        }
    }

    /// Takes what lazy expiry reclaimed since it was last taken. Whoever changes a project
    /// through it takes this after the change, to replicate the reclaimed owners (`EXPIRE now
    /// token...`) ahead of the change's own effects and to answer the waiters granted.
    pub fn take_lapsed(&mut self) -> Lapsed {
        let Some(side) = self.side.get_mut() else {
            return Lapsed::default();
        };
        let lapsed = std::mem::take(&mut side.lapsed);
        self.trim_side();
        lapsed
    }

    /// Whether lazy expiry reclaimed anything not yet taken: a look before `take_lapsed`,
    /// which every change calls and which nearly always finds nothing.
    pub fn has_lapsed(&self) -> bool {
        self.side.get().is_some_and(|side| !side.lapsed.is_empty())
    }

    /// Records what was reclaimed at `now` and grants the waiters it lets in.
    fn lapse(&mut self, now: u64, freed: Freed) {
        let probes = record_lapsed(&mut self.side, now, freed);
        let grants = self.wake_probes(now, &probes);
        if !grants.is_empty() {
            let side = self.side.get_or_insert();
            side.lapsed.grants.extend(grants);
        }
    }

    /// Frees `token`'s live locks (see [`LockTable::release`]) and grants the waiters that
    /// were waiting for them. A lapsed lease frees nothing and is reclaimed as lapsed. Returns
    /// how many locks it freed, and the grants.
    pub fn release(
        &mut self,
        now: u64,
        token: &Token,
        paths: Option<&[Path]>,
    ) -> (usize, Vec<Grant>) {
        // The freed locks are described only for the waiters they may let in.
        let describe = self.queue().is_some();
        let released = self.locks.release(now, token, paths, describe);
        if released.lapsed.tokens.is_empty() {
            let grants = self.wake_probes(now, &released.freed.probes);
            return (released.count, grants);
        }
        // A lapsed lease: its grants are replicated after the release, as for `renew`, since a
        // waiter of this token may be among them.
        let probes = record_lapsed(&mut self.side, now, released.lapsed);
        (released.count, self.wake_probes(now, &probes))
    }

    /// Moves the lease of `token`'s locks to `deadline` (see [`LockTable::renew`]); a lapsed
    /// lease is reclaimed instead, so it is not brought back. Returns how many locks it renewed,
    /// and the waiters that the reclaimed locks let in. Those are granted after the renewal and
    /// must be replicated after it: a waiter of this very token may be among them (let in once
    /// another owner's lapsed locks in its way went too), and a replica renewing after granting
    /// it would move its lease.
    pub fn renew(&mut self, now: u64, token: &Token, deadline: u64) -> (usize, Vec<Grant>) {
        let (renewed, lapsed) = self.locks.renew(now, token, deadline);
        let probes = record_lapsed(&mut self.side, now, lapsed);
        (renewed, self.wake_probes(now, &probes))
    }

    /// Reclaims every owner whose lease lapsed by `now`, however many, and grants the waiters
    /// that were waiting for them. Its cost is the whole expiry: commands use
    /// [`Project::reclaim_lazily`], the expiry cycle [`Project::expire_some`].
    pub fn reclaim_expired(&mut self, now: u64) -> (Freed, Vec<Grant>) {
        let freed = self.locks.reclaim_expired(now, self.queue().is_some());
        let grants = self.wake_probes(now, &freed.probes);
        (freed, grants)
    }

    /// One bounded step of expiry: at most `max_owners` lapsed owners, earliest first, and the
    /// waiters they let in. The tokens name the step exactly for a replica.
    pub fn expire_some(&mut self, now: u64, max_owners: usize) -> (Freed, Vec<Grant>) {
        let freed = self
            .locks
            .reclaim_some_expired(now, max_owners, self.queue().is_some());
        let grants = self.wake_probes(now, &freed.probes);
        (freed, grants)
    }

    fn wake_probes(&mut self, now: u64, probes: &[(Mode, Path)]) -> Vec<Grant> {
        self.wake_near(now, probes.iter().map(|(mode, path)| (*mode, path)), 0)
    }

    /// Queues a request that `acquire` refused. `id` orders waiters: give increasing ids, and
    /// keep a waiter's id when it is queued again elsewhere so that it keeps its place.
    pub fn enqueue(&mut self, id: u64, waiter: Waiter) {
        let queue = &mut self.side.get_or_insert().queue;
        if let Some(old) = queue.waiters.get(&id).cloned() {
            // The same id twice would be two entries in the index for one waiter.
            queue.forget_waiter(id, &old);
        }
        distinct(&waiter.items, |mode, path| {
            queue.index.insert(id, mode, path)
        });
        match queue.by_token.get_mut(&waiter.token) {
            None => {
                queue
                    .by_token
                    .insert(waiter.token.clone(), TokenWaiters::One(id));
            }
            Some(TokenWaiters::One(first)) => {
                // The token's second waiter: both are shared from now on.
                queue.shared.extend([*first, id]);
                let ids = BTreeSet::from([*first, id]);
                queue
                    .by_token
                    .insert(waiter.token.clone(), TokenWaiters::Many(ids));
            }
            Some(TokenWaiters::Many(ids)) => {
                ids.insert(id);
                queue.shared.insert(id);
            }
        }
        queue.waiters.insert(id, waiter);
    }

    /// Removes a waiter that gave up (timed out, disconnected), and grants the later waiters it
    /// alone was holding up.
    pub fn cancel(&mut self, now: u64, id: u64) -> (Option<Waiter>, Vec<Grant>) {
        let removed = self.side.get_mut().and_then(|s| s.queue.remove_waiter(id));
        let Some(waiter) = removed else {
            return (None, Vec::new());
        };
        // Only later waiters can have been behind it.
        let grants = self.wake_near(now, waiter.items.iter().map(|(m, p)| (*m, p)), id);
        self.trim_side();
        (Some(waiter), grants)
    }

    /// Retries, in arrival order, the waiters related to `freed` (paths whose locks went), and
    /// grants each one that no lock and no earlier waiter of another owner blocks any more.
    pub fn wake(&mut self, now: u64, freed: &[Path]) -> Vec<Grant> {
        self.wake_near(now, freed.iter().map(|p| (Mode::Write, p)), 0)
    }

    /// Grants, in arrival order, the waiters with an id above `after` that something conflicting
    /// with `probes` was holding up and that nothing holds up any more. Only the waiters at the
    /// front of the queue near the probes are looked at.
    fn wake_near<'a>(
        &mut self,
        now: u64,
        probes: impl Iterator<Item = (Mode, &'a Path)>,
        after: u64,
    ) -> Vec<Grant> {
        let Some(queue) = self.queue() else {
            return Vec::new();
        };
        let mut candidates = Vec::new();
        for (mode, path) in probes {
            queue.index.fronts_near(mode, path, after, &mut candidates);
        }
        let mut grants = Vec::new();
        let mut after = after;
        // A waiter whose way only expired locks bar has them reclaimed, as a request's are;
        // what they free may let in waiters that these probes did not reach, so those paths
        // are probed in turn (from the front of the queue). Every further round reclaims
        // locks, so the rounds end.
        while let Some(queue) = self.queue() {
            if candidates.is_empty() && queue.shared.is_empty() {
                break;
            }
            candidates.extend(queue.shared.range(after.saturating_add(1)..).copied());
            candidates.sort_unstable();
            candidates.dedup();
            let mut freed = Vec::new();
            for id in std::mem::take(&mut candidates) {
                if let Some(grant) = self.try_waiter(now, id, &mut freed) {
                    grants.push(grant);
                }
            }
            if freed.is_empty() {
                break;
            }
            after = 0;
            if let Some(queue) = self.queue() {
                for (mode, path) in &freed {
                    queue.index.fronts_near(*mode, path, after, &mut candidates);
                }
            }
        }
        self.trim_side();
        grants
    }

    /// Grants waiter `id` when no live lock and no earlier waiter of another owner blocks it.
    /// The lapsed owners in its way, and its own, are reclaimed (recorded as lapsed) and their
    /// paths added to `freed`; its own go before it is granted, so that nothing reclaimed later
    /// in this change is its, and the reclaimed owners can replicate ahead of the grants.
    fn try_waiter(&mut self, now: u64, id: u64, freed: &mut Vec<(Mode, Path)>) -> Option<Grant> {
        let queue = &mut self.side.get_mut()?.queue;
        let waiter = queue.waiters.get(&id)?;
        if queue.behind_a_waiter(&waiter.token, &waiter.items, id) {
            return None;
        }
        // Out of the map for the moment the table needs it, and back if it is still blocked.
        let waiter = queue.waiters.remove(&id)?;
        let request = Request {
            token: &waiter.token,
            generated: false,
            ttl: waiter.ttl,
            items: &waiter.items,
            note: waiter.note.as_ref(),
        };
        let acquired = self.locks.acquire_with(now, &request, true);
        freed.extend(record_lapsed(&mut self.side, now, acquired.lapsed));
        let queue = &mut self.side.get_mut()?.queue;
        let Some(fence) = acquired.fence else {
            queue.waiters.insert(id, waiter);
            return None;
        };
        queue.forget_waiter(id, &waiter);
        Some(Grant {
            waiter: id,
            deadline: now.saturating_add(waiter.ttl),
            fence,
            token: waiter.token,
            items: waiter.items,
            note: waiter.note,
        })
    }

    /// Takes every waiter out, oldest first: the key they waited on was deleted or moved, so
    /// they must be retried against whatever the key name holds now.
    pub fn take_waiters(&mut self) -> Vec<(u64, Waiter)> {
        let Some(side) = self.side.get_mut() else {
            return Vec::new();
        };
        let queue = std::mem::take(&mut side.queue);
        self.trim_side();
        queue.waiters.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::MoveAll;

    fn waiter(token: &str) -> Waiter {
        Waiter {
            token: Token::new(token.as_bytes()).expect("a token"),
            ttl: 1_000,
            items: vec![(
                Mode::Write,
                Path::parse(b"/A", &crate::path::PathLimits::default()).expect("a path"),
            )]
            .into(),
            note: None,
        }
    }

    /// The tag lives in the word while there is no side and in the side while there is one:
    /// it survives the side's coming and going and its moves by the defragmenter, and the side
    /// moves with its waiters intact.
    #[test]
    fn the_tag_and_the_side_share_a_word() {
        let mut project = Project::new();
        assert_eq!(project.tag(), 0);
        project.set_tag(Project::MAX_TAG);
        assert_eq!(project.tag(), Project::MAX_TAG);
        project.enqueue(7, waiter("first"));
        assert_eq!(project.tag(), Project::MAX_TAG, "moved into the new side");
        project.set_tag(42);
        let mut mover = MoveAll::new(0);
        assert_eq!(project.defrag(&mut mover, 0), Progress::Done);
        assert!(mover.moved >= 1, "the side moved");
        assert_eq!(project.tag(), 42);
        assert_eq!(project.waiter_ids().collect::<Vec<_>>(), vec![7]);
        assert_eq!(project.cancel(0, 7).0, Some(waiter("first")));
        assert!(
            project.side.get().is_none(),
            "the side dropped with its last waiter"
        );
        assert_eq!(project.tag(), 42, "moved back into the word");
        assert_eq!(project.clone().tag(), 0, "a copy starts without one");
        project.enqueue(8, waiter("second"));
        // Dropped with a side: the side is freed once (Miri and the leak checkers see it).
        drop(project);
    }
}
