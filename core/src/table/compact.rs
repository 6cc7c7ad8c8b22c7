//! The compact form: a small project's lock table in one allocation, as Redis keeps a small
//! hash in one listpack.
//!
//! Most projects hold a few locks. The tree form costs what a million locks need (arenas, hash
//! tables, an expiry index, side maps), some 2 KB even for one lock; here the fence counter, the
//! owners and the locks are one byte string, 45 bytes for one lock of a UUID token on a 10-byte
//! path, and every question is answered by a linear scan of it, which its size limit bounds
//! (`DEFAULT_LOCKS` locks, `MAX_BYTES` bytes). A change reads the string into a view on the
//! stack ([`State`], borrowing the bytes), edits the view, and writes a new string: one
//! allocation per change, of the string's exact size, as a listpack reallocates per insertion.
//! A live owner's renewal is the exception: its deadline has a fixed width, so it is written
//! over the old one in place.
//!
//! ```text
//! u8       owners, its top bit (`FLAG`) set when the limits follow
//! u8       locks, its top bit set when the table holds notes
//! u8, u8   only with the owners' flag: the most locks this form holds (the table's limit) and
//!          the most locks a small owner holds in the tree it turns into (`owners::SMALL`);
//!          without it, `DEFAULT_LOCKS` and `owners::SMALL`
//! u8       only with the locks' flag: notes
//! u56 LE   next fence
//! owner:   u48 LE lease deadline; u8 tag: 0 for a canonical UUID, 16 bytes follow, otherwise
//!          the token's length (1 to 128) and its bytes
//! lock:    u8 owner index, its top bit set for READ; varint: next fence - fence; only with
//!          notes, u8 note (0 for none, otherwise 1 + the note's index); varint key length,
//!          the path's trie key
//! note:    varint length, the note's bytes
//! ```
//!
//! The fixed widths bound what the form holds: a fence counter below 2^56 (the module keeps
//! fences below 2^53, `src/fences.rs`) and deadlines below 2^48 ms (the year 10889). A change
//! that would store more (only a forged payload or a test does) turns the table into a tree, as
//! one past the size limits does. The parts a project of one lock rarely needs (limits other
//! than the defaults, notes) take no byte unless present.
//!
//! Locks are kept in canonical order (path key, `WRITE` before `READ`, token text), the order of
//! listings and payloads, so a listing is the string read in order. Each note is kept once,
//! however many locks carry it. Owners and notes that nothing refers to are dropped as the
//! string is written.
//!
//! The rules are the tree's (`conflicts`, `owners`, `expiry`), decided over the list: a lock
//! blocks a request when its owner is another, its lease is live, the two paths are related and
//! one mode is `WRITE`. A request reclaims every lapsed owner it meets in its way (the form's
//! size bounds them), so the compact form never holds two conflicting locks: what the tree
//! records as cuts (a grant passing over lapsed locks nobody reclaimed) cannot arise from its
//! own decisions. When a grant decided elsewhere (a replica applying its master's effect) would
//! store a lock that conflicts with one it holds, the table turns into the tree first, which
//! records the cut, as it does past the size limits. The tree turns back into this form when it
//! shrinks below half the limits and holds nothing only the tree keeps (cuts, big or buried
//! owners): see `form`.

use std::cmp::Ordering;

use smallvec::SmallVec;

use super::{Acquired, Released, Request, Tree};
use crate::alloc::allocation;
use crate::lock::{
    uuid_text, Freed, LockInfo, Mode, Note, PackedToken, Token, TokenForm, MAX_TOKEN_BYTES,
};
use crate::path::Path;

/// The most locks the compact form holds by default; one more and the table becomes a tree.
/// Chosen by measurement (`docs/performance.md`, "Small projects"): a lock costs 30 to 60 bytes
/// here against 150 to 200 in the tree, and a decision scans every lock, so past a dozen the
/// scan costs what the tree's walk down the path does.
pub(super) const DEFAULT_LOCKS: usize = 8;

/// The most bytes the compact form holds, notes included: a few locks with a note of the
/// default `pathlock.max-note-bytes` (256) fit; one long note or path more turns the table into
/// a tree, where a note is kept once per owner and a path's segments once per node.
pub(super) const MAX_BYTES: usize = 1024;

/// The most locks any table's limit allows: owner indexes keep the top bit for the mode.
pub(super) const MAX_LOCKS: usize = 127;

const OWNERS_AT: usize = 0;
const LOCKS_AT: usize = 1;
/// The top bit of the counts, which never reach it (`MAX_LOCKS`): on the owners' count it says
/// that the limit bytes follow, on the locks' that the table holds notes.
const FLAG: u8 = 0x80;
/// The widths of the fence counter and of a deadline, and the values they stop below.
const FENCE_BYTES: usize = 7;
const DEADLINE_BYTES: usize = 6;
const FENCE_END: u64 = 1 << (8 * FENCE_BYTES);
const DEADLINE_END: u64 = 1 << (8 * DEADLINE_BYTES);

/// The tag of an owner whose token is a canonical UUID, kept as its 16 bytes.
const UUID_TAG: u8 = 0;
/// The bit of a lock's owner index that marks a `READ` lock.
const READ_BIT: u8 = 0x80;

/// A table in the compact form: the byte string described above.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Compact {
    bytes: Box<[u8]>,
}

/// A string being written into room of its exact size, which the writer computed first: one
/// new allocation. Writing past the room is a bug of this file that
/// panics (and is contained where the module calls in).
struct Writer<'a> {
    room: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.room[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }

    fn byte(&mut self, byte: u8) {
        self.room[self.at] = byte;
        self.at += 1;
    }

    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.byte(value as u8 | 0x80);
            value >>= 7;
        }
        self.byte(value as u8);
    }
}

/// A token as the compact form compares it: the 16 bytes of a canonical UUID, or the bytes of
/// any other token, borrowed. Every token has one form, as in [`PackedToken`], so two forms are
/// equal exactly when the tokens are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'a> {
    Uuid([u8; 16]),
    Text(&'a [u8]),
}

