//! A lock table as a sequence of numbers and byte strings, and back: the payload of the Redis
//! type's RDB encoding (and of `DUMP`/`RESTORE`/`MIGRATE`), without Redis.
//!
//! Version 3, the one [`encode`] writes, is dense: the locks, in tree order (path, then `WRITE`
//! before `READ`, then token), are packed into a few byte strings rather than written as six RDB
//! items each, so that a project of a million locks saves, loads and moves at about what a hash
//! of a million fields costs.
//!
//! ```text
//! unsigned  next fence
//! buffer*   chunks of about CHUNK_BYTES, each holding whole records (at least one)
//! buffer    empty: the end
//!
//! the records, across the chunks (varint: LEB128; zigzag: a signed difference as a varint):
//!   varint   the number of owners
//!   per owner, in the order of their leases (as the expiry index files them):
//!     byte     0: a token of its bytes, 1: a canonical UUID
//!     token    0: varint length, bytes; 1: the UUID's 16 bytes
//!     varint   its lease after the previous owner's (the first one's whole)
//!   per lock, in tree order (path, then WRITE before READ, then token):
//!     varint   up: segments of the previous lock's path to leave (0 for the first lock)
//!     varint   down: segments to descend from there, each as
//!                varint length, bytes (escaped as in a trie key, without the terminator)
//!     byte     bit 0 the mode (0 WRITE, 1 READ); bit 1 the owner: 0 the previous lock's,
//!              1 named by its number (in the order above); bits 2-3 the note: 0 none,
//!              1 the last new note again, 2 a new one; the others zero
//!     varint   the owner's number, when named
//!     zigzag   fence after the previous lock's
//!     note     when new: varint length, bytes
//! ```
//!
//! Paths share their prefixes (a lock names only the segments that differ from the lock before
//! it), an owner's token and lease are written once however many locks it holds, the locks of
//! one grant share their note, and fences and leases, which come in runs, are differences.
//! Loading builds the table in the same order (`table::dense`): owners come in the order the
//! expiry index keeps them, the segments a lock descends are a new node (one for all of them,
//! split where a later lock branches off, in the shape commands give the tree), and conflicts are
//! read from the path the builder holds, so no grant is decided again.
//!
//! Versions 1 and 2 wrote one RDB item per field, per lock in the same order:
//!
//! ```text
//! unsigned  next fence
//! unsigned  number of locks
//! per lock:
//!   buffer    path trie key
//!   unsigned  mode (0 WRITE, 1 READ)
//!   buffer    token
//!   unsigned  deadline, absolute milliseconds (the owner's lease: equal for its locks)
//!   unsigned  fence
//!   buffer    note, empty when the lock has none      (from version 2)
//! ```
//!
//! [`decode_version`] reads every version up to [`VERSION`], and [`decode`] the current one. A
//! token's locks are one lease: a payload of an older engine, whose locks of one token could
//! have several deadlines, loads with the latest of them for all.
//!
//! The Redis layer reads and writes the items through `RedisModule_Load*`/`Save*`; tests and the
//! fuzz target read them from plain bytes ([`ByteSource`]). Decoding checks every field, the
//! strict order, the counter against the caller's ceiling, the fences against the counter and
//! that no two locks conflict, so a damaged file or a hand-made `RESTORE` payload is refused
//! instead of becoming a table whose indexes disagree, that grants one path to two owners, or
//! whose counter no server can have reached. It builds a table of its own, which the caller
//! takes only when the whole payload was read.

use std::fmt;

use smallvec::SmallVec;

use crate::lock::{Mode, Note, PackedToken, Token, TokenForm, MAX_TOKEN_BYTES, NOTE_CEILING};
use crate::path::{Path, PathLimits};
use crate::table::dense::{Builder, Refused};
use crate::table::LockTable;

/// The version of the layout [`encode`] writes: 2 added the notes, 3 is the dense encoding.
pub const VERSION: u32 = 3;

/// About how many bytes of locks a chunk of version 3 holds: a chunk is written once a lock
/// takes it past this. Small enough that neither side holds much more than the payload itself,
/// large enough that the RDB layer's per-string cost (an opcode, a length, a compression
/// attempt) is paid some ten times per megabyte.
pub const CHUNK_BYTES: usize = 1 << 16;

