//! Paths: parsing a client's bytes into a normalised path, and the key that represents it in
//! persistence, digests and ordering.
//!
//! A path is a sequence of segments. The key of a path concatenates its segments, each escaped
//! and then terminated by a `0x00` byte:
//!
//! * segment bytes `0x00` and `0x01` are written as `0x01 0x01` and `0x01 0x02`, so `0x00`
//!   appears in a key only as a terminator;
//! * the root (no segments) is the empty key.
//!
//! Two properties follow. First, one path is an ancestor of another exactly when its key is a
//! prefix of the other's key, because every key ends on a terminator: `/A/C` (`A\0C\0`) is a
//! prefix of `/A/C/D` but not of `/A/CD` (`A\0CD\0`) ([`Path::covers`]). Second, byte order on
//! keys is depth-first order on paths with siblings in byte order of their segments, because the
//! terminator sorts below every escaped byte; so escaped segments also sort like the raw ones,
//! which is how the engine orders a node's children in listings, RDB and digests. A plain
//! `/`-joined key has the first property only with a trailing `/`, and loses the second:
//! `/p/f1 copy` would sort before `/p/f1`.

use std::fmt;

use smallvec::SmallVec;

use crate::bytes::SmallBytes;

const TERMINATOR: u8 = 0x00;
const ESCAPE: u8 = 0x01;

/// The limits a path must keep; the Redis layer fills them from the module's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathLimits {
    /// The largest path argument accepted, in bytes, as the client sent it.
    pub max_bytes: usize,
    /// The largest number of segments after normalisation.
    pub max_depth: usize,
}

impl PathLimits {
    /// The most any configuration may allow, and what paths that did not come from a client
    /// (a master's effects, an RDB or `RESTORE` payload) are held to. Listings and persistence
    /// walk the tree recursively, one stack frame per level, so the depth bound keeps a forged
    /// payload from overflowing the server's stack.
    pub const CEILING: PathLimits = PathLimits {
        max_bytes: 1 << 20,
        max_depth: 4096,
    };
}

impl Default for PathLimits {
    fn default() -> Self {
        PathLimits {
            max_bytes: 4096,
            max_depth: 256,
        }
    }
}

/// Why a client's path was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathError {
    TooLong { max: usize },
    TooDeep { max: usize },
    DotDot,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathError::TooLong { max } => write!(f, "path too long: at most {max} bytes"),
            PathError::TooDeep { max } => write!(f, "path too deep: at most {max} segments"),
            PathError::DotDot => write!(f, "invalid path: '..' segments are not allowed"),
        }
    }
}

/// A normalised path, held as its trie key: inline up to 38 bytes, so that parsing most paths
/// costs no allocation. Paths compare and hash as their keys.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Path {
    key: SmallBytes<KEY_INLINE>,
}

impl Path {
    /// The project root: a lock here covers the whole project.
    pub fn root() -> Path {
        Path {
            key: SmallBytes::default(),
        }
    }

    /// Parses a client's path. Empty segments and `.` are dropped, so `/A//C/`, `A/C` and
    /// `/A/./C` are one path; `""` and `/` are the root; every other byte is ordinary.
    pub fn parse(raw: &[u8], limits: &PathLimits) -> Result<Path, PathError> {
        if raw.len() > limits.max_bytes {
            return Err(PathError::TooLong {
                max: limits.max_bytes,
            });
        }
        // Inline until it outgrows a path's inline bytes, so that a usual path allocates nothing.
        let mut key: SmallVec<[u8; KEY_INLINE]> = SmallVec::new();
        let mut depth = 0;
        // One pass over the bytes, each written to the key as it is read (escaped if need be);
        // at each `/` and at the end, the segment just written is checked, and ended, dropped
        // (empty or `.`) or refused (`..`). An escaped byte is never a dot, so the written
        // segment is `.` or `..` exactly when the client's was.
        let mut start = 0;
        for at in 0..=raw.len() {
            match raw.get(at) {
                Some(&b'/') | None => {}
                Some(&b) if b <= 0x01 => {
                    key.push(ESCAPE);
                    key.push(b + 1);
                    continue;
                }
                Some(&b) => {
                    key.push(b);
                    continue;
                }
            }
            match &key[start..] {
                b"" => continue,
                b"." => {
                    key.truncate(start);
                    continue;
                }
                b".." => return Err(PathError::DotDot),
                _ => {}
            }
            depth += 1;
            if depth > limits.max_depth {
                return Err(PathError::TooDeep {
                    max: limits.max_depth,
                });
            }
            key.push(TERMINATOR);
            start = key.len();
        }
        // Built through `SmallBytes::new`, the key takes the one form of its length.
        let key = SmallBytes::new(&key);
        Ok(Path { key })
    }

