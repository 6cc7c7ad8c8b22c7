//! The vocabulary of a lock: its mode, its owner's token, and the view of a lock that leaves the
//! engine.

use std::fmt;
use std::num::NonZeroU8;

use crate::bytes::SmallBytes;
use crate::path::Path;

/// `READ` is shared, `WRITE` is exclusive; both cover the path's whole subtree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    // Write sorts first: a node keeps its writers at the front, so a reader's check looks at
    // them alone however many readers share the node.
    Write = 0,
    Read = 1,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Write, Mode::Read];

    /// Parses `READ` or `WRITE`, ignoring case as Redis does for keywords.
    pub fn parse(word: &[u8]) -> Option<Mode> {
        if word.eq_ignore_ascii_case(b"READ") {
            Some(Mode::Read)
        } else if word.eq_ignore_ascii_case(b"WRITE") {
            Some(Mode::Write)
        } else {
            None
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Read => "READ",
            Mode::Write => "WRITE",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Two modes conflict (between different owners on related paths) unless both are `READ`.
    pub fn conflicts_with(self, other: Mode) -> bool {
        self == Mode::Write || other == Mode::Write
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The mode-path pairs of one request. Nearly every request names one path, kept inline.
pub type Items = smallvec::SmallVec<[(Mode, Path); 1]>;

/// The longest token a client may supply.
pub const MAX_TOKEN_BYTES: usize = 128;

/// An owner's identity: 1 to 128 arbitrary bytes. Up to 38 are kept inline, so a generated
/// token (36) or a client's usual one costs no allocation per command.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(SmallBytes<38>);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenError;

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid token: must be 1 to {MAX_TOKEN_BYTES} bytes")
    }
}

impl Token {
    pub fn new(bytes: &[u8]) -> Result<Token, TokenError> {
        if bytes.is_empty() || bytes.len() > MAX_TOKEN_BYTES {
            return Err(TokenError);
        }
        Ok(Token(SmallBytes::new(bytes)))
    }

    /// A fresh random token: a UUID v4, 36 characters, lowercase and hyphenated, from the
    /// operating system's cryptographically secure generator (see [`random_uuid`]).
    pub fn generate() -> Token {
        let mut text = [0u8; UUID_TEXT];
        let uuid = random_uuid();
        uuid.hyphenated().encode_lower(&mut text);
        LAST_GENERATED.set(Some((text, *uuid.as_bytes())));
        Token(SmallBytes::new(&text))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Random bytes the operating system gave, drawn a page at a time: a generated token then costs
/// a copy of 16 bytes instead of a system call each (one `getrandom` serves 256 tokens). The
/// bytes are the kernel's CSPRNG output, handed out once each and wiped as they go.
struct RandomPool {
    bytes: [u8; 4096],
    next: usize,
}

thread_local! {
    /// The text and the bytes of the token generated last on this thread: the lock table packs
    /// a token it is given into its 16 bytes, and for the one just generated it need not parse
    /// the text back. It is matched by content, so any token equal to it packs the same.
    static LAST_GENERATED: std::cell::Cell<Option<([u8; UUID_TEXT], [u8; 16])>> =
        const { std::cell::Cell::new(None) };
    static POOL: std::cell::RefCell<RandomPool> = const {
        std::cell::RefCell::new(RandomPool {
            bytes: [0; 4096],
            next: 4096,
        })
    };
}

/// A version 4 UUID from the pool. If the system's generator fails, `Uuid::new_v4` asks it
/// again, and reports the failure its own way.
fn random_uuid() -> uuid::Uuid {
    let drawn = POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.next + 16 > pool.bytes.len() {
            getrandom::fill(&mut pool.bytes).ok()?;
            pool.next = 0;
        }
        let at = pool.next;
        let mut random = [0u8; 16];
        random.copy_from_slice(&pool.bytes[at..at + 16]);
        pool.bytes[at..at + 16].fill(0);
        pool.next = at + 16;
        Some(random)
    });
    match drawn {
        Some(random) => uuid::Builder::from_random_bytes(random).into_uuid(),
        None => uuid::Uuid::new_v4(),
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

/// A token as the lock table keeps it, in 20 bytes and without an allocation for the two common
/// kinds: short tokens (up to [`INLINE_TOKEN`] bytes), and canonical UUIDs (what `ACQUIRE`
/// generates), kept as their 16 bytes; a longer token is kept aside, on the heap. The size is
/// what lets an owner take 40 bytes: a million owners of a million locks are 8 MB less memory
/// for a fork to copy than in the 24 bytes of an enum holding a box, whose alignment would round
/// the owner up to 48. The first byte tells the forms apart (an inline length, [`UUID_FORM`] or
/// [`LONG_FORM`]) and is never 0, so that an `Option` of an owner costs nothing more. Every
/// token has exactly one form, so two forms are equal exactly when the tokens are.
pub(crate) struct PackedToken {
    head: NonZeroU8,
    body: [u8; INLINE_TOKEN],
}

/// The longest token kept inline.
pub(crate) const INLINE_TOKEN: usize = 19;
/// The head of a canonical UUID, kept as its 16 bytes.
const UUID_FORM: u8 = 0xfe;
/// The head of a token longer than [`INLINE_TOKEN`] bytes: the body holds its length, then the
/// address of its bytes on the heap (a `Box<[u8]>` of that length, which the token owns).
const LONG_FORM: u8 = 0xff;
const UUID_HEAD: NonZeroU8 = NonZeroU8::new(UUID_FORM).unwrap();
const LONG_HEAD: NonZeroU8 = NonZeroU8::new(LONG_FORM).unwrap();
/// Where a long token's address is in the body, after its length.
const LONG_ADDRESS: std::ops::Range<usize> = 1..1 + std::mem::size_of::<usize>();

const _: () = assert!(std::mem::size_of::<PackedToken>() == 20);
const _: () = assert!(INLINE_TOKEN < UUID_FORM as usize && MAX_TOKEN_BYTES <= u8::MAX as usize);

/// A packed token seen by its form, for the encoders, which write the two forms differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenForm<'a> {
    Uuid(&'a [u8; 16]),
    Text(&'a [u8]),
}

/// Where the hyphens of a canonical UUID are.
const UUID_HYPHENS: [usize; 4] = [8, 13, 18, 23];
const UUID_TEXT: usize = 36;
const HEX: &[u8; 16] = b"0123456789abcdef";

impl PackedToken {
    pub(crate) fn new(token: &Token) -> PackedToken {
        let bytes = token.as_bytes();
        // Only a token of a UUID's length can be one: any other skips the thread-local.
        if bytes.len() == UUID_TEXT {
            if let Some((text, uuid)) = LAST_GENERATED.get() {
                if bytes == text {
                    return PackedToken::uuid(uuid);
                }
            }
        }
        PackedToken::from_text(bytes)
    }

    /// The form of a token given as its text, which the caller checked is 1 to
    /// [`MAX_TOKEN_BYTES`] bytes (a payload being loaded).
    pub(crate) fn from_text(bytes: &[u8]) -> PackedToken {
        if bytes.len() == UUID_TEXT {
            if let Some(uuid) = parse_uuid(bytes) {
                return PackedToken::uuid(uuid);
            }
        }
        PackedToken::plain(bytes)
    }

    /// The form of a canonical UUID, given as its 16 bytes.
    pub(crate) fn uuid(uuid: [u8; 16]) -> PackedToken {
        let mut body = [0; INLINE_TOKEN];
        body[..16].copy_from_slice(&uuid);
        PackedToken {
            head: UUID_HEAD,
            body,
        }
    }

    /// The form of a token that the caller knows is not a canonical UUID (one read from a form
    /// that kept it as text), of 1 to [`MAX_TOKEN_BYTES`] bytes.
    pub(crate) fn plain(bytes: &[u8]) -> PackedToken {
        let mut body = [0; INLINE_TOKEN];
        match u8::try_from(bytes.len()).ok().and_then(NonZeroU8::new) {
            Some(len) if bytes.len() <= INLINE_TOKEN => {
                body[..bytes.len()].copy_from_slice(bytes);
                PackedToken { head: len, body }
            }
            _ => {
                // Only the address is kept: the length fits in a byte, as no token is longer
                // than `MAX_TOKEN_BYTES`, and the box is rebuilt from both (`long`). The
                // address's provenance is exposed so that rebuilding the pointer is sound.
                let bytes = &bytes[..bytes.len().min(MAX_TOKEN_BYTES)];
                let heap: Box<[u8]> = Box::from(bytes);
                body[0] = bytes.len() as u8;
                let address = Box::into_raw(heap).cast::<u8>().expose_provenance();
                body[LONG_ADDRESS].copy_from_slice(&address.to_ne_bytes());
                PackedToken {
                    head: LONG_HEAD,
                    body,
                }
            }
        }
    }

    /// The heap bytes of a long token: their address and length.
    fn long(&self) -> Option<(*mut u8, usize)> {
        if self.head.get() != LONG_FORM {
            return None;
        }
        let mut address = [0; std::mem::size_of::<usize>()];
        address.copy_from_slice(&self.body[LONG_ADDRESS]);
        let at = std::ptr::with_exposed_provenance_mut::<u8>(usize::from_ne_bytes(address));
        Some((at, usize::from(self.body[0])))
    }

    /// The token's form: its UUID's bytes, or its text.
    pub(crate) fn form(&self) -> TokenForm<'_> {
        match self.head.get() {
            // The body always has its first 16 bytes: the second arm is never taken.
            UUID_FORM => self
                .body
                .first_chunk()
                .map_or(TokenForm::Text(&[]), TokenForm::Uuid),
            _ => TokenForm::Text(self.stored()),
        }
    }

    /// The stored bytes, which identify the token (for hashing): not its text for a UUID.
    pub(crate) fn stored(&self) -> &[u8] {
        match self.long() {
            // SAFETY: a long token owns a live `Box<[u8]>` of this address and length (made in
            // `plain`, moved only by `with_heap`, freed only by `drop`), borrowed with `self`.
            Some((at, len)) => unsafe { std::slice::from_raw_parts(at, len) },
            None if self.head.get() == UUID_FORM => &self.body[..16],
            None => &self.body[..usize::from(self.head.get())],
        }
    }

    /// The bytes this form keeps on the heap, for memory estimates.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.long().map_or(0, |(_, len)| len)
    }

    /// Hands a long token's heap bytes to `visit` as the box they are, which may move them (the
    /// defragmenter) but must keep their length, which the token keeps apart; the token keeps
    /// whatever box `visit` leaves, even if it panics.
    pub(crate) fn with_heap(&mut self, visit: impl FnOnce(&mut Box<[u8]>)) {
        /// Writes the box's address back into the token when dropped, panicking or not.
        struct Lend<'a> {
            token: &'a mut PackedToken,
            heap: std::mem::ManuallyDrop<Box<[u8]>>,
        }
        impl Drop for Lend<'_> {
            fn drop(&mut self) {
                debug_assert_eq!(self.heap.len(), usize::from(self.token.body[0]));
                let address = self.heap.as_mut_ptr().expose_provenance();
                self.token.body[LONG_ADDRESS].copy_from_slice(&address.to_ne_bytes());
            }
        }
        let Some((at, len)) = self.long() else {
            return;
        };
        // SAFETY: the token owns this box (see `stored`); it is lent as a `ManuallyDrop`, so
        // that it is never freed here, and `Lend` writes back its address, which is the token's
        // again.
        let heap = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(at, len)) };
        let mut lend = Lend {
            token: self,
            heap: std::mem::ManuallyDrop::new(heap),
        };
        visit(&mut lend.heap);
    }

    pub(crate) fn to_token(&self) -> Token {
        match self.form() {
            TokenForm::Uuid(uuid) => Token(SmallBytes::new(&uuid_text(uuid))),
            TokenForm::Text(text) => Token(SmallBytes::new(text)),
        }
    }

    /// Compares in the byte order of the tokens' texts, the canonical order of locks. Two UUIDs
    /// compare by their bytes: lowercase hex digits sort as the nibbles they stand for, and the
    /// hyphens are at the same places.
    pub(crate) fn cmp_text(&self, other: &PackedToken) -> std::cmp::Ordering {
        match (self.form(), other.form()) {
            (TokenForm::Text(a), TokenForm::Text(b)) => a.cmp(b),
            (TokenForm::Uuid(a), TokenForm::Uuid(b)) => a.cmp(b),
            _ => self.to_token().cmp(&other.to_token()),
        }
    }
}