/// Where an encoded table is read from, item by item.
pub trait Source {
    /// Reads the next unsigned integer; `None` when the payload ends or cannot be read.
    fn unsigned(&mut self) -> Option<u64>;
    /// Reads the next byte string; `None` when the payload ends or cannot be read.
    fn buffer(&mut self) -> Option<Vec<u8>>;
    /// Reads the next byte string and hands it to `read`, without copying it where the source
    /// can lend it; `None` when the payload ends or cannot be read.
    fn read_buffer<R>(&mut self, read: impl FnOnce(&[u8]) -> R) -> Option<R> {
        self.buffer().map(|bytes| read(&bytes))
    }
}

/// Where an encoded table is written, item by item.
pub trait Sink {
    fn unsigned(&mut self, value: u64);
    fn buffer(&mut self, bytes: &[u8]);
}

/// Why a payload was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    Short,
    MalformedPath,
    UnknownMode(u64),
    BadToken,
    FenceOutOfRange {
        fence: u64,
        next: u64,
    },
    /// The counter is above the highest one the caller accepts (the module's fence rule).
    CounterAboveCeiling {
        next: u64,
        ceiling: u64,
    },
    OutOfOrder,
    Conflicting,
    NoteTooLong(usize),
    UnknownVersion(u32),
    /// A chunk of the dense encoding that no encoder writes: what is wrong with it.
    Malformed(&'static str),
    /// A token introduced as a new owner twice.
    RepeatedOwner,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Short => f.write_str("short or unreadable payload"),
            DecodeError::MalformedPath => f.write_str("malformed or too deep path"),
            DecodeError::UnknownMode(code) => write!(f, "unknown mode {code}"),
            DecodeError::BadToken => f.write_str("token of 0 or more than 128 bytes"),
            DecodeError::FenceOutOfRange { fence, next } => {
                write!(f, "fence {fence} outside 1..{next}")
            }
            DecodeError::CounterAboveCeiling { next, ceiling } => {
                write!(f, "fence counter {next} above the ceiling {ceiling}")
            }
            DecodeError::OutOfOrder => f.write_str("locks out of order or repeated"),
            DecodeError::Conflicting => f.write_str("two owners hold conflicting locks"),
            DecodeError::NoteTooLong(len) => {
                write!(
                    f,
                    "note of {len} bytes, above the {NOTE_CEILING} any server allows"
                )
            }
            DecodeError::UnknownVersion(version) => {
                write!(
                    f,
                    "encoding version {version}, above the {VERSION} this engine reads"
                )
            }
            DecodeError::Malformed(what) => write!(f, "malformed chunk: {what}"),
            DecodeError::RepeatedOwner => f.write_str("one token introduced twice"),
        }
    }
}

impl From<Refused> for DecodeError {
    fn from(refused: Refused) -> DecodeError {
        match refused {
            Refused::OutOfOrder => DecodeError::OutOfOrder,
            Refused::Conflicting => DecodeError::Conflicting,
            Refused::RepeatedOwner => DecodeError::RepeatedOwner,
            Refused::UnknownOwner => DecodeError::Malformed("an owner that was never introduced"),
            Refused::TooLarge => DecodeError::Malformed("more nodes or owners than a table holds"),
        }
    }
}

fn mode_from_code(code: u64) -> Result<Mode, DecodeError> {
    match code {
        0 => Ok(Mode::Write),
        1 => Ok(Mode::Read),
        _ => Err(DecodeError::UnknownMode(code)),
    }
}

/// The kinds of token of an owner.
const TOKEN_PLAIN: u8 = 0;
const TOKEN_UUID: u8 = 1;
/// The flags byte of a lock.
const READ: u8 = 1;
const OWNER_NAMED: u8 = 1 << 1;
const NOTE_SHIFT: u8 = 2;
const NOTE_NONE: u8 = 0;
const NOTE_LAST: u8 = 1;
const NOTE_NEW: u8 = 2;
const FLAGS_USED: u8 = 0b0000_1111;