impl<'a> Tok<'a> {
    fn of(packed: &'a PackedToken) -> Tok<'a> {
        match packed.form() {
            TokenForm::Uuid(uuid) => Tok::Uuid(*uuid),
            TokenForm::Text(bytes) => Tok::Text(bytes),
        }
    }

    fn packed(self) -> PackedToken {
        match self {
            Tok::Uuid(uuid) => PackedToken::uuid(uuid),
            Tok::Text(bytes) => PackedToken::plain(bytes),
        }
    }

    fn to_token(self) -> Token {
        self.packed().to_token()
    }

    /// The order of the tokens' texts, the canonical order of locks on one path.
    fn cmp_text(self, other: Tok) -> Ordering {
        match (self, other) {
            (Tok::Uuid(a), Tok::Uuid(b)) => a.cmp(&b),
            (Tok::Text(a), Tok::Text(b)) => a.cmp(b),
            (Tok::Uuid(a), Tok::Text(b)) => uuid_text(&a)[..].cmp(b),
            (Tok::Text(a), Tok::Uuid(b)) => a.cmp(&uuid_text(&b)[..]),
        }
    }

    fn stored_len(self) -> usize {
        match self {
            Tok::Uuid(_) => 1 + 16,
            Tok::Text(bytes) => 1 + bytes.len(),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Owner<'a> {
    token: Tok<'a>,
    deadline: u64,
    /// Reclaimed or released whole during this change: its token finds it no more, and it is
    /// left out when the string is written.
    gone: bool,
}

#[derive(Clone, Copy, Debug)]
struct Lock<'a> {
    key: &'a [u8],
    mode: Mode,
    owner: u8,
    fence: u64,
    /// 0 for none, otherwise 1 + the index of the note in `State::notes`.
    note: u8,
}

/// The compact form read into a view that borrows its bytes, and the request's: what a change
/// edits before the string is written again.
#[derive(Debug)]
struct State<'a> {
    next_fence: u64,
    limit: u8,
    small: u8,
    owners: SmallVec<[Owner<'a>; 2]>,
    locks: SmallVec<[Lock<'a>; 4]>,
    notes: SmallVec<[&'a [u8]; 1]>,
    /// Whether anything changed, so that a change that changed nothing writes nothing.
    changed: bool,
}

/// Where a change left the table: as it was, in a new string, or grown into a tree.
enum Stored {
    Unchanged,
    Compact(Compact),
    Tree(Box<Tree>),
}

/// Two paths are related (one is the other or an ancestor of it) exactly when one key is a
/// prefix of the other, since every key ends on a terminator (`path`).
fn related(a: &[u8], b: &[u8]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn varint_len(value: u64) -> usize {
    (64 - value.max(1).leading_zeros() as usize).div_ceil(7)
}

/// The limits of a string that does not carry them: a table's defaults.
const DEFAULT_LIMITS: (u8, u8) = (DEFAULT_LOCKS as u8, super::owners::SMALL as u8);

/// The string's fixed part, read.
struct Header {
    owners: u8,
    locks: u8,
    limit: u8,
    small: u8,
    /// How many notes, when the string holds any (and so each lock has its note byte).
    notes: Option<u8>,
    next_fence: u64,
}

/// A cursor over the string, which only this file writes: its reads index the string
/// directly, and a malformed string is a bug of this file that panics (and is contained where
/// the module calls in), never a client's input.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> &'a [u8] {
        let taken = &self.bytes[self.at..self.at + len];
        self.at += len;
        taken
    }

    fn byte(&mut self) -> u8 {
        self.take(1)[0]
    }

    /// A little-endian number of `width` bytes (at most 8).
    fn uint(&mut self, width: usize) -> u64 {
        let mut bytes = [0; 8];
        bytes[..width].copy_from_slice(self.take(width));
        u64::from_le_bytes(bytes)
    }

    /// A reader of `bytes` past their header, and the header.
    fn after_header(bytes: &'a [u8]) -> (Reader<'a>, Header) {
        let (owners, locks) = (bytes[OWNERS_AT], bytes[LOCKS_AT]);
        let mut read = Reader {
            bytes,
            at: LOCKS_AT + 1,
        };
        let (limit, small) = if owners & FLAG != 0 {
            (read.byte(), read.byte())
        } else {
            DEFAULT_LIMITS
        };
        let notes = (locks & FLAG != 0).then(|| read.byte());
        let header = Header {
            owners: owners & !FLAG,
            locks: locks & !FLAG,
            limit,
            small,
            notes,
            next_fence: read.uint(FENCE_BYTES),
        };
        (read, header)
    }

    /// An owner's token: its tag, then a canonical UUID's 16 bytes or the token's own.
    fn token(&mut self) -> Tok<'a> {
        match self.byte() {
            UUID_TAG => {
                let mut uuid = [0; 16];
                uuid.copy_from_slice(self.take(16));
                Tok::Uuid(uuid)
            }
            len => Tok::Text(self.take(usize::from(len))),
        }
    }

    fn varint(&mut self) -> u64 {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let byte = self.byte();
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return value;
            }
            shift += 7;
        }
    }
}

