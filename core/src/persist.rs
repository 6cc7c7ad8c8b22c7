//! A lock table as a sequence of numbers and byte strings, and back: the payload of the Redis
//! type's RDB encoding (and of `DUMP`/`RESTORE`/`MIGRATE`), without Redis.
//!
//! ```text
//! unsigned  next fence
//! unsigned  number of locks
//! per lock, in tree order (path, then WRITE before READ, then token):
//!   buffer    path trie key
//!   unsigned  mode (0 WRITE, 1 READ)
//!   buffer    token
//!   unsigned  deadline, absolute milliseconds (the owner's lease: equal for its locks)
//!   unsigned  fence
//!   buffer    note, empty when the lock has none      (from version 2)
//! ```
//!
//! [`VERSION`] is the version [`encode`] writes; [`decode_version`] reads every version up to
//! it (version 1 is the layout without notes), and [`decode`] reads the current one. A token's
//! locks are one lease: a payload of an older engine, whose locks of one token could have
//! several deadlines, loads with the latest of them for all.
//!
//! The Redis layer reads and writes the items through `RedisModule_Load*`/`Save*`; tests and the
//! fuzz target read them from plain bytes ([`ByteSource`]). Decoding checks every field, the
//! strict order, the counter against the caller's ceiling, the fences against the counter and
//! that no two locks conflict, so a damaged file or a hand-made `RESTORE` payload is refused
//! instead of becoming a table whose indexes disagree, that grants one path to two owners, or
//! whose counter no server can have reached.

use std::fmt;

use crate::lock::{Mode, Note, Token, NOTE_CEILING};
use crate::path::{Path, PathLimits};
use crate::table::LockTable;

/// The version of the layout [`encode`] writes: 2 added the notes.
pub const VERSION: u32 = 2;

/// Where an encoded table is read from, item by item.
pub trait Source {
    /// Reads the next unsigned integer; `None` when the payload ends or cannot be read.
    fn unsigned(&mut self) -> Option<u64>;
    /// Reads the next byte string; `None` when the payload ends or cannot be read.
    fn buffer(&mut self) -> Option<Vec<u8>>;
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
        }
    }
}

fn mode_code(mode: Mode) -> u64 {
    match mode {
        Mode::Write => 0,
        Mode::Read => 1,
    }
}

fn mode_from_code(code: u64) -> Result<Mode, DecodeError> {
    match code {
        0 => Ok(Mode::Write),
        1 => Ok(Mode::Read),
        _ => Err(DecodeError::UnknownMode(code)),
    }
}

/// Writes `table`'s locks in the order and layout above, at [`VERSION`]: those
/// [`LockTable::iter`] lists, which leaves out the lapsed locks a later grant passed over, so no
/// two locks of a payload conflict. Two walks, one to count and one to write, so that no list
/// of every lock is built.
pub fn encode(table: &LockTable, sink: &mut impl Sink) {
    sink.unsigned(table.next_fence());
    let mut count = 0u64;
    table.for_each_persisted(&mut |_| count += 1);
    sink.unsigned(count);
    table.for_each_persisted(&mut |lock| {
        sink.buffer(lock.path.key());
        sink.unsigned(mode_code(lock.mode));
        sink.buffer(lock.token.as_bytes());
        sink.unsigned(lock.deadline);
        sink.unsigned(lock.fence);
        sink.buffer(lock.note.as_deref().unwrap_or_default());
    });
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