#[inline]
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    // Most numbers of a payload (a step's counts, a segment's length, a lease's difference) fit
    // in one byte: written without the buffer below.
    if value < 0x80 {
        out.push(value as u8);
        return;
    }
    // Built apart and appended at once: one check of the vector's capacity, not one a byte.
    let mut bytes = [0u8; 10];
    let mut len = 0;
    while value >= 0x80 {
        bytes[len] = value as u8 | 0x80;
        value >>= 7;
        len += 1;
    }
    bytes[len] = value as u8;
    out.extend_from_slice(&bytes[..=len]);
}

/// A fence as its difference from the previous one, folded so that a small step back is small.
fn zigzag(from: u64, to: u64) -> u64 {
    let delta = to.wrapping_sub(from) as i64;
    ((delta << 1) ^ (delta >> 63)) as u64
}

fn unzigzag(from: u64, folded: u64) -> u64 {
    let delta = (folded >> 1) as i64 ^ -((folded & 1) as i64);
    from.wrapping_add(delta as u64)
}

/// Writes `table`'s locks in the order and layout above, at [`VERSION`]: those
/// [`LockTable::iter`] lists, which leaves out the lapsed locks a later grant passed over, so no
/// two locks of a payload conflict. One walk of the tree, a chunk at a time; no list of the
/// locks is built.
pub fn encode(table: &LockTable, sink: &mut impl Sink) {
    sink.unsigned(table.next_fence());
    let table = table.as_tree();
    let mut chunk = Chunk {
        bytes: Vec::with_capacity(CHUNK_BYTES + 1024),
        sink,
    };
    put_varint(&mut chunk.bytes, table.filed_owners() as u64);
    let mut previous_lease = 0;
    let numbers = table.for_each_owner(&mut |token, lease| {
        let bytes = chunk.bytes_mut();
        match token.form() {
            TokenForm::Uuid(uuid) => {
                bytes.push(TOKEN_UUID);
                bytes.extend_from_slice(uuid);
            }
            TokenForm::Text(text) => {
                bytes.push(TOKEN_PLAIN);
                put_varint(bytes, text.len() as u64);
                bytes.extend_from_slice(text);
            }
        }
        put_varint(bytes, lease.wrapping_sub(previous_lease));
        previous_lease = lease;
        chunk.record_done();
    });
    let (mut previous_owner, mut previous_fence) = (None, 0);
    let mut last_note: Option<Note> = None;
    table.for_each_step(&numbers, &mut |step| {
        let bytes = chunk.bytes_mut();
        put_varint(bytes, step.up as u64);
        put_varint(bytes, step.down.len() as u64);
        for segment in step.down {
            put_varint(bytes, segment.len() as u64);
            bytes.extend_from_slice(segment);
        }
        let named = previous_owner != Some(step.owner);
        let note = match (step.note, &last_note) {
            (None, _) => NOTE_NONE,
            (Some(note), Some(last)) if note == last => NOTE_LAST,
            (Some(_), _) => NOTE_NEW,
        };
        let mode = match step.mode {
            Mode::Write => 0,
            Mode::Read => READ,
        };
        let owner = if named { OWNER_NAMED } else { 0 };
        bytes.push(mode | owner | note << NOTE_SHIFT);
        if named {
            put_varint(bytes, u64::from(step.owner));
        }
        previous_owner = Some(step.owner);
        put_varint(bytes, zigzag(previous_fence, step.fence));
        previous_fence = step.fence;
        if let (NOTE_NEW, Some(text)) = (note, step.note) {
            put_varint(bytes, text.len() as u64);
            bytes.extend_from_slice(text);
            last_note = Some(text.clone());
        }
        chunk.record_done();
    });
    chunk.flush();
    chunk.sink.buffer(&[]);
}

/// The chunk being filled, written to the sink once a record takes it past [`CHUNK_BYTES`].
struct Chunk<'s, S: Sink> {
    bytes: Vec<u8>,
    sink: &'s mut S,
}

impl<S: Sink> Chunk<'_, S> {
    fn bytes_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    fn record_done(&mut self) {
        if self.bytes.len() >= CHUNK_BYTES {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if !self.bytes.is_empty() {
            self.sink.buffer(&self.bytes);
            self.bytes.clear();
        }
    }
}

/// Reads a table written by [`encode`], refusing anything `encode` cannot have written and a
/// fence counter above `ceiling` (so every fence too, as each is below the counter).
pub fn decode(source: &mut impl Source, ceiling: u64) -> Result<LockTable, DecodeError> {
    decode_version(source, VERSION, ceiling)
}