impl Drop for PackedToken {
    fn drop(&mut self) {
        if let Some((at, len)) = self.long() {
            // SAFETY: the token owns this box (see `stored`) and is going.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(at, len)) });
        }
    }
}

impl Clone for PackedToken {
    fn clone(&self) -> PackedToken {
        match self.form() {
            TokenForm::Uuid(uuid) => PackedToken::uuid(*uuid),
            TokenForm::Text(text) => PackedToken::plain(text),
        }
    }
}

impl PartialEq for PackedToken {
    fn eq(&self, other: &PackedToken) -> bool {
        self.head == other.head && self.stored() == other.stored()
    }
}

impl Eq for PackedToken {}

impl fmt::Debug for PackedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.form().fmt(f)
    }
}

/// The canonical text of a UUID's 16 bytes: 36 characters, lowercase, hyphenated.
pub(crate) fn uuid_text(uuid: &[u8; 16]) -> [u8; UUID_TEXT] {
    let mut text = [0; UUID_TEXT];
    let mut at = 0;
    for (i, byte) in uuid.iter().enumerate() {
        if [4, 6, 8, 10].contains(&i) {
            text[at] = b'-';
            at += 1;
        }
        text[at] = HEX[usize::from(byte >> 4)];
        text[at + 1] = HEX[usize::from(byte & 0xf)];
        at += 2;
    }
    text
}

