//! What the server lists: the locks of `LOCKS` and `CHECK` (who holds what, and why) and the
//! queued requests of `WAITERS`, parsed from their replies.
//!
//! Level 1: builds on `request`.

use std::fmt;
use std::time::Duration;

use redis::Value;

use crate::request::{LockRequest, Mode};

/// A live lock as `PATHLOCK.LOCKS` and `PATHLOCK.CHECK` report it; in [`Error::Busy`], one that
/// keeps a request from being granted.
///
/// Paths, tokens and notes are binary-safe on the server; bytes that are not UTF-8 are shown
/// here as U+FFFD, which is enough to tell a user who holds what.
///
/// [`Error::Busy`]: crate::Error::Busy
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
    /// What the holder said it is doing (`"move /A/C -> /B"` by default), if anything.
    pub note: Option<String>,
}

impl Blocker {
    /// Parses one entry of `LOCKS`/`CHECK`: `[path, mode, token, ttl-ms, fence, note]`.
    fn parse(entry: &Value) -> Option<Blocker> {
        let Value::Array(fields) = entry else {
            return None;
        };
        let [path, mode, token, ttl, fence, note] = fields.as_slice() else {
            return None;
        };
        Some(Blocker {
            path: text(path)?,
            mode: Mode::parse(text(mode)?.as_bytes())?,
            token: text(token)?,
            ttl: millis(ttl)?,
            fence: u64::try_from(integer(fence)?).ok()?,
            note: optional_text(note)?,
        })
    }

    /// Parses a whole `LOCKS` or `CHECK` reply.
    pub(crate) fn parse_all(reply: &Value) -> Option<Vec<Blocker>> {
        entries(reply)?.iter().map(Blocker::parse).collect()
    }
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The contract's `blocker` text, as `Error::Busy` shows each.
        write!(f, "{} {} held by {}", self.mode, self.path, self.token)?;
        if let Some(note) = &self.note {
            write!(f, " ({note})")?;
        }
        write!(f, " for {} ms more", self.ttl.as_millis())
    }
}

/// A request queued by a waiting acquire, as `PATHLOCK.WAITERS` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub token: String,
    /// Every lock of the request, as it was asked for.
    pub locks: Vec<LockRequest>,
    /// How long it has waited so far.
    pub waited: Duration,
    /// How long it will still wait before it times out.
    pub left: Duration,
    pub note: Option<String>,
}

impl Waiter {
    /// Parses one entry of `WAITERS`: `[token, [mode, path, ...], waited-ms, left-ms, note]`.
    fn parse(entry: &Value) -> Option<Waiter> {
        let Value::Array(fields) = entry else {
            return None;
        };
        let [token, Value::Array(pairs), waited, left, note] = fields.as_slice() else {
            return None;
        };
        let locks = pairs
            .chunks(2)
            .map(|pair| match pair {
                [mode, path] => Some(LockRequest {
                    mode: Mode::parse(text(mode)?.as_bytes())?,
                    path: text(path)?,
                }),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Waiter {
            token: text(token)?,
            locks,
            waited: millis(waited)?,
            left: millis(left)?,
            note: optional_text(note)?,
        })
    }

    /// Parses a whole `WAITERS` reply.
    pub(crate) fn parse_all(reply: &Value) -> Option<Vec<Waiter>> {
        entries(reply)?.iter().map(Waiter::parse).collect()
    }
}

fn entries(reply: &Value) -> Option<&[Value]> {
    match reply {
        Value::Array(entries) => Some(entries),
        Value::Nil => Some(&[]),
        _ => None,
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// A note: text, or nil for none. `None` when the field is neither.
fn optional_text(value: &Value) -> Option<Option<String>> {
    match value {
        Value::Nil => Some(None),
        other => text(other).map(Some),
    }
}

fn millis(value: &Value) -> Option<Duration> {
    Some(Duration::from_millis(u64::try_from(integer(value)?).ok()?))
}

pub(crate) fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}