/// Reads a table written at `version` ([`VERSION`] or an earlier one), refusing anything an
/// encoder of that version cannot have written and a fence counter above `ceiling`.
pub fn decode_version(
    source: &mut impl Source,
    version: u32,
    ceiling: u64,
) -> Result<LockTable, DecodeError> {
    if version > VERSION {
        return Err(DecodeError::UnknownVersion(version));
    }
    let next_fence = source.unsigned().ok_or(DecodeError::Short)?;
    if next_fence > ceiling {
        return Err(DecodeError::CounterAboveCeiling {
            next: next_fence,
            ceiling,
        });
    }
    if version >= 3 {
        return decode_dense(source, next_fence);
    }
    decode_items(source, version, next_fence)
}

/// What a record refers to in the records before it, across chunks.
struct Dense {
    builder: Builder,
    next_fence: u64,
    /// Owners still to come before the locks; `None` before their number is read.
    owners_left: Option<u64>,
    previous_lease: u64,
    previous_owner: Option<u32>,
    previous_fence: u64,
    last_note: Option<Note>,
    /// The depth the locks read so far lead to, ahead of the builder.
    depth: usize,
    /// The locks of the chunk being read, and their segments as spans of the chunk: read
    /// first, then placed, so that the owners they name are loaded while the rest of the chunk
    /// is read (a lock in tree order names owners in no order at all).
    pending: Vec<Pending>,
    spans: Vec<(usize, usize)>,
}

/// A lock read from a chunk and not placed yet.
struct Pending {
    up: usize,
    /// Its segments: `spans[segments.0..segments.1]`.
    segments: (usize, usize),
    mode: Mode,
    owner: u32,
    fence: u64,
    note: Option<Note>,
}

/// The bytes of one chunk, read front to back.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for (i, &byte) in self.bytes.iter().enumerate().take(10) {
            let bits = u64::from(byte & 0x7f);
            // The tenth byte holds the top bit of 64 alone.
            if i == 9 && byte > 1 {
                return Err(DecodeError::Malformed("a number above 64 bits"));
            }
            value |= bits << (7 * i);
            if byte & 0x80 == 0 {
                self.bytes = &self.bytes[i + 1..];
                return Ok(value);
            }
        }
        Err(DecodeError::Short)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Short);
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    /// A length, and the bytes it counts.
    fn counted(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = usize::try_from(self.varint()?).map_err(|_| DecodeError::Short)?;
        self.take(len)
    }
}

fn decode_dense(source: &mut impl Source, next_fence: u64) -> Result<LockTable, DecodeError> {
    let mut dense = Dense {
        builder: Builder::new(),
        next_fence,
        owners_left: None,
        previous_lease: 0,
        previous_owner: None,
        previous_fence: 0,
        last_note: None,
        depth: 0,
        pending: Vec::new(),
        spans: Vec::new(),
    };
    loop {
        let read: Result<bool, DecodeError> = source
            .read_buffer(|chunk| {
                if chunk.is_empty() {
                    return Ok(false);
                }
                let mut reader = Reader { bytes: chunk };
                while !reader.bytes.is_empty() {
                    dense.record(&mut reader, chunk.len())?;
                }
                dense.place(chunk)?;
                Ok(true)
            })
            .ok_or(DecodeError::Short)?;
        if !read? {
            break;
        }
    }
    if dense.owners_left != Some(0) {
        return Err(DecodeError::Short);
    }
    Ok(dense.builder.finish(next_fence)?)
}

impl Dense {
    /// Reads one record of a chunk of `len` bytes: the number of owners, an owner, or a lock.
    fn record(&mut self, reader: &mut Reader, len: usize) -> Result<(), DecodeError> {
        match self.owners_left {
            None => {
                self.owners_left = Some(reader.varint()?);
                Ok(())
            }
            Some(0) => self.lock(reader, len),
            Some(left) => {
                self.owner(reader)?;
                self.owners_left = Some(left - 1);
                Ok(())
            }
        }
    }