impl<'a> State<'a> {
    fn parse(bytes: &'a [u8]) -> State<'a> {
        let (mut read, header) = Reader::after_header(bytes);
        let next_fence = header.next_fence;
        let owners = (0..header.owners)
            .map(|_| {
                let deadline = read.uint(DEADLINE_BYTES);
                let token = read.token();
                Owner {
                    token,
                    deadline,
                    gone: false,
                }
            })
            .collect();
        let locks = (0..header.locks)
            .map(|_| {
                let owner = read.byte();
                let gap = read.varint();
                let note = if header.notes.is_some() {
                    read.byte()
                } else {
                    0
                };
                let len = read.varint() as usize;
                Lock {
                    key: read.take(len),
                    mode: if owner & READ_BIT == 0 {
                        Mode::Write
                    } else {
                        Mode::Read
                    },
                    owner: owner & !READ_BIT,
                    fence: next_fence - gap,
                    note,
                }
            })
            .collect();
        let notes = (0..header.notes.unwrap_or(0))
            .map(|_| {
                let len = read.varint() as usize;
                read.take(len)
            })
            .collect();
        State {
            next_fence,
            limit: header.limit,
            small: header.small,
            owners,
            locks,
            notes,
            changed: false,
        }
    }

    fn empty<'b>(limit: u8, small: u8) -> State<'b> {
        State {
            next_fence: 1,
            limit,
            small,
            owners: SmallVec::new(),
            locks: SmallVec::new(),
            notes: SmallVec::new(),
            changed: true,
        }
    }

    /// The owner of `token` that holds locks, if any.
    fn find(&self, token: Tok) -> Option<u8> {
        self.owners
            .iter()
            .position(|owner| !owner.gone && owner.token == token)
            .map(|at| at as u8)
    }

    fn is_live(&self, owner: u8, now: u64) -> bool {
        self.owners[usize::from(owner)].deadline > now
    }

    fn count(&self, owner: u8) -> usize {
        self.locks.iter().filter(|lock| lock.owner == owner).count()
    }

    fn add_owner(&mut self, token: Tok<'a>, deadline: u64) -> u8 {
        self.changed = true;
        self.owners.push(Owner {
            token,
            deadline,
            gone: false,
        });
        (self.owners.len() - 1) as u8
    }

    /// Moves an owner's lease to `deadline`.
    fn set_lease(&mut self, owner: u8, deadline: u64) {
        let lease = &mut self.owners[usize::from(owner)].deadline;
        if *lease != deadline {
            *lease = deadline;
            self.changed = true;
        }
    }

    fn info(&self, lock: &Lock) -> LockInfo {
        let owner = &self.owners[usize::from(lock.owner)];
        LockInfo {
            path: Path::from_trusted_key(lock.key),
            mode: lock.mode,
            token: owner.token.to_token(),
            deadline: owner.deadline,
            fence: lock.fence,
            note: self.note_of(lock).map(Note::from),
        }
    }

    fn note_of(&self, lock: &Lock) -> Option<&'a [u8]> {
        lock.note
            .checked_sub(1)
            .map(|at| self.notes[usize::from(at)])
    }

    /// Whether `lock` conflicts with `mode` on the path whose key is `key`, whoever holds it.
    fn conflicts(lock: &Lock, mode: Mode, key: &[u8]) -> bool {
        mode.conflicts_with(lock.mode) && related(lock.key, key)
    }

    /// Whether a live lock of another owner than `me` blocks `mode` on `key` at `now`; the
    /// lapsed owners of the conflicting locks go to `dead`, each once.
    fn decide(
        &self,
        me: Option<u8>,
        mode: Mode,
        key: &[u8],
        now: u64,
        dead: &mut SmallVec<[u8; 4]>,
    ) -> bool {
        let mut blocked = false;
        for lock in &self.locks {
            if Some(lock.owner) == me || !State::conflicts(lock, mode, key) {
                continue;
            }
            if self.is_live(lock.owner, now) {
                blocked = true;
            } else if !dead.contains(&lock.owner) {
                dead.push(lock.owner);
            }
        }
        blocked
    }

    /// Takes every lock of `owner` out, counting them in `freed` and describing them when
    /// `describe` is set. The owner is gone.
    fn drop_owner(&mut self, owner: u8, describe: bool, freed: &mut Freed) {
        self.changed = true;
        for lock in self.locks.iter().filter(|lock| lock.owner == owner) {
            freed.locks += 1;
            if describe {
                freed
                    .probes
                    .push((lock.mode, Path::from_trusted_key(lock.key)));
            }
        }
        self.locks.retain(|lock| lock.owner != owner);
        self.owners[usize::from(owner)].gone = true;
    }

    /// Reclaims a lapsed owner: its token goes to `freed` with its locks.
    fn reclaim(&mut self, owner: u8, describe: bool, freed: &mut Freed) {
        freed
            .tokens
            .push(self.owners[usize::from(owner)].token.to_token());
        self.drop_owner(owner, describe, freed);
    }

    /// Frees `owner`'s locks at `paths` (every mode held there), or all of them; returns how
    /// many. An owner left with nothing is gone.
    fn release_owner(
        &mut self,
        owner: u8,
        paths: Option<&[Path]>,
        describe: bool,
        freed: &mut Freed,
    ) -> usize {
        let Some(paths) = paths else {
            let before = freed.locks;
            self.drop_owner(owner, describe, freed);
            return freed.locks - before;
        };
        let mut count = 0;
        for path in paths {
            for mode in Mode::ALL {
                let at = self
                    .locks
                    .iter()
                    .position(|l| l.owner == owner && l.mode == mode && l.key == path.key());
                if let Some(at) = at {
                    self.locks.remove(at);
                    self.changed = true;
                    count += 1;
                    if describe {
                        freed.probes.push((mode, path.clone()));
                    }
                }
            }
        }
        freed.locks += count;
        if self.count(owner) == 0 {
            self.owners[usize::from(owner)].gone = true;
        }
        count
    }

    /// The index of a note, kept once however many locks carry it.
    fn note_index(&mut self, note: &'a [u8]) -> u8 {
        match self.notes.iter().position(|&kept| kept == note) {
            Some(at) => at as u8 + 1,
            None => {
                self.notes.push(note);
                self.notes.len() as u8
            }
        }
    }

    /// Records a grant to `owner` of `items` with `fence`: re-granting a `(path, mode)` the
    /// owner holds refreshes its fence, and `note` as in [`Tree::grant_noted`]. Returns how many
    /// locks are new.
    fn grant_to(
        &mut self,
        owner: u8,
        fence: u64,
        items: &'a [(Mode, Path)],
        note: Option<&'a [u8]>,
    ) -> usize {
        self.changed = true;
        self.next_fence = self.next_fence.max(fence.saturating_add(1));
        let note = note.map(|note| {
            if note.is_empty() {
                0
            } else {
                self.note_index(note)
            }
        });
        let token = self.owners[usize::from(owner)].token;
        let mut added = 0;
        for (mode, path) in items {
            let key = path.key();
            let place = self.locks.binary_search_by(|lock| {
                lock.key
                    .cmp(key)
                    .then(lock.mode.cmp(mode))
                    .then_with(|| self.owners[usize::from(lock.owner)].token.cmp_text(token))
            });
            match place {
                Ok(at) => {
                    let lock = &mut self.locks[at];
                    lock.fence = fence;
                    if let Some(note) = note {
                        lock.note = note;
                    }
                }
                Err(at) => {
                    added += 1;
                    self.locks.insert(
                        at,
                        Lock {
                            key,
                            mode: *mode,
                            owner,
                            fence,
                            note: note.unwrap_or(0),
                        },
                    );
                }
            }
        }
        added
    }

