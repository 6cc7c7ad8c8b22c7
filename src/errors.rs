//! Every error a client can receive, in one place. Each says what was wrong and what is allowed,
//! starts with `ERR` (Redis adds nothing to a module's error), or `WRONGTYPE` for a key of
//! another type, and is matched by the integration tests on its text.
//!
//! Level 0: imports nothing of the crate. Used by everything that answers a client.

use std::fmt::{self, Write};

use pathlock_core::{PathError, TokenError};
use redis_module::{RedisError, RedisResult};

pub const ERR_NO_PATHS: &str =
    "ERR no lock requested: give at least one mode and path, e.g. WRITE /A";
pub const ERR_MISSING_PATH: &str = "ERR missing path after mode";
pub const ERR_EFFECT_INTERNAL: &str = "ERR PATHLOCK.EFFECT is internal: it carries a master's decisions to its replicas and the AOF, and clients cannot send it";
pub const ERR_EFFECT_SYNTAX: &str = "ERR malformed PATHLOCK.EFFECT";
pub const ERR_FENCES_EXHAUSTED: &str =
    "ERR fences reached 2^53, beyond which JavaScript clients cannot read them exactly";
/// What the log adds where the server refuses a file for an impossible fence, since only the
/// operator can choose to load it.
pub const HINT_LOWER_IMPOSSIBLE_FENCES: &str = "to load it with such fences lowered to the highest possible one, start the server with pathlock.lower-impossible-fences yes (docs/operations.md)";
pub const ERR_PANIC: &str = "ERR internal error in pathlock: the command was not applied";
/// The answers of a waiter whose project left the key name it waited on (see `registry`).
pub const ERR_MOVED_RENAMED: &str = "ERR project moved: its key was renamed or moved to another database while this client waited; acquire it under its new name";
pub const ERR_MOVED_SWAPPED: &str =
    "ERR project moved: SWAPDB swapped its database while this client waited";
pub const ERR_REPLACED: &str =
    "ERR project replaced: its key was overwritten by another value while this client waited";

/// A waiter whose key was deleted while its slot is moving to another node: retried, Redis routes
/// it to where the slot is now (`-ASK` or `-MOVED`).
pub const ERR_TRYAGAIN: &str =
    "TRYAGAIN the project's slot is being migrated or is served by another node; retry";

/// What Redis answers its own blocked clients when their server turns replica.
pub const ERR_UNBLOCKED: &str =
    "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";

/// A waiter's project was migrated to another server (`MIGRATE`); `destination` is `host:port`
/// as the `MIGRATE` command gave it, already escaped; unknown when a transaction serialized the
/// value (`DUMP`) and then deleted it, which `registry` cannot tell from a `MIGRATE`.
pub fn moved_migrated(destination: Option<&str>) -> String {
    let destination = destination.unwrap_or("another server");
    format!(
        "ERR project moved: its key was migrated to {destination} while this client waited; acquire it there"
    )
}

/// A key that holds a value of another type than a project: Redis's `WRONGTYPE`, naming the key
/// (escaped, as `for_client` does) so that an application that mixed up its key names sees which.
pub fn wrong_type(key: &[u8]) -> String {
    format!(
        "WRONGTYPE key '{}' is not a pathlock project: it holds another type of value",
        for_client(key)
    )
}

