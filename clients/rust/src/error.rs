//! The errors of the client, and why a lease can be lost.
//!
//! Level 2: builds on `info` and `request`.

use std::fmt;

use redis::RedisError;

use crate::info::Blocker;
use crate::request::LockRequest;

/// Why a lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LostReason {
    /// A renewal answered 0, or fewer locks than an earlier one: the lease's locks expired, were
    /// released with its token elsewhere, or its key was deleted.
    Gone,
    /// No renewal succeeded before the deadline the client last knew, counted on its own clock
    /// (the server was paused, stopped or out of reach).
    Expired,
    /// The key now holds another type of value (a renewal answered `WRONGTYPE`).
    Replaced,
}

/// The texts are the contract's (`clients/contract/contract.json`), the same in every client.
impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::Gone => {
                "a renewal answered 0, or fewer locks than the lease held: its locks expired, \
                 were released with its token, or the key was deleted"
            }
            LostReason::Expired => {
                "no renewal succeeded before its deadline, counted on the client's own clock"
            }
            LostReason::Replaced => {
                "the key now holds another type of value, and the locks went with the old one"
            }
        })
    }
}

/// A key in double quotes for a message, as every client shows it: `"` and `\\` escaped with a
/// backslash, control characters as `\\xHH`.
pub(crate) struct Quoted<'a>(pub(crate) &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for c in self.0.chars() {
            match c {
                '"' | '\\' => write!(f, "\\{c}")?,
                c if (c as u32) < 0x20 || c == '\u{7f}' => write!(f, "\\x{:02x}", c as u32)?,
                c => write!(f, "{c}")?,
            }
        }
        f.write_str("\"")
    }
}

/// Everything an operation or a lease can fail with.
#[derive(Debug)]
pub enum Error {
    /// The locks are held by someone else (or promised to an earlier waiter). `blockers` are the
    /// live locks in the way as `PATHLOCK.CHECK` saw them just after the refusal, with their
    /// notes. It is empty when nothing holds the paths any more: the blockers let go in between,
    /// or only an earlier waiting request was in the way; the message then says so, and trying
    /// again is the answer. It is also empty when the check itself failed (a connection error,
    /// a server briefly unable to serve, a `NOPERM` for an ACL user who may not run
    /// `PATHLOCK.CHECK`): then `check_error` is that error (`None` otherwise;
    /// it is also the error's `source()`), and the message says that the locks in the way could
    /// not be read, never that nothing holds them.
    Busy {
        key: String,
        locks: Vec<LockRequest>,
        blockers: Vec<Blocker>,
        check_error: Option<RedisError>,
    },
    /// The lease `token` on `key` was lost, for `reason`; work under it must stop.
    Lost {
        key: String,
        token: String,
        reason: LostReason,
    },
    /// The grant reached fewer replicas than asked before `replicas_timeout`; the lease has been
    /// released.
    NotReplicated { acked: u32, wanted: u32 },
    /// The key holds another type of value than a pathlock project (the server's `WRONGTYPE`).
    WrongType { key: String },
    /// The request is invalid before it reaches the server: no locks, an empty path, the project
    /// root given to an operation helper, a TTL under a millisecond.
    Invalid(String),
    /// The server answered something that is not in the command contract.
    Protocol(String),
    /// Any other error from Redis or from the connection.
    Redis(RedisError),
}

impl Error {
    /// A Redis error about `key`: the server's `WRONGTYPE` becomes [`Error::WrongType`].
    pub(crate) fn about(key: &str, e: RedisError) -> Error {
        if e.code() == Some("WRONGTYPE") {
            Error::WrongType { key: key.into() }
        } else {
            Error::Redis(e)
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The texts are the contract's (`clients/contract/contract.json`).
            Error::Busy {
                key,
                locks,
                blockers,
                check_error,
            } => {
                f.write_str("busy: ")?;
                for (i, lock) in locks.iter().enumerate() {
                    let comma = if i > 0 { ", " } else { "" };
                    write!(f, "{comma}{} {}", lock.mode, lock.path)?;
                }
                write!(f, " in {}: ", Quoted(key))?;
                if let (true, Some(e)) = (blockers.is_empty(), check_error) {
                    // Never "nothing holds these paths": the client does not know who does.
                    return write!(f, "the locks in the way could not be read ({e}); try again");
                }
                if blockers.is_empty() {
                    return f.write_str(
                        "nothing holds these paths now: the holders let go in between, or an \
                         earlier waiting request goes first; try again",
                    );
                }
                for (i, blocker) in blockers.iter().enumerate() {
                    let semicolon = if i > 0 { "; " } else { "" };
                    write!(f, "{semicolon}{blocker}")?;
                }
                Ok(())
            }
            Error::Lost { key, token, reason } => {
                write!(f, "lease {token} on {} is lost: {reason}", Quoted(key))
            }
            Error::NotReplicated { acked, wanted } => write!(
                f,
                "the grant reached {acked} of the {wanted} replicas asked for; released"
            ),
            Error::WrongType { key } => write!(
                f,
                "key {} is not a pathlock project: it holds another type of value (check the key \
                 name)",
                Quoted(key)
            ),
            Error::Invalid(why) => write!(f, "invalid request: {why}"),
            Error::Protocol(what) => write!(f, "unexpected reply from the server: {what}"),
            Error::Redis(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            Error::Busy {
                check_error: Some(e),
                ..
            } => Some(e),
            _ => None,
        }
    }
}

impl From<RedisError> for Error {
    fn from(e: RedisError) -> Error {
        Error::Redis(e)
    }
}
