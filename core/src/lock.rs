//! The vocabulary of a lock: its mode, its owner's token, and the view of a lock that leaves the
//! engine.

use std::fmt;

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

/// The longest token a client may supply.
pub const MAX_TOKEN_BYTES: usize = 128;

/// An owner's identity: 1 to 128 arbitrary bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(Box<[u8]>);

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
        Ok(Token(bytes.into()))
    }

    /// A fresh random token: a UUID v4, 36 characters, lowercase and hyphenated.
    pub fn generate() -> Token {
        Token(
            uuid::Uuid::new_v4()
                .hyphenated()
                .to_string()
                .into_bytes()
                .into(),
        )
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

/// A lock as the engine reports it: for listings, conflicts and reclaimed leases.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LockInfo {
    pub path: Path,
    pub mode: Mode,
    pub token: Token,
    /// Absolute time in milliseconds after which the lock is gone.
    pub deadline: u64,
    pub fence: u64,
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
}