    /// The string of this state, unless it outgrew the form's limits or holds a number wider
    /// than its field. Owners without locks and notes without locks are left out, and the
    /// others renumbered.
    fn write(&self) -> Option<Compact> {
        if self.locks.len() > usize::from(self.limit) || self.next_fence >= FENCE_END {
            return None;
        }
        // Owners keep their order and notes come in the order of their first lock, each
        // numbered anew without those that no lock refers to.
        let mut owner_at = [u8::MAX; MAX_LOCKS + 1];
        let mut note_at = [0u8; MAX_LOCKS + 2];
        let (mut owners, mut notes) = (0u8, 0u8);
        let limits = (self.limit, self.small) != DEFAULT_LIMITS;
        let mut size = LOCKS_AT + 1 + FENCE_BYTES + if limits { 2 } else { 0 };
        for lock in &self.locks {
            owner_at[usize::from(lock.owner)] = 0;
        }
        for (o, owner) in self.owners.iter().enumerate() {
            if owner_at[o] == 0 {
                if owner.deadline >= DEADLINE_END {
                    return None;
                }
                owner_at[o] = owners;
                owners += 1;
                size += DEADLINE_BYTES + owner.token.stored_len();
            }
        }
        for lock in &self.locks {
            if lock.note != 0 && note_at[usize::from(lock.note)] == 0 {
                notes += 1;
                note_at[usize::from(lock.note)] = notes;
                let len = self.notes[usize::from(lock.note - 1)].len();
                size += varint_len(len as u64) + len;
            }
            size += 1
                + varint_len(self.next_fence - lock.fence)
                + varint_len(lock.key.len() as u64)
                + lock.key.len();
        }
        if notes > 0 {
            // The notes count, and each lock's note byte.
            size += 1 + self.locks.len();
        }
        if size > MAX_BYTES {
            return None;
        }
        // Of exactly its size, so that the box below takes the allocation as it is.
        let mut bytes = vec![0; size];
        let mut out = Writer {
            room: &mut bytes[..],
            at: 0,
        };
        out.put(&[
            owners | if limits { FLAG } else { 0 },
            self.locks.len() as u8 | if notes > 0 { FLAG } else { 0 },
        ]);
        if limits {
            out.put(&[self.limit, self.small]);
        }
        if notes > 0 {
            out.byte(notes);
        }
        out.put(&self.next_fence.to_le_bytes()[..FENCE_BYTES]);
        for (o, owner) in self.owners.iter().enumerate() {
            if owner_at[o] == u8::MAX {
                continue;
            }
            out.put(&owner.deadline.to_le_bytes()[..DEADLINE_BYTES]);
            match owner.token {
                Tok::Uuid(uuid) => {
                    out.byte(UUID_TAG);
                    out.put(&uuid);
                }
                Tok::Text(bytes) => {
                    out.byte(bytes.len() as u8);
                    out.put(bytes);
                }
            }
        }
        for lock in &self.locks {
            let read = if lock.mode == Mode::Read { READ_BIT } else { 0 };
            out.byte(owner_at[usize::from(lock.owner)] | read);
            out.varint(self.next_fence - lock.fence);
            if notes > 0 {
                out.byte(note_at[usize::from(lock.note)]);
            }
            out.varint(lock.key.len() as u64);
            out.put(lock.key);
        }
        // The notes in the order of their new indexes, which is the order of their first lock.
        for new in 1..=notes {
            let old = note_at.iter().position(|&at| at == new).unwrap_or(0);
            let note = self.notes[old - 1];
            out.varint(note.len() as u64);
            out.put(note);
        }
        debug_assert_eq!(out.at, size);
        Some(Compact {
            bytes: bytes.into_boxed_slice(),
        })
    }

    /// What the change leaves: nothing new, a new string, or, past the limits, the same locks
    /// as a tree.
    fn finish(self) -> Stored {
        if !self.changed {
            return Stored::Unchanged;
        }
        match self.write() {
            Some(compact) => Stored::Compact(compact),
            None => Stored::Tree(Box::new(self.to_tree())),
        }
    }

    /// The same locks, owners, leases, fences, notes and counter as a tree. The compact form
    /// holds no two conflicting locks, so the tree records no cut.
    fn to_tree(&self) -> Tree {
        let mut tree = Tree::with_limits(usize::from(self.small), usize::from(self.limit));
        tree.raise_next_fence(self.next_fence);
        let notes: SmallVec<[Note; 1]> = self.notes.iter().map(|&n| Note::from(n)).collect();
        let tokens: SmallVec<[Token; 2]> = self.owners.iter().map(|o| o.token.to_token()).collect();
        for lock in &self.locks {
            let owner = usize::from(lock.owner);
            let note = lock.note.checked_sub(1).map(|at| &notes[usize::from(at)]);
            tree.grant_noted(
                &tokens[owner],
                self.owners[owner].deadline,
                lock.fence,
                &[(lock.mode, Path::from_trusted_key(lock.key))],
                note,
            );
        }
        tree
    }
}

impl Compact {
    /// The string.
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The string's allocation: to write a deadline over in place, and for `defrag` to move.
    pub(super) fn bytes_mut(&mut self) -> &mut Box<[u8]> {
        &mut self.bytes
    }

    /// An empty table whose compact form holds up to `limit` locks (at least 1, at most
    /// `MAX_LOCKS`) and whose tree makes owners big past `small` locks (at most 255).
    pub(super) fn new(limit: usize, small: usize) -> Compact {
        let limit = limit.clamp(1, MAX_LOCKS) as u8;
        let small = small.min(usize::from(u8::MAX)) as u8;
        // An empty table's string is its header, which no limit makes too long.
        State::empty(limit, small).write().unwrap_or(Compact {
            bytes: Box::new([]),
        })
    }

    /// The compact form of `tree`, when it fits in half the limits (so that a table going up
    /// and down around a limit does not turn back and forth) and holds nothing the compact form
    /// does not keep: cuts, big owners, owners being freed, two conflicting locks.
    pub(super) fn from_tree(tree: &Tree) -> Option<Compact> {
        Compact::from_tree_within(tree, 2)
    }