/// The 16 bytes of a UUID written the canonical way: 36 characters, lowercase, hyphenated.
/// Anything else (uppercase, braces) is kept as it was given, so its text comes back unchanged.
fn parse_uuid(text: &[u8]) -> Option<[u8; 16]> {
    if text.len() != UUID_TEXT || UUID_HYPHENS.iter().any(|&at| text[at] != b'-') {
        return None;
    }
    // Every lock of a generated token passes here, so the digits are read at fixed places
    // through a table, and one test at the end catches any byte that is not a lowercase digit.
    let mut uuid = [0; 16];
    let mut invalid = 0;
    for (byte, at) in uuid.iter_mut().zip(UUID_DIGITS.chunks_exact(2)) {
        let high = NIBBLES[usize::from(text[at[0]])];
        let low = NIBBLES[usize::from(text[at[1]])];
        invalid |= high | low;
        *byte = high << 4 | low & 0x0f;
    }
    (invalid & 0xf0 == 0).then_some(uuid)
}

/// The places of the 32 hex digits in a hyphenated UUID.
const UUID_DIGITS: [usize; 32] = {
    let mut places = [0; 32];
    let (mut at, mut next) = (0, 0);
    while next < 32 {
        if !matches!(at, 8 | 13 | 18 | 23) {
            places[next] = at;
            next += 1;
        }
        at += 1;
    }
    places
};

