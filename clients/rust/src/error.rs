//! The errors of the client, and why a lease can be lost.
//!
//! Level 2: builds on `info`.

use std::fmt;

use redis::RedisError;

use crate::info::Blocker;

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

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::Gone => {
                "a renewal answered 0, or fewer locks than the lease held (its locks expired, \
                 were released with its token, or the key was deleted)"
            }
            LostReason::Expired => "no renewal succeeded before its deadline",
            LostReason::Replaced => "the key now holds another type of value",
        })
    }
}

/// Everything an operation or a lease can fail with.
#[derive(Debug)]
pub enum Error {
    /// The locks are held by someone else (or promised to an earlier waiter). `blockers` are the
    /// live locks in the way as `PATHLOCK.CHECK` saw them just after the refusal, with their
    /// notes; it is empty when the request was refused only for an earlier waiter, or when the
    /// blockers went away (or the server could not be asked) in between.
    Busy { blockers: Vec<Blocker> },
    /// The lease was lost, for `reason`; work under it must stop.
    Lost { reason: LostReason },
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
            Error::Busy { blockers } if blockers.is_empty() => {
                f.write_str("busy (an earlier request is waiting for it)")
            }
            Error::Busy { blockers } => {
                f.write_str("busy: ")?;
                for (i, blocker) in blockers.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{blocker}")?;
                }
                Ok(())
            }
            Error::Lost { reason } => write!(f, "the lease was lost: {reason}"),
            Error::NotReplicated { acked, wanted } => write!(
                f,
                "the grant reached {acked} of the {wanted} replicas asked for; released"
            ),
            Error::WrongType { key } => write!(
                f,
                "key '{key}' is not a pathlock project: it holds another type of value (check \
                 the key name)"
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
            _ => None,
        }
    }
}

impl From<RedisError> for Error {
    fn from(e: RedisError) -> Error {
        Error::Redis(e)
    }
}
