//! The vocabulary of a lock: its mode, its owner's token, and the view of a lock that leaves the
//! engine.

use std::fmt;

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

/// A token as the lock table keeps it, in 24 bytes and without an allocation for the two common
/// kinds: short tokens, and canonical UUIDs (what `ACQUIRE` generates), kept as their 16 bytes.
/// Every token has exactly one form, so two forms are equal exactly when the tokens are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PackedToken {
    Plain(SmallBytes),
    Uuid([u8; 16]),
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
                    return PackedToken::Uuid(uuid);
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
                return PackedToken::Uuid(uuid);
            }
        }
        PackedToken::Plain(SmallBytes::new(bytes))
    }

    /// The stored bytes, which identify the token (for hashing): not its text for a UUID.
    pub(crate) fn stored(&self) -> &[u8] {
        match self {
            PackedToken::Plain(bytes) => bytes,
            PackedToken::Uuid(uuid) => uuid,
        }
    }

    /// The bytes this form keeps on the heap, for memory estimates.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            PackedToken::Plain(bytes) => bytes.heap_bytes(),
            PackedToken::Uuid(_) => 0,
        }
    }

    pub(crate) fn to_token(&self) -> Token {
        match self {
            PackedToken::Uuid(uuid) => Token(SmallBytes::new(&uuid_text(uuid))),
            other => Token(SmallBytes::new(other.stored())),
        }
    }

    /// Compares in the byte order of the tokens' texts, the canonical order of locks. Two UUIDs
    /// compare by their bytes: lowercase hex digits sort as the nibbles they stand for, and the
    /// hyphens are at the same places.
    pub(crate) fn cmp_text(&self, other: &PackedToken) -> std::cmp::Ordering {
        match (self, other) {
            (PackedToken::Uuid(_), PackedToken::Uuid(_)) => self.stored().cmp(other.stored()),
            (PackedToken::Uuid(_), _) | (_, PackedToken::Uuid(_)) => {
                self.to_token().cmp(&other.to_token())
            }
            _ => self.stored().cmp(other.stored()),
        }
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
            Token::new(&[0xff; 22]).expect("short limit"),
            Token::new(&[b'x'; 23]).expect("long"),
            Token::new(b"123E4567-E89B-12D3-A456-426614174000").expect("uppercase uuid"),
            Token::new(b"123e4567-e89b-12d3-a456-42661417400g").expect("not hex"),
            Token::new(b"123e4567-e89b-12d3-a456_426614174000").expect("not hyphenated"),
            Token::generate(),
            Token::new(b"ffffffff-ffff-4fff-bfff-ffffffffffff").expect("high uuid"),
        ];
        assert!(matches!(PackedToken::new(&generated), PackedToken::Uuid(_)));
        assert!(matches!(
            PackedToken::new(&cases[4]),
            PackedToken::Plain(SmallBytes::Heap(_))
        ));
        for token in &cases {
            let packed = PackedToken::new(token);
            assert_eq!(&packed.to_token(), token);
            for other in &cases {
                assert_eq!(packed.cmp_text(&PackedToken::new(other)), token.cmp(other));
                assert_eq!(packed == PackedToken::new(other), token == other);
            }
        }
        assert_eq!(std::mem::size_of::<PackedToken>(), 24);
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