/// The value of each lowercase hex digit; 0xff (any high bit set) for every other byte.
const NIBBLES: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut digit = 0;
    while digit < 16 {
        table[HEX[digit] as usize] = digit as u8;
        digit += 1;
    }
    table
};

/// The text an application keeps with the locks of a grant, for a person to read ("`/A/C` is
/// being moved by Alice"): any bytes. Shared, so that the locks of one grant, the waiter that
/// asked for them and the effect that replicates them hold one copy.
pub type Note = std::sync::Arc<[u8]>;

/// The longest note any configuration allows, and so the longest a payload (an RDB value, an
/// effect) may carry: what `pathlock.max-note-bytes` may be set to at most.
pub const NOTE_CEILING: usize = 1 << 20;

/// What went out of a table, for the caller to replicate and to wake the waiters it held up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Freed {
    /// The owners reclaimed because their lease lapsed, named for replicas (`EXPIRE now
    /// token...`); empty for a release.
    pub tokens: Vec<Token>,
    /// How many locks went, or stopped counting (a buried owner's, see the table's `big`).
    pub locks: usize,
    /// Where waiters held up by what went are to be looked for: each freed lock's mode and path,
    /// or for a big owner, `WRITE` on the lowest path above all its locks. Empty unless the
    /// caller asked for descriptions.
    pub probes: Vec<(Mode, Path)>,
}