    fn owner(&mut self, reader: &mut Reader) -> Result<(), DecodeError> {
        let token = match reader.take(1)?[0] {
            TOKEN_UUID => {
                let uuid: [u8; 16] = reader
                    .take(16)?
                    .try_into()
                    .map_err(|_| DecodeError::Short)?;
                PackedToken::uuid(uuid)
            }
            TOKEN_PLAIN => {
                let text = reader.counted()?;
                if text.is_empty() || text.len() > MAX_TOKEN_BYTES {
                    return Err(DecodeError::BadToken);
                }
                PackedToken::from_text(text)
            }
            _ => return Err(DecodeError::Malformed("unknown kind of token")),
        };
        let lease = self
            .previous_lease
            .checked_add(reader.varint()?)
            .ok_or(DecodeError::Malformed("a lease above 64 bits"))?;
        self.previous_lease = lease;
        self.builder.owner(token, lease)?;
        Ok(())
    }

    /// Reads one lock of a chunk of `len` bytes, checks what it can without the builder, and
    /// starts loading its owner.
    fn lock(&mut self, reader: &mut Reader, len: usize) -> Result<(), DecodeError> {
        let up = usize::try_from(reader.varint()?).map_err(|_| DecodeError::OutOfOrder)?;
        let down = reader.varint()?;
        let depth = self.depth.checked_sub(up).ok_or(DecodeError::OutOfOrder)?;
        if depth as u64 + down > PathLimits::CEILING.max_depth as u64 {
            return Err(DecodeError::MalformedPath);
        }
        self.depth = depth + down as usize;
        let first = self.spans.len();
        for _ in 0..down {
            let segment = reader.counted()?;
            if !Path::is_stored_segment(segment) {
                return Err(DecodeError::MalformedPath);
            }
            let end = len - reader.bytes.len();
            self.spans.push((end - segment.len(), end));
        }
        let segments = (first, self.spans.len());
        let flags = reader.take(1)?[0];
        if flags & !FLAGS_USED != 0 {
            return Err(DecodeError::Malformed("unknown flags"));
        }
        let mode = if flags & READ == 0 {
            Mode::Write
        } else {
            Mode::Read
        };
        let owner = if flags & OWNER_NAMED != 0 {
            u32::try_from(reader.varint()?)
                .ok()
                .filter(|&n| (n as usize) < self.builder.owners())
                .ok_or(DecodeError::Malformed("an owner that was never introduced"))?
        } else {
            self.previous_owner
                .ok_or(DecodeError::Malformed("no previous owner"))?
        };
        self.previous_owner = Some(owner);
        self.builder.prefetch_owner(owner);
        let fence = unzigzag(self.previous_fence, reader.varint()?);
        self.previous_fence = fence;
        if fence == 0 || fence >= self.next_fence {
            return Err(DecodeError::FenceOutOfRange {
                fence,
                next: self.next_fence,
            });
        }
        let note = match (flags >> NOTE_SHIFT) & 0b11 {
            NOTE_NONE => None,
            NOTE_LAST => Some(
                self.last_note
                    .clone()
                    .ok_or(DecodeError::Malformed("no note before"))?,
            ),
            NOTE_NEW => {
                let text = reader.counted()?;
                if text.len() > NOTE_CEILING {
                    return Err(DecodeError::NoteTooLong(text.len()));
                }
                if text.is_empty() {
                    return Err(DecodeError::Malformed("an empty note"));
                }
                let note = Note::from(text);
                self.last_note = Some(note.clone());
                Some(note)
            }
            _ => return Err(DecodeError::Malformed("unknown kind of note")),
        };
        self.pending.push(Pending {
            up,
            segments,
            mode,
            owner,
            fence,
            note,
        });
        Ok(())
    }

    /// Places the locks read from `chunk`, in order.
    fn place(&mut self, chunk: &[u8]) -> Result<(), DecodeError> {
        let mut segments: SmallVec<[&[u8]; 8]> = SmallVec::new();
        for lock in self.pending.drain(..) {
            segments.clear();
            segments.extend(
                self.spans[lock.segments.0..lock.segments.1]
                    .iter()
                    .map(|&(start, end)| &chunk[start..end]),
            );
            self.builder.reach(lock.up, &segments)?;
            self.builder
                .hold(lock.owner, lock.mode, lock.fence, lock.note.as_ref())?;
        }
        self.spans.clear();
        Ok(())
    }
}

