//! The errors of the client, and the blockers a refused acquire reports.

use std::fmt;
use std::time::Duration;

use redis::{RedisError, Value};

use crate::request::Mode;

/// A live lock that keeps a request from being granted, as `PATHLOCK.CHECK` reports it.
///
/// Paths and tokens are binary-safe on the server; bytes that are not UTF-8 are shown here as
/// U+FFFD, which is enough to tell a user who holds what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    /// The locked path, normalised (`/A/C`; the root is `/`).
    pub path: String,
    pub mode: Mode,
    /// The holder's token.
    pub token: String,
    /// How long the lock lives unless it is renewed.
    pub ttl: Duration,
    pub fence: u64,
}

impl Blocker {
    /// Parses one entry of `LOCKS`/`CHECK`: `[path, mode, token, ttl-ms, fence, ...]` (the
    /// server's sixth field, the note, is not read yet).
    pub(crate) fn parse(entry: &Value) -> Option<Blocker> {
        let Value::Array(fields) = entry else {
            return None;
        };
        let [path, mode, token, ttl, fence, ..] = fields.as_slice() else {
            return None;
        };
        Some(Blocker {
            path: text(path)?,
            mode: Mode::parse(text(mode)?.as_bytes())?,
            token: text(token)?,
            ttl: Duration::from_millis(u64::try_from(integer(ttl)?).ok()?),
            fence: u64::try_from(integer(fence)?).ok()?,
        })
    }

    /// Parses a whole `CHECK` reply.
    pub(crate) fn parse_all(reply: &Value) -> Option<Vec<Blocker>> {
        match reply {
            Value::Array(entries) => entries.iter().map(Blocker::parse).collect(),
            Value::Nil => Some(Vec::new()),
            _ => None,
        }
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

pub(crate) fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} held by {} for {} ms more (fence {})",
            self.mode,
            self.path,
            self.token,
            self.ttl.as_millis(),
            self.fence
        )
    }
}

/// Everything an operation or a lease can fail with.
#[derive(Debug)]
pub enum Error {
    /// The locks are held by someone else (or promised to an earlier waiter). `blockers` are the
    /// live locks in the way as `PATHLOCK.CHECK` saw them just after the refusal; it is empty when
    /// the request was refused only for an earlier waiter, or when the blockers went away (or the
    /// server could not be asked) in between.
    Busy { blockers: Vec<Blocker> },
    /// The lease was lost: a renewal answered 0 (it expired, was released with its token
    /// elsewhere, or its key was deleted), or no renewal succeeded before its deadline.
    Lost,
    /// The grant reached fewer replicas than asked before `replicas_timeout`; the lease has been
    /// released.
    NotReplicated { acked: u32, wanted: u32 },
    /// The request is invalid before it reaches the server (no locks, or a move or copy of the
    /// project root).
    Invalid(String),
    /// The server answered something that is not in the command contract.
    Protocol(String),
    /// An error from Redis or from the connection.
    Redis(RedisError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Busy { blockers } if blockers.is_empty() => f.write_str("busy"),
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
            Error::Lost => f.write_str("the lease was lost"),
            Error::NotReplicated { acked, wanted } => write!(
                f,
                "the grant reached {acked} of the {wanted} replicas asked for; released"
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