    /// The compact form of a tree a load built, when it fits in the whole limits: a load does
    /// not go up and down around them, and a project of up to the limit's locks costs what the
    /// compact form costs once reloaded, as it did before it was saved.
    pub(super) fn from_loaded(tree: &Tree) -> Option<Compact> {
        let (limit, _) = tree.limits();
        if tree.len() > limit || !tree.may_compact_within(1) {
            return None;
        }
        Compact::from_tree_within(tree, 1)
    }

    /// The compact form of `tree` when it fits in the limits divided by `share`.
    fn from_tree_within(tree: &Tree, share: usize) -> Option<Compact> {
        let locks = tree.stored();
        let tokens: SmallVec<[PackedToken; 4]> =
            locks.iter().map(|l| PackedToken::new(&l.token)).collect();
        let (limit, small) = tree.limits();
        let mut state = State::empty(limit.clamp(1, MAX_LOCKS) as u8, small.min(255) as u8);
        state.next_fence = tree.next_fence();
        for (lock, token) in locks.iter().zip(&tokens) {
            let token = Tok::of(token);
            let owner = match state.find(token) {
                Some(owner) => owner,
                None => state.add_owner(token, lock.deadline),
            };
            let note = lock
                .note
                .as_deref()
                .map(|n| state.note_index(n))
                .unwrap_or(0);
            state.locks.push(Lock {
                key: lock.path.key(),
                mode: lock.mode,
                owner,
                fence: lock.fence,
                note,
            });
        }
        let conflicting = state.locks.iter().enumerate().any(|(i, a)| {
            state.locks[i + 1..]
                .iter()
                .any(|b| a.owner != b.owner && State::conflicts(a, b.mode, b.key))
        });
        if conflicting || state.locks.len() > usize::from(state.limit) / share {
            return None;
        }
        let compact = state.write()?;
        (compact.bytes().len() <= MAX_BYTES / share).then_some(compact)
    }

    /// The same locks as a tree (see `State::to_tree`), for the dense encoding's walk.
    pub(super) fn to_tree(&self) -> Tree {
        self.state().to_tree()
    }