/// Reads the locks of version 1 or 2, item by item, deciding each as a grant would (the
/// layouts before the dense one).
fn decode_items(
    source: &mut impl Source,
    version: u32,
    next_fence: u64,
) -> Result<LockTable, DecodeError> {
    let count = source.unsigned().ok_or(DecodeError::Short)?;
    let mut table = LockTable::new();
    let mut previous: Option<(Path, Mode, Token)> = None;
    // The count comes from the payload, so nothing is allocated by it: a forged count ends at
    // the first item that is not there.
    for _ in 0..count {
        let key = source.buffer().ok_or(DecodeError::Short)?;
        let path = Path::from_key(key)
            .filter(|path| path.depth() <= PathLimits::CEILING.max_depth)
            .ok_or(DecodeError::MalformedPath)?;
        let mode = mode_from_code(source.unsigned().ok_or(DecodeError::Short)?)?;
        let token = source.buffer().ok_or(DecodeError::Short)?;
        let token = Token::new(&token).map_err(|_| DecodeError::BadToken)?;
        let deadline = source.unsigned().ok_or(DecodeError::Short)?;
        // No server grants a lease of 0, and a lock of one would not count below as conflicting
        // (it has lapsed at time 0), so that a table of two conflicting locks could load here
        // and then not load from its own next payload.
        if deadline == 0 {
            return Err(DecodeError::Malformed("a lease of 0"));
        }
        let fence = source.unsigned().ok_or(DecodeError::Short)?;
        let note: Option<Note> = if version >= 2 {
            let note = source.buffer().ok_or(DecodeError::Short)?;
            if note.len() > NOTE_CEILING {
                return Err(DecodeError::NoteTooLong(note.len()));
            }
            (!note.is_empty()).then(|| Note::from(note))
        } else {
            None
        };
        if fence == 0 || fence >= next_fence {
            return Err(DecodeError::FenceOutOfRange {
                fence,
                next: next_fence,
            });
        }
        let order = (path, mode, token);
        if previous.as_ref().is_some_and(|prev| *prev >= order) {
            return Err(DecodeError::OutOfOrder);
        }
        let (path, mode, token) = &order;
        // In tree order a path's descendants come after it, so this check looks at ancestors
        // and the path itself: O(depth) per lock. Every lock counts as live (time zero): a
        // payload holds no lapsed lock, and an owner's locks of an older payload with several
        // deadlines share the latest of them.
        if table.is_blocked(0, token, *mode, path) {
            return Err(DecodeError::Conflicting);
        }
        table.grant_noted(
            token,
            deadline,
            fence,
            &[(*mode, path.clone())],
            note.as_ref(),
        );
        previous = Some(order);
    }
    table.raise_next_fence(next_fence);
    Ok(table)
}

/// A simple byte framing of the items, for tests and fuzzing: an unsigned is 8 bytes little
/// endian; a buffer is its length as one such unsigned, then its bytes.
#[derive(Debug, Default)]
pub struct ByteSource<'a> {
    bytes: &'a [u8],
}

impl<'a> ByteSource<'a> {
    pub fn new(bytes: &'a [u8]) -> ByteSource<'a> {
        ByteSource { bytes }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Some(head)
    }
}

impl Source for ByteSource<'_> {
    fn unsigned(&mut self) -> Option<u64> {
        let bytes: [u8; 8] = self.take(8)?.try_into().ok()?;
        Some(u64::from_le_bytes(bytes))
    }

    fn buffer(&mut self) -> Option<Vec<u8>> {
        let len = usize::try_from(self.unsigned()?).ok()?;
        self.take(len).map(<[u8]>::to_vec)
    }

    fn read_buffer<R>(&mut self, read: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let len = usize::try_from(self.unsigned()?).ok()?;
        self.take(len).map(read)
    }
}

/// The writing side of [`ByteSource`]'s framing.
#[derive(Debug, Default)]
pub struct ByteSink {
    pub bytes: Vec<u8>,
}

impl Sink for ByteSink {
    fn unsigned(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    fn buffer(&mut self, bytes: &[u8]) {
        self.unsigned(bytes.len() as u64);
        self.bytes.extend_from_slice(bytes);
    }
}