/// An error that carries a value in its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    Fixed(&'static str),
    InvalidTtl {
        max: i64,
    },
    InvalidWait {
        max: i64,
    },
    UnknownWord(String),
    InvalidMode(String),
    DuplicateOption(&'static str),
    MissingValue(&'static str),
    TooManyPaths {
        max: i64,
    },
    /// A `NOTE` of `len` bytes, above `pathlock.max-note-bytes`.
    NoteTooLong {
        len: usize,
        max: i64,
    },
    /// A word after `LOCKS key path` other than `TOKEN`.
    UnknownLocksWord(String),
    /// An effect's fence counter above `fences::ceiling`: a forged or damaged stream or file.
    ImpossibleFence {
        counter: u64,
        ceiling: u64,
    },
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
                "ERR unknown option or mode '{word}': expected TOKEN, TTL, WAIT, NOTE, READ or WRITE"
            ),
            Error::InvalidMode(word) => {
                write!(f, "ERR invalid mode '{word}': must be READ or WRITE")
            }
            Error::DuplicateOption(option) => write!(f, "ERR {option} given more than once"),
            Error::MissingValue(option) => write!(f, "ERR {option} needs a value"),
            Error::TooManyPaths { max } => {
                write!(f, "ERR too many paths: at most {max} per call")
            }
            Error::NoteTooLong { len, max } => write!(
                f,
                "ERR NOTE too long: {len} bytes, at most {max} (pathlock.max-note-bytes)"
            ),
            Error::UnknownLocksWord(word) => write!(
                f,
                "ERR unknown option '{word}' after the path: expected TOKEN token (a folder named TOKEN is written /TOKEN)"

            ),
            Error::ImpossibleFence { counter, ceiling } => write!(
                f,
                "ERR impossible fence counter {counter}: no server can have reached more than {ceiling} by now (docs/commands.md, Fences); refused"
            ),
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

// The three audiences of foreign bytes, one function each: a client reading an error
// (`for_client`), the server's log (`for_log`), and redis-module writing a reply
// (`for_redis_module`). All three escape through `escape`.

/// A client's word as an error message shows it: at most 64 bytes of it, with every byte that is
/// not printable ASCII escaped as `redis-cli` shows it (`\xc4\x80`, `\n`, `\\`). The result is
/// plain ASCII whatever the client sent: redis-module turns an error reply into a C string one
/// `char` at a time (`c as u8`), so a character such as U+0100 would become a NUL byte there and
/// abort the server.
pub fn for_client(word: &[u8]) -> String {
    const MAX: usize = 64;
    let mut text = escape(&word[..word.len().min(MAX)]);
    if word.len() > MAX {
        text.push_str("...");
    }
    text
}

/// A key name or other foreign word for the server's log, shown as `for_client` shows it and
/// with `%` doubled: the server takes a module's log message as a printf format.
pub fn for_log(word: &[u8]) -> String {
    for_client(word).replace('%', "%%")
}

/// What every handler's result goes through before redis-module writes it: an error message
/// that is not plain printable ASCII is escaped. Every message this module builds already is;
/// this is the last line of defence, so that a message that forgot to escape a client's bytes
/// still cannot turn into a NUL inside the reply: redis-module builds a C string from an error
/// one `char` at a time and unwraps it, outside any `catch_unwind`, so a stray byte there would
/// abort the server. The data replies (bulk strings, integers, arrays) are binary safe.
pub fn for_redis_module(result: RedisResult) -> RedisResult {
    match result {
        Err(RedisError::String(message)) => {
            Err(RedisError::String(printable(&message).into_owned()))
        }
        Err(RedisError::Str(message)) if printable(message) != message => {
            Err(RedisError::String(printable(message).into_owned()))
        }
        other => other,
    }
}

/// `bytes` with everything but printable ASCII escaped, as `redis-cli` prints a reply.
fn escape(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => text.push_str("\\\\"),
            b'"' => text.push_str("\\\""),
            b'\n' => text.push_str("\\n"),
            b'\r' => text.push_str("\\r"),
            b'\t' => text.push_str("\\t"),
            0x07 => text.push_str("\\a"),
            0x08 => text.push_str("\\b"),
            0x20..=0x7e => text.push(char::from(b)),
            // Writing to a String cannot fail.
            _ => {
                let _ = write!(text, "\\x{b:02x}");
            }
        }
    }
    text
}

/// `message` as it may reach redis-module's reply functions: printable ASCII only.
fn printable(message: &str) -> std::borrow::Cow<'_, str> {
    if message.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        std::borrow::Cow::Borrowed(message)
    } else {
        std::borrow::Cow::Owned(escape(message.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_is_shown_as_printable_ascii_whatever_its_bytes() {
        assert_eq!(for_client("Ā".as_bytes()), "\\xc4\\x80");
        assert_eq!(for_client(b"a\0b\r\n\t\"\\"), "a\\x00b\\r\\n\\t\\\"\\\\");
        assert_eq!(for_client(&[0xff, 0x7f, b' ']), "\\xff\\x7f ");
        let long = [b'x'; 100];
        assert_eq!(for_client(&long), format!("{}...", "x".repeat(64)));
        for b in 0..=255u8 {
            assert!(for_client(&[b]).bytes().all(|c| (0x20..=0x7e).contains(&c)));
        }
    }

    #[test]
    fn every_message_showing_a_client_word_is_printable_ascii() {
        for word in ["Ā", "Ѐ", "＀", "\0", "%s%n"] {
            for error in [
                Error::UnknownWord(for_client(word.as_bytes())),
                Error::InvalidMode(for_client(word.as_bytes())),
                Error::UnknownLocksWord(for_client(word.as_bytes())),
            ] {
                let text = error.to_string();
                assert!(text.starts_with("ERR "), "{text}");
                assert!(text.bytes().all(|c| (0x20..=0x7e).contains(&c)), "{text}");
            }
        }
    }

    #[test]
    fn a_wrong_type_names_the_key_escaped() {
        assert_eq!(
            wrong_type(b"cache:\xc4\x80\r\n"),
            "WRONGTYPE key 'cache:\\xc4\\x80\\r\\n' is not a pathlock project: it holds another type of value"
        );
        assert!(wrong_type(&[0; 100])
            .bytes()
            .all(|c| (0x20..=0x7e).contains(&c)));
    }

    #[test]
    fn printable_escapes_only_what_is_not_printable_ascii() {
        assert_eq!(printable("ERR plain"), "ERR plain");
        assert_eq!(printable("ERR \u{100}"), "ERR \\xc4\\x80");
        assert_eq!(printable("ERR a\0b"), "ERR a\\x00b");
    }
}