    /// Rebuilds a path from a stored trie key, refusing bytes that no parsed path produces.
    /// Used when loading persisted data, which must be validated rather than trusted.
    pub fn from_key(key: Vec<u8>) -> Option<Path> {
        let mut escaped = false;
        let mut segment_len = 0;
        for &b in &key {
            if escaped {
                if b != 0x01 && b != 0x02 {
                    return None;
                }
                escaped = false;
                segment_len += 1;
            } else if b == ESCAPE {
                escaped = true;
            } else if b == TERMINATOR {
                if segment_len == 0 {
                    return None;
                }
                segment_len = 0;
            } else {
                segment_len += 1;
            }
        }
        if escaped || segment_len != 0 {
            return None;
        }
        let path = Path {
            key: SmallBytes::new(&key),
        };
        // `.` and `..` never survive parsing, so a stored key holding one is corrupt.
        if path.segments().any(|s| s == b"." || s == b"..") {
            return None;
        }
        Some(path)
    }

    /// Whether `escaped` is a segment as a parsed path's key holds it (escaped, without its
    /// terminator): not empty, no terminator, every escape followed by what it stands for, and
    /// neither `.` nor `..`. Used when loading persisted data, segment by segment.
    pub(crate) fn is_stored_segment(escaped: &[u8]) -> bool {
        let mut escaped_byte = false;
        for &b in escaped {
            if escaped_byte {
                if b != 0x01 && b != 0x02 {
                    return false;
                }
                escaped_byte = false;
            } else if b == ESCAPE {
                escaped_byte = true;
            } else if b == TERMINATOR {
                return false;
            }
        }
        !escaped_byte && !matches!(escaped, b"" | b"." | b"..")
    }

    /// Wraps a key that came out of the engine's own index, so is known to be well formed.
    pub(crate) fn from_trusted_key(key: &[u8]) -> Path {
        Path {
            key: SmallBytes::new(key),
        }
    }

    /// The trie key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    pub fn is_root(&self) -> bool {
        self.key.is_empty()
    }

    /// The number of segments.
    pub fn depth(&self) -> usize {
        self.key.iter().filter(|&&b| b == TERMINATOR).count()
    }

    /// True when `self` is `other` or one of its ancestors, that is when a lock on `self`
    /// covers `other`.
    pub fn covers(&self, other: &Path) -> bool {
        other.key.starts_with(&self.key)
    }

    /// The lengths of the keys of the path's ancestors and of the path itself, root first: the
    /// root's is 0, and each segment ends just after its terminator. Read off the key without
    /// allocating, so that the wait queue's index walks a path for free.
    pub(crate) fn prefix_ends(&self) -> impl DoubleEndedIterator<Item = usize> + '_ {
        std::iter::once(0).chain(
            self.key
                .iter()
                .enumerate()
                .filter_map(|(i, &b)| (b == TERMINATOR).then_some(i + 1)),
        )
    }

    /// The segments, unescaped.
    pub fn segments(&self) -> impl Iterator<Item = Vec<u8>> + '_ {
        self.key
            .split(|&b| b == TERMINATOR)
            .take(self.depth())
            .map(unescape)
    }

    /// The normalised form shown to clients: `/A/C`, and `/` for the root.
    pub fn to_bytes(&self) -> Vec<u8> {
        if self.is_root() {
            return b"/".to_vec();
        }
        let mut out = Vec::with_capacity(self.key.len());
        for segment in self.segments() {
            out.push(b'/');
            out.extend_from_slice(&segment);
        }
        out
    }
}