    fn state(&self) -> State<'_> {
        State::parse(self.bytes())
    }

    /// Takes what a change left: `Some` tree when the table outgrew this form.
    fn keep(&mut self, stored: Stored) -> Option<Box<Tree>> {
        match stored {
            Stored::Unchanged => None,
            Stored::Compact(compact) => {
                *self = compact;
                None
            }
            Stored::Tree(tree) => Some(tree),
        }
    }

    pub(super) fn len(&self) -> usize {
        usize::from(self.bytes()[LOCKS_AT] & !FLAG)
    }

    pub(super) fn next_fence(&self) -> u64 {
        self.state().next_fence
    }

    /// Raises the counter. The locks keep their fences, stored as gaps below it, so they are
    /// written again; the longer gaps may take the string past `MAX_BYTES`.
    pub(super) fn raise_next_fence(&mut self, next: u64) -> Option<Box<Tree>> {
        let stored = {
            let mut state = self.state();
            if next > state.next_fence {
                state.next_fence = next;
                state.changed = true;
            }
            state.finish()
        };
        self.keep(stored)
    }

    /// The bytes of the string's allocation, as the allocator rounds them.
    pub(super) fn memory(&self) -> usize {
        allocation(self.bytes.len())
    }

    pub(super) fn node_count(&self) -> usize {
        let state = self.state();
        if state.locks.is_empty() {
            return 0;
        }
        let mut nodes: SmallVec<[&[u8]; 8]> = SmallVec::new();
        for lock in &state.locks {
            for (at, &byte) in lock.key.iter().enumerate() {
                if byte == 0 {
                    nodes.push(&lock.key[..=at]);
                }
            }
        }
        nodes.sort_unstable();
        nodes.dedup();
        nodes.len() + 1
    }

    pub(super) fn next_deadline(&self) -> Option<u64> {
        let state = self.state();
        state.owners.iter().map(|owner| owner.deadline).min()
    }

    pub(super) fn acquire_with(
        &mut self,
        now: u64,
        request: &Request,
        reclaim: bool,
    ) -> (Acquired, Option<Box<Tree>>) {
        let packed = PackedToken::new(request.token);
        let (acquired, stored) = {
            let mut state = self.state();
            let token = Tok::of(&packed);
            let mut me = if request.generated {
                None
            } else {
                state.find(token)
            };
            let mut lapsed = Freed::default();
            if let Some(owner) = me.filter(|&o| !state.is_live(o, now)) {
                state.reclaim(owner, true, &mut lapsed);
                me = None;
            }
            let mut dead = SmallVec::new();
            let blocked = request
                .items
                .iter()
                .any(|(mode, path)| state.decide(me, *mode, path.key(), now, &mut dead));
            if reclaim {
                for &owner in &dead {
                    state.reclaim(owner, true, &mut lapsed);
                }
            }
            if blocked {
                let acquired = Acquired {
                    fence: None,
                    lapsed,
                };
                (acquired, state.finish())
            } else if !reclaim && !dead.is_empty() {
                // The grant would pass over lapsed locks that stay: the tree records that.
                let mut tree = state.to_tree();
                let mut acquired = tree.acquire_with(now, request, false);
                lapsed.extend(std::mem::take(&mut acquired.lapsed));
                acquired.lapsed = lapsed;
                (acquired, Stored::Tree(Box::new(tree)))
            } else {
                let fence = state.next_fence;
                let deadline = super::lease(now.saturating_add(request.ttl));
                let owner = match me {
                    Some(owner) => {
                        if deadline > state.owners[usize::from(owner)].deadline {
                            state.set_lease(owner, deadline);
                        }
                        owner
                    }
                    None => state.add_owner(token, deadline),
                };
                state.grant_to(owner, fence, request.items, request.note.map(|n| &n[..]));
                let acquired = Acquired {
                    fence: Some(fence),
                    lapsed,
                };
                (acquired, state.finish())
            }
        };
        (acquired, self.keep(stored))
    }

    pub(super) fn clear_way(
        &mut self,
        now: u64,
        token: &Token,
        items: &[(Mode, Path)],
    ) -> (Freed, Option<Box<Tree>>) {
        let packed = PackedToken::new(token);
        let (lapsed, stored) = {
            let mut state = self.state();
            let mut me = state.find(Tok::of(&packed));
            let mut lapsed = Freed::default();
            if let Some(owner) = me.filter(|&o| !state.is_live(o, now)) {
                state.reclaim(owner, true, &mut lapsed);
                me = None;
            }
            let mut dead = SmallVec::new();
            for (mode, path) in items {
                state.decide(me, *mode, path.key(), now, &mut dead);
            }
            for &owner in &dead {
                state.reclaim(owner, true, &mut lapsed);
            }
            (lapsed, state.finish())
        };
        (lapsed, self.keep(stored))
    }

    pub(super) fn grant_noted(
        &mut self,
        token: &Token,
        deadline: u64,
        fence: u64,
        items: &[(Mode, Path)],
        note: Option<&Note>,
    ) -> (usize, Option<Box<Tree>>) {
        let packed = PackedToken::new(token);
        let (added, stored) = {
            let mut state = self.state();
            let tok = Tok::of(&packed);
            let me = state.find(tok);
            let conflicting = items.iter().any(|(mode, path)| {
                state
                    .locks
                    .iter()
                    .any(|lock| Some(lock.owner) != me && State::conflicts(lock, *mode, path.key()))
            });
            if conflicting {
                // A grant decided elsewhere over locks this server still holds: the tree keeps
                // both and records which one persistence leaves out (`cuts`).
                let mut tree = state.to_tree();
                let added = tree.grant_noted(token, deadline, fence, items, note);
                (added, Stored::Tree(Box::new(tree)))
            } else {
                let owner = match me {
                    Some(owner) => {
                        if deadline > state.owners[usize::from(owner)].deadline {
                            state.set_lease(owner, deadline);
                        }
                        owner
                    }
                    None => state.add_owner(tok, deadline),
                };
                let added = state.grant_to(owner, fence, items, note.map(|n| &n[..]));
                (added, state.finish())
            }
        };
        (added, self.keep(stored))
    }

    pub(super) fn release(
        &mut self,
        now: u64,
        token: &Token,
        paths: Option<&[Path]>,
        describe: bool,
    ) -> (Released, Option<Box<Tree>>) {
        let packed = PackedToken::new(token);
        let (released, stored) = {
            let mut state = self.state();
            let mut released = Released::default();
            if let Some(owner) = state.find(Tok::of(&packed)) {
                if state.is_live(owner, now) {
                    released.count =
                        state.release_owner(owner, paths, describe, &mut released.freed);
                } else {
                    state.reclaim(owner, describe, &mut released.lapsed);
                }
            }
            (released, state.finish())
        };
        (released, self.keep(stored))
    }

    pub(super) fn release_decided(
        &mut self,
        token: &Token,
        paths: Option<&[Path]>,
    ) -> (usize, Option<Box<Tree>>) {
        let packed = PackedToken::new(token);
        let (count, stored) = {
            let mut state = self.state();
            let count = match state.find(Tok::of(&packed)) {
                Some(owner) => state.release_owner(owner, paths, false, &mut Freed::default()),
                None => 0,
            };
            (count, state.finish())
        };
        (count, self.keep(stored))
    }

    /// Sets `token`'s lease, unless it lapsed by `now` (`None` for a master's decision, which
    /// reads no clock): then it is reclaimed and nothing is renewed.
    ///
    /// A live owner's renewal writes its new deadline over the old one in the string, as the
    /// tree moves one number: the deadline has a fixed width, so nothing else moves, the
    /// string keeps its length (and the memory estimate its figure), and only the locks are
    /// scanned to count the owner's. Reading the whole string into a view and writing a new
    /// one made a renewal dearer here than in the tree (`docs/performance.md`, "Small
    /// projects"). A lapsed owner is reclaimed through the view, as every other change is.
    pub(super) fn renew(
        &mut self,
        now: Option<u64>,
        token: &Token,
        deadline: u64,
    ) -> ((usize, Freed), Option<Box<Tree>>) {
        let packed = PackedToken::new(token);
        let (found, locks_at) = self.owner_at(Tok::of(&packed));
        let Some((at, owner)) = found else {
            return ((0, Freed::default()), None);
        };
        let lease = Reader {
            bytes: self.bytes(),
            at,
        }
        .uint(DEADLINE_BYTES);
        if now.is_some_and(|now| lease <= now) {
            let (lapsed, stored) = {
                let mut state = self.state();
                let mut lapsed = Freed::default();
                state.reclaim(owner, true, &mut lapsed);
                (lapsed, state.finish())
            };
            return ((0, lapsed), self.keep(stored));
        }
        if deadline >= DEADLINE_END {
            // Wider than its field: the view writes no string, and the table turns into a tree.
            let (count, stored) = {
                let mut state = self.state();
                state.set_lease(owner, deadline);
                (state.count(owner), state.finish())
            };
            return ((count, Freed::default()), self.keep(stored));
        }
        self.bytes_mut()[at..at + DEADLINE_BYTES]
            .copy_from_slice(&deadline.to_le_bytes()[..DEADLINE_BYTES]);
        ((self.count_of(owner, locks_at), Freed::default()), None)
    }

    /// Where the owner of `token` starts in the string (at its deadline) and its index, if it
    /// holds locks (every owner the string keeps does, since the writer leaves out the others),
    /// and where the locks start.
    fn owner_at(&self, token: Tok) -> (Option<(usize, u8)>, usize) {
        let (mut read, header) = Reader::after_header(self.bytes());
        let mut found = None;
        for owner in 0..header.owners {
            let at = read.at;
            read.take(DEADLINE_BYTES);
            if read.token() == token {
                found = Some((at, owner));
            }
        }
        (found, read.at)
    }

    /// How many locks `owner` holds, read from the locks starting at `at` without a view.
    fn count_of(&self, owner: u8, at: usize) -> usize {
        let bytes = self.bytes();
        let locks = bytes[LOCKS_AT];
        let mut read = Reader { bytes, at };
        let mut count = 0;
        for _ in 0..locks & !FLAG {
            if read.byte() & !READ_BIT == owner {
                count += 1;
            }
            read.varint();
            if locks & FLAG != 0 {
                read.byte();
            }
            let len = read.varint() as usize;
            read.take(len);
        }
        count
    }

    /// Reclaims up to `max_owners` owners whose lease lapsed by `now`, earliest first, or only
    /// `token`'s when given.
    pub(super) fn reclaim(
        &mut self,
        now: u64,
        max_owners: usize,
        token: Option<&Token>,
        describe: bool,
    ) -> (Freed, Option<Box<Tree>>) {
        let packed = token.map(PackedToken::new);
        let (freed, stored) = {
            let mut state = self.state();
            let mut freed = Freed::default();
            if let Some(packed) = &packed {
                if let Some(owner) = state.find(Tok::of(packed)) {
                    if !state.is_live(owner, now) {
                        state.reclaim(owner, describe, &mut freed);
                    }
                }
            } else {
                for _ in 0..max_owners {
                    let due = (0..state.owners.len() as u8)
                        .filter(|&o| !state.owners[usize::from(o)].gone && !state.is_live(o, now))
                        .min_by_key(|&o| state.owners[usize::from(o)].deadline);
                    let Some(owner) = due else {
                        break;
                    };
                    state.reclaim(owner, describe, &mut freed);
                }
            }
            (freed, state.finish())
        };
        (freed, self.keep(stored))
    }

    pub(super) fn is_blocked(&self, now: u64, token: &Token, mode: Mode, path: &Path) -> bool {
        let packed = PackedToken::new(token);
        let state = self.state();
        let me = state.find(Tok::of(&packed));
        state.decide(me, mode, path.key(), now, &mut SmallVec::new())
    }

    pub(super) fn blockers(
        &self,
        now: u64,
        token: Option<&Token>,
        items: &[(Mode, Path)],
    ) -> Vec<LockInfo> {
        let packed = token.map(PackedToken::new);
        let state = self.state();
        let me = packed.as_ref().and_then(|p| state.find(Tok::of(p)));
        state
            .locks
            .iter()
            .filter(|lock| {
                Some(lock.owner) != me
                    && state.is_live(lock.owner, now)
                    && items
                        .iter()
                        .any(|(mode, path)| State::conflicts(lock, *mode, path.key()))
            })
            .map(|lock| state.info(lock))
            .collect()
    }

    /// The live locks at or beneath `under`, of `token` only when given, in canonical order.
    pub(super) fn locks(&self, now: u64, under: &Path, token: Option<&Token>) -> Vec<LockInfo> {
        let packed = token.map(PackedToken::new);
        let state = self.state();
        let only = match &packed {
            Some(packed) => match state.find(Tok::of(packed)) {
                Some(owner) => Some(owner),
                None => return Vec::new(),
            },
            None => None,
        };
        state
            .locks
            .iter()
            .filter(|lock| {
                only.is_none_or(|owner| lock.owner == owner)
                    && state.is_live(lock.owner, now)
                    && lock.key.starts_with(under.key())
            })
            .map(|lock| state.info(lock))
            .collect()
    }

    /// Every stored lock, in canonical order: the compact form holds no cut lock and no owner
    /// being freed, so these are also the locks a payload carries.
    pub(super) fn all(&self) -> Vec<LockInfo> {
        let state = self.state();
        state.locks.iter().map(|lock| state.info(lock)).collect()
    }

    /// Checks the string against everything its writer promises; see the top of this file.
    pub(super) fn check_integrity(&self) -> Result<(), String> {
        let bytes = self.bytes();
        if bytes.len() > MAX_BYTES {
            return Err(format!("a compact table of {} bytes", bytes.len()));
        }
        let state = self.state();
        let limit = usize::from(state.limit);
        if limit == 0 || limit > MAX_LOCKS || state.locks.len() > limit {
            return Err(format!(
                "{} locks in a compact table of limit {limit}",
                state.locks.len()
            ));
        }
        // Written again, the view gives the same bytes: nothing lies past its end, and no owner
        // or note is kept that no lock refers to (the writer leaves those out).
        if state.write().as_ref().map(Compact::bytes) != Some(bytes) {
            return Err("the compact table is not as its writer writes it".into());
        }
        for (o, owner) in state.owners.iter().enumerate() {
            let token = owner.token.to_token();
            if token.as_bytes().is_empty() || token.as_bytes().len() > MAX_TOKEN_BYTES {
                return Err(format!("owner {o} has a token of a wrong length"));
            }
            if Tok::of(&PackedToken::new(&token)) != owner.token {
                return Err(format!("owner {o}'s token is not in its one form"));
            }
            if state.count(o as u8) == 0 {
                return Err(format!("owner {o} holds nothing"));
            }
        }
        for (n, note) in state.notes.iter().enumerate() {
            if note.is_empty() || state.notes[..n].contains(note) {
                return Err(format!("note {n} is empty or kept twice"));
            }
        }
        for (i, lock) in state.locks.iter().enumerate() {
            if usize::from(lock.owner) >= state.owners.len()
                || usize::from(lock.note) > state.notes.len()
            {
                return Err(format!("lock {i} refers to nothing"));
            }
            if lock.fence == 0 || lock.fence >= state.next_fence {
                return Err(format!("lock {i}'s fence is not below the counter"));
            }
            if Path::from_key(lock.key.to_vec()).is_none() {
                return Err(format!("lock {i} has a malformed path"));
            }
            if let Some(next) = state.locks.get(i + 1) {
                let by = lock
                    .key
                    .cmp(next.key)
                    .then(lock.mode.cmp(&next.mode))
                    .then_with(|| {
                        state.owners[usize::from(lock.owner)]
                            .token
                            .cmp_text(state.owners[usize::from(next.owner)].token)
                    });
                if by != Ordering::Less {
                    return Err(format!("locks {i} and {} are out of order", i + 1));
                }
            }
            for other in &state.locks[i + 1..] {
                if other.owner != lock.owner && State::conflicts(lock, other.mode, other.key) {
                    return Err(format!("lock {i} conflicts with another owner's"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> Path {
        Path::parse(text.as_bytes(), &Default::default()).expect("a path")
    }

    /// A project of one lock as the module stores it (a UUID token, a fence counter from
    /// today's clock floor, a deadline an hour from now, a 10-byte path key) takes 45 bytes
    /// (52 before the header's diet), one 64-byte glibc chunk. What a small project rarely
    /// holds (a note, limits other than the defaults, a second owner) takes bytes only while
    /// held.
    #[test]
    fn a_project_of_one_lock_takes_45_bytes() {
        let uuid = Token::new(b"0f9c2a3e-5b7d-4c1e-9a2b-3c4d5e6f7a8b").expect("a token");
        let other = Token::new(b"worker-7").expect("a token");
        let (now, fence) = (1_800_000_000_000, 1_800_000_000_000_000);
        let deadline = now + 3_600_000;
        let mut table = Compact::new(DEFAULT_LOCKS, super::super::owners::SMALL);
        assert!(table.raise_next_fence(fence).is_none());
        let item = [(Mode::Write, path("/A/doc.txt"))];
        assert_eq!(item[0].1.key().len(), 10);
        assert!(table
            .grant_noted(&uuid, deadline, fence, &item, None)
            .1
            .is_none());
        assert_eq!(table.bytes().len(), 45);
        assert_eq!(table.memory(), allocation(45));
        table.check_integrity().expect("integrity");

        // A renewal writes in place.
        assert_eq!(table.renew(Some(now), &uuid, deadline + 1).0 .0, 1);
        assert_eq!(table.next_deadline(), Some(deadline + 1));

        // A note takes the notes count, a byte per lock and itself; a second owner its lease,
        // token and lock; the string is as short as before once they go.
        let note = Note::from(&b"moved"[..]);
        let (_, grown) = table.grant_noted(&uuid, deadline, fence, &item, Some(&note));
        assert!(grown.is_none());
        assert_eq!(table.bytes().len(), 45 + 1 + 1 + 6);
        let (_, grown) = table.grant_noted(
            &other,
            deadline,
            fence + 1,
            &[(Mode::Read, path("/B"))],
            None,
        );
        assert!(grown.is_none());
        assert!(table.memory() >= table.bytes().len());
        table.check_integrity().expect("integrity");
        let (count, grown) = table.release_decided(&other, None);
        assert_eq!((count, grown.is_none()), (1, true));
        assert_eq!(table.bytes().len(), 45 + 8);
        assert!(table
            .grant_noted(&uuid, deadline, fence, &item, Some(&Note::from(&b""[..])))
            .1
            .is_none());
        assert_eq!(table.bytes().len(), 45);
        assert_eq!(table.all()[0].fence, fence);
        table.check_integrity().expect("integrity");

        // Limits other than the defaults take their two bytes.
        let mut small = Compact::new(4, 2);
        assert!(small
            .grant_noted(&uuid, deadline, 1, &item, None)
            .1
            .is_none());
        assert_eq!(small.bytes().len(), 45 + 2);
        small.check_integrity().expect("integrity");
    }

    /// A number wider than its field (a deadline from 2^48 ms, a fence counter from 2^56) is
    /// kept by the tree: a grant, a renewal or a raised counter that would store one turns the
    /// table into a tree holding it, and the tree does not turn back while it holds it.
    #[test]
    fn numbers_wider_than_their_fields_turn_the_table_into_a_tree() {
        let token = Token::new(b"worker-7").expect("a token");
        let item = [(Mode::Write, path("/a"))];
        let mut table = Compact::new(DEFAULT_LOCKS, 8);
        let (_, grown) = table.grant_noted(&token, DEADLINE_END, 1, &item, None);
        let tree = grown.expect("a deadline of 2^48 turns the table into a tree");
        assert_eq!(tree.next_deadline(), Some(DEADLINE_END));
        assert!(Compact::from_tree(&tree).is_none());

        let mut table = Compact::new(DEFAULT_LOCKS, 8);
        assert!(table
            .grant_noted(&token, DEADLINE_END - 1, 1, &item, None)
            .1
            .is_none());
        let ((renewed, _), grown) = table.renew(Some(0), &token, u64::MAX);
        assert_eq!(renewed, 1);
        let tree = grown.expect("a renewal to u64::MAX turns the table into a tree");
        assert_eq!(tree.next_deadline(), Some(u64::MAX));

        let mut table = Compact::new(DEFAULT_LOCKS, 8);
        assert!(table.raise_next_fence(FENCE_END - 1).is_none());
        let tree = table
            .raise_next_fence(FENCE_END)
            .expect("a counter of 2^56 turns the table into a tree");
        assert_eq!(tree.next_fence(), FENCE_END);
    }

    /// A renewal writes the deadline in place: the same allocation, the string the writer
    /// would write for the renewed view, and the other owner's lease and the locks untouched;
    /// a lapsed owner is reclaimed instead, as the view's path did.
    #[test]
    fn a_renewal_writes_the_deadline_in_place() {
        let uuid = Token::new(b"0f9c2a3e-5b7d-4c1e-9a2b-3c4d5e6f7a8b").expect("a token");
        let plain = Token::new(b"worker-7").expect("a token");
        let mut table = Compact::new(DEFAULT_LOCKS, 8);
        let (_, grown) = table.grant_noted(&plain, 500, 1, &[(Mode::Read, path("/a"))], None);
        assert!(grown.is_none());
        let items = [(Mode::Write, path("/b/c")), (Mode::Read, path("/a"))];
        let (_, grown) = table.grant_noted(&uuid, 300, 2, &items, None);
        assert!(grown.is_none());
        let before = table.all();
        let at = table.bytes().as_ptr();

        let ((renewed, lapsed), grown) = table.renew(Some(100), &uuid, 900);
        assert_eq!(renewed, 2);
        assert!(lapsed.is_empty());
        assert!(grown.is_none());
        assert_eq!(table.bytes().as_ptr(), at, "the string is not reallocated");
        table
            .check_integrity()
            .expect("the renewed string is the writer's");
        for (old, new) in before.iter().zip(table.all()) {
            let expected = if old.token == uuid { 900 } else { old.deadline };
            assert_eq!(
                (new.deadline, &new.path, new.fence),
                (expected, &old.path, old.fence)
            );
        }
        assert_eq!(table.next_deadline(), Some(500));

        let ((renewed, _), _) = table.renew(None, &Token::new(b"nobody").expect("a token"), 900);
        assert_eq!(renewed, 0, "a token holding nothing renews nothing");

        // Past its lease the plain owner is reclaimed, not revived.
        let ((renewed, lapsed), grown) = table.renew(Some(500), &plain, 2_000);
        assert_eq!(renewed, 0);
        assert_eq!((&lapsed.tokens[..], lapsed.locks), (&[plain][..], 1));
        assert!(grown.is_none());
        assert_eq!(table.len(), 2);
        assert_eq!(table.next_deadline(), Some(900));
        table
            .check_integrity()
            .expect("the string after the reclaim");
    }
}