impl Freed {
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty() && self.locks == 0 && self.probes.is_empty()
    }

    /// Adds what `other` freed after what this one did.
    pub fn extend(&mut self, other: Freed) {
        self.tokens.extend(other.tokens);
        self.locks += other.locks;
        self.probes.extend(other.probes);
    }
}

/// A lock as the engine reports it: for listings, conflicts and reclaimed leases.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LockInfo {
    pub path: Path,
    pub mode: Mode,
    pub token: Token,
    /// Absolute time in milliseconds after which the lock is gone: its owner's lease.
    pub deadline: u64,
    pub fence: u64,
    /// The note of the grant that took (or last re-granted with a note) this lock.
    pub note: Option<Note>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_case_insensitively() {
        assert_eq!(Mode::parse(b"read"), Some(Mode::Read));
        assert_eq!(Mode::parse(b"WrItE"), Some(Mode::Write));
        assert_eq!(Mode::parse(b"READS"), None);
    }

    #[test]
    fn tokens_are_bounded() {
        assert_eq!(Token::new(b""), Err(TokenError));
        assert!(Token::new(&[0u8; 128]).is_ok());
        assert_eq!(Token::new(&[0u8; 129]), Err(TokenError));
    }

    #[test]
    fn packed_tokens_round_trip_in_one_form_each() {
        let generated = Token::generate();
        let cases = [
            generated.clone(),
            Token::new(b"t000000000042").expect("short"),
            Token::new(&[0xff; INLINE_TOKEN]).expect("short limit"),
            Token::new(&[b'x'; INLINE_TOKEN + 1]).expect("long"),
            Token::new(&[0xfe; INLINE_TOKEN + 1]).expect("long, from a form's head"),
            Token::new(&[0; 16]).expect("sixteen bytes, as long as a UUID's"),
            Token::new(&[0xff; MAX_TOKEN_BYTES]).expect("longest"),
            Token::new(b"123E4567-E89B-12D3-A456-426614174000").expect("uppercase uuid"),
            Token::new(b"123e4567-e89b-12d3-a456-42661417400g").expect("not hex"),
            Token::new(b"123e4567-e89b-12d3-a456_426614174000").expect("not hyphenated"),
            Token::generate(),
            Token::new(b"ffffffff-ffff-4fff-bfff-ffffffffffff").expect("high uuid"),
        ];
        for case in [0, 10, 11] {
            assert!(matches!(
                PackedToken::new(&cases[case]).form(),
                TokenForm::Uuid(_)
            ));
        }
        let heaps = [
            (1, 0),
            (2, 0),
            (3, 20),
            (4, 20),
            (5, 0),
            (6, 128),
            (7, 36),
            (8, 36),
            (9, 36),
        ];
        for (case, heap) in heaps {
            assert_eq!(
                PackedToken::new(&cases[case]).heap_bytes(),
                heap,
                "case {case}"
            );
        }
        for token in &cases {
            let mut packed = PackedToken::new(token);
            assert_eq!(&packed.to_token(), token);
            assert_eq!(packed.clone(), packed);
            assert_eq!(PackedToken::from_text(token.as_bytes()), packed);
            // A lent heap part comes back where it was moved to, as the defragmenter moves it.
            packed.with_heap(|heap| *heap = heap.to_vec().into_boxed_slice());
            assert_eq!(&packed.to_token(), token);
            for other in &cases {
                assert_eq!(packed.cmp_text(&PackedToken::new(other)), token.cmp(other));
                assert_eq!(packed == PackedToken::new(other), token == other);
            }
        }
        assert_eq!(std::mem::size_of::<PackedToken>(), 20);
    }

    /// Every form at its length boundaries (and the empty text, which no caller passes but which
    /// must stay sound), moved, cloned, compared, hashed, lent, moved to a fresh allocation as
    /// the defragmenter moves it (the old bytes poisoned, then freed), and dropped: each unsafe
    /// block of `PackedToken` runs on each form, so that Miri (`make miri`) checks the heap
    /// form's borrow, loan and free.
    #[test]
    fn packed_tokens_stay_sound_at_every_length_boundary() {
        use std::hash::BuildHasher;
        let mut moves = 0;
        let mut move_slice = |bytes: &mut Box<[u8]>| {
            let fresh = bytes.to_vec().into_boxed_slice();
            bytes.fill(0xa5);
            *bytes = fresh;
            moves += 1;
        };
        let hasher = std::collections::hash_map::RandomState::new();
        let mut cases: Vec<(Vec<u8>, usize)> = [0, 1, 15, 16, 19, 20, 35, 36, 37, 128]
            .into_iter()
            .map(|len| {
                let text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
                let heap = if len > INLINE_TOKEN || len == 0 {
                    len
                } else {
                    0
                };
                (text, heap)
            })
            .collect();
        cases.push((b"123e4567-e89b-12d3-a456-426614174000".to_vec(), 0));
        cases.push((b"123E4567-E89B-12D3-A456-426614174000".to_vec(), 36));
        cases.push((b"{23e4567-e89b-12d3-a456-42661417400}".to_vec(), 36));
        for (text, heap) in &cases {
            let made = if text.is_empty() {
                PackedToken::plain(text)
            } else {
                PackedToken::from_text(text)
            };
            // A move is a copy of the 20 bytes: the heap part goes with them, owned once.
            let mut held = vec![made];
            let mut packed = held.pop().expect("the token just pushed");
            assert_eq!(packed.heap_bytes(), *heap, "{text:?}");
            let clone = packed.clone();
            assert_eq!(clone, packed);
            assert_eq!(
                hasher.hash_one(clone.stored()),
                hasher.hash_one(packed.stored())
            );
            if *heap > 0 {
                assert_ne!(
                    clone.stored().as_ptr(),
                    packed.stored().as_ptr(),
                    "a clone owns its bytes"
                );
            }
            packed.with_heap(&mut move_slice);
            assert_eq!(packed, clone);
            // A mover that panics after moving the bytes leaves them with the token.
            let moved = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                packed.with_heap(|bytes| {
                    move_slice(bytes);
                    std::panic::resume_unwind(Box::new("the mover failed"));
                })
            }));
            // The empty text takes the heap form, with no allocation behind it.
            let lent = *heap > 0 || text.is_empty();
            assert_eq!(moved.is_err(), lent);
            assert_eq!(packed, clone);
            assert_eq!(packed.stored(), clone.stored());
            if !text.is_empty() {
                assert_eq!(packed.to_token().as_bytes(), &text[..]);
            }
            let mut other = PackedToken::plain(b"other");
            std::mem::swap(&mut other, &mut packed);
            assert_eq!(other, clone);
            assert_ne!(packed, clone);
            drop(other);
            // The clone's bytes outlive the original's.
            match text.is_empty() {
                true => assert_eq!(clone.stored(), b""),
                false => assert_eq!(clone.to_token().as_bytes(), &text[..]),
            }
        }
        let lent = cases
            .iter()
            .filter(|(text, heap)| *heap > 0 || text.is_empty());
        assert_eq!(moves, 2 * lent.count());
    }

    #[test]
    fn generated_tokens_are_uuid_v4() {
        let token = Token::generate();
        let text = std::str::from_utf8(token.as_bytes()).expect("ascii");
        assert_eq!(text.len(), 36);
        assert_eq!(text.as_bytes()[14], b'4');
        assert!(text
            .chars()
            .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)));
        assert_ne!(Token::generate(), token);
    }

    #[test]
    fn generated_tokens_stay_distinct_and_v4_across_pool_refills() {
        let tokens: std::collections::BTreeSet<Token> =
            (0..2000).map(|_| Token::generate()).collect();
        assert_eq!(tokens.len(), 2000);
        for token in &tokens {
            let uuid = uuid::Uuid::parse_str(std::str::from_utf8(token.as_bytes()).expect("ascii"))
                .expect("a UUID");
            assert_eq!(uuid.get_version_num(), 4);
            assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
        }
    }
}