/// How many bytes of a path's key are kept inline, in a parsed path and while parsing one.
const KEY_INLINE: usize = 38;

fn unescape(escaped: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(escaped.len());
    let mut bytes = escaped.iter();
    while let Some(&b) = bytes.next() {
        if b == ESCAPE {
            // A key built by `push_segment` always has a byte after an escape.
            let next = bytes.next().copied().unwrap_or(0x01);
            out.push(next - 1);
        } else {
            out.push(b);
        }
    }
    out
}

impl fmt::Debug for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(&self.to_bytes()))
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(&self.to_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &[u8]) -> Path {
        Path::parse(s, &PathLimits::default()).expect("valid path")
    }

    #[test]
    fn normalisation_drops_empty_and_dot_segments() {
        assert_eq!(p(b"/A//C/"), p(b"A/C"));
        assert_eq!(p(b"/A/./C"), p(b"/A/C"));
        assert_eq!(p(b"/A/C").to_bytes(), b"/A/C");
        assert_eq!(p(b"").to_bytes(), b"/");
        assert_eq!(p(b"/"), Path::root());
        assert_eq!(p(b"/./"), Path::root());
    }

    #[test]
    fn dot_dot_is_refused() {
        let err = Path::parse(b"/A/../B", &PathLimits::default());
        assert_eq!(err, Err(PathError::DotDot));
        // Only the whole segment is special.
        assert_eq!(p(b"/A/..x").to_bytes(), b"/A/..x");
    }

    #[test]
    fn limits_are_enforced() {
        let limits = PathLimits {
            max_bytes: 8,
            max_depth: 2,
        };
        assert_eq!(
            Path::parse(b"/123456789", &limits),
            Err(PathError::TooLong { max: 8 })
        );
        assert_eq!(
            Path::parse(b"/a/b/c", &limits),
            Err(PathError::TooDeep { max: 2 })
        );
        assert!(Path::parse(b"/a//b", &limits).is_ok());
    }

    #[test]
    fn siblings_are_not_ancestors() {
        assert!(p(b"/A/C").covers(&p(b"/A/C/D")));
        assert!(p(b"/A/C").covers(&p(b"/A/C")));
        assert!(!p(b"/A/C").covers(&p(b"/A/CD")));
        assert!(!p(b"/p/f1").covers(&p(b"/p/f10")));
        assert!(Path::root().covers(&p(b"/x")));
    }

    #[test]
    fn key_order_is_depth_first_with_siblings_in_byte_order() {
        let mut paths = [
            p(b"/p/f1 copy"),
            p(b"/p/f1/x"),
            p(b"/p/f1"),
            p(b"/p"),
            p(b"/p/f1-"),
            p(b"/p/f\x00"),
            p(b"/p/f\x01"),
            p(b"/p/f"),
        ];
        paths.sort();
        let shown: Vec<Vec<u8>> = paths.iter().map(Path::to_bytes).collect();
        let expected: Vec<&[u8]> = vec![
            b"/p",
            b"/p/f",
            b"/p/f\x00",
            b"/p/f\x01",
            b"/p/f1",
            b"/p/f1/x",
            b"/p/f1 copy",
            b"/p/f1-",
        ];
        assert_eq!(shown, expected);
    }

    #[test]
    fn binary_segments_round_trip() {
        let raw = b"/\x00\x01\x02/\xe4\xb8\xad\xe6\x96\x87/a b%-[*";
        let path = p(raw);
        assert_eq!(path.to_bytes(), raw.to_vec());
        assert_eq!(Path::from_key(path.key().to_vec()), Some(path));
    }

    #[test]
    fn depth_counts_segments() {
        assert_eq!(p(b"/A/B/C").depth(), 3);
        assert_eq!(Path::root().depth(), 0);
        assert_eq!(p(b"/\x00/\x01").depth(), 2);
    }

    #[test]
    fn corrupt_keys_are_refused() {
        assert_eq!(Path::from_key(b"A".to_vec()), None);
        assert_eq!(Path::from_key(b"\x00".to_vec()), None);
        assert_eq!(Path::from_key(b"A\x01\x03\x00".to_vec()), None);
        assert_eq!(Path::from_key(b"..\x00".to_vec()), None);
        assert!(Path::from_key(Vec::new()).is_some());
    }

    #[test]
    fn hostile_bytes_round_trip_on_both_sides_of_the_inline_limit() {
        // The one-pass parser writes a key inline up to 38 bytes and spills to the heap after:
        // segments of NUL, 0x01 (each escaped to two bytes) and U+0100's UTF-8 bytes, at every
        // length across that limit, must give back exactly their segments, reload through
        // `from_key`, and order alike whichever side of the limit a key falls.
        let pieces: [&[u8]; 4] = [b"\x00", b"\x01", "\u{100}".as_bytes(), b"a"];
        let mut parsed = Vec::new();
        for len in 0..100 {
            for (k, piece) in pieces.iter().enumerate() {
                let segment: Vec<u8> = piece.iter().copied().cycle().take(len + 1).collect();
                let raw = [b"/x/".as_slice(), &segment, b"//./y".as_slice()].concat();
                let path = Path::parse(&raw, &PathLimits::CEILING).expect("valid path");
                let segments: Vec<Vec<u8>> = path.segments().collect();
                assert_eq!(
                    segments,
                    vec![b"x".to_vec(), segment.clone(), b"y".to_vec()],
                    "{k} {len}"
                );
                assert!(path.key().len() > len, "{k} {len}");
                assert!(Path::from_key(path.key().to_vec()) == Some(path.clone()));
                parsed.push(path);
            }
        }
        let mut by_path = parsed.clone();
        by_path.sort();
        parsed.sort_by(|a, b| a.key().cmp(b.key()));
        assert!(by_path == parsed);
    }

    /// The parser as `docs/commands.md` states it, written the slow and obvious way: split at `/`, drop
    /// empty and `.` segments, refuse `..`, count the depth, escape NUL and 0x01.
    fn reference(raw: &[u8], limits: &PathLimits) -> Result<Vec<u8>, PathError> {
        if raw.len() > limits.max_bytes {
            return Err(PathError::TooLong {
                max: limits.max_bytes,
            });
        }
        let mut key = Vec::new();
        let mut depth = 0;
        for segment in raw.split(|&b| b == b'/') {
            match segment {
                b"" | b"." => continue,
                b".." => return Err(PathError::DotDot),
                _ => {}
            }
            depth += 1;
            if depth > limits.max_depth {
                return Err(PathError::TooDeep {
                    max: limits.max_depth,
                });
            }
            for &b in segment {
                match b {
                    0x00 => key.extend([ESCAPE, 0x01]),
                    0x01 => key.extend([ESCAPE, 0x02]),
                    _ => key.push(b),
                }
            }
            key.push(TERMINATOR);
        }
        Ok(key)
    }

    proptest::proptest! {
        /// Dots, separators and bytes to escape in any mix and length, on both sides of the
        /// inline limit: the one-pass parser agrees with the reference, and the path it gives
        /// equals the one rebuilt from the reference's key (so a dropped `.` leaves no trace).
        #[test]
        fn the_one_pass_parser_agrees_with_the_reference(
            raw in proptest::collection::vec(
                proptest::sample::select(vec![b'/', b'.', b'a', b'b', 0x00, 0x01, 0xff]),
                0..100,
            ),
            max_depth in 1usize..40,
        ) {
            let limits = PathLimits { max_bytes: 90, max_depth };
            match (Path::parse(&raw, &limits), reference(&raw, &limits)) {
                (Ok(path), Ok(key)) => {
                    proptest::prop_assert_eq!(path.key(), &key[..]);
                    proptest::prop_assert!(Some(path) == Path::from_key(key));
                }
                (Err(got), Err(want)) => {
                    proptest::prop_assert_eq!(got.to_string(), want.to_string());
                }
                (got, want) => {
                    proptest::prop_assert!(false, "parse {:?} but reference {:?}", got.map(|p| p.key().to_vec()), want);
                }
            }
        }
    }
}
