//! Every error a client can receive, in one place. Each says what was wrong and what is allowed,
//! starts with `ERR` (Redis adds nothing to a module's error), and is matched by the
//! integration tests on its text.

use std::fmt;

use pathlock_core::{PathError, TokenError};
use redis_module::RedisError;

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const ERR_NO_PATHS: &str =
    "ERR no lock requested: give at least one mode and path, e.g. WRITE /A";
pub const ERR_MISSING_PATH: &str = "ERR missing path after mode";
pub const ERR_EFFECT_INTERNAL: &str = "ERR PATHLOCK.EFFECT is internal: it carries a master's decisions to its replicas and the AOF, and clients cannot send it";
pub const ERR_EFFECT_SYNTAX: &str = "ERR malformed PATHLOCK.EFFECT";
pub const ERR_PANIC: &str = "ERR internal error in pathlock: the command was not applied";

/// An error that carries a value in its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    Fixed(&'static str),
    InvalidTtl { max: i64 },
    InvalidWait { max: i64 },
    UnknownWord(String),
    InvalidMode(String),
    DuplicateOption(&'static str),
    MissingValue(&'static str),
    TooManyPaths { max: i64 },
    Path(PathError),
    Token(TokenError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Fixed(message) => f.write_str(message),
            Error::InvalidTtl { max } => {
                write!(f, "ERR invalid TTL: must be an integer from 1 to {max}")
            }
            Error::InvalidWait { max } => {
                write!(f, "ERR invalid WAIT: must be an integer from 0 to {max}")
            }
            Error::UnknownWord(word) => write!(
                f,
                "ERR unknown option or mode '{word}': expected TOKEN, TTL, WAIT, READ or WRITE"
            ),
            Error::InvalidMode(word) => {
                write!(f, "ERR invalid mode '{word}': must be READ or WRITE")
            }
            Error::DuplicateOption(option) => write!(f, "ERR {option} given more than once"),
            Error::MissingValue(option) => write!(f, "ERR {option} needs a value"),
            Error::TooManyPaths { max } => {
                write!(f, "ERR too many paths: at most {max} per call")
            }
            Error::Path(e) => write!(f, "ERR {e}"),
            Error::Token(e) => write!(f, "ERR {e}"),
        }
    }
}

impl From<Error> for RedisError {
    fn from(error: Error) -> RedisError {
        RedisError::String(error.to_string())
    }
}

impl From<PathError> for Error {
    fn from(error: PathError) -> Error {
        Error::Path(error)
    }
}

impl From<TokenError> for Error {
    fn from(error: TokenError) -> Error {
        Error::Token(error)
    }
}

impl From<&'static str> for Error {
    fn from(message: &'static str) -> Error {
        Error::Fixed(message)
    }
}

/// Shows a client's word in an error message without letting arbitrary bytes through.
pub fn shown(word: &[u8]) -> String {
    const MAX: usize = 64;
    let text = String::from_utf8_lossy(&word[..word.len().min(MAX)]).into_owned();
    let text: String = text.chars().filter(|c| !c.is_control()).collect();
    if word.len() > MAX {
        format!("{text}...")
    } else {
        text
    }
}
