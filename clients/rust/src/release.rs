//! Freeing a token's locks: at once, or in the background until the server answers (for a
//! waiting acquire given up by its caller, once the server no longer queues its request).
//!
//! Level 1: builds on `connection`.

use std::time::Duration;

use redis::{Cmd, RedisResult, Value};
use tokio::time::Instant;

use crate::connection::{is_transient, Conn};

fn release_command(key: &str, token: &str) -> Cmd {
    let mut cmd = redis::cmd("PATHLOCK.RELEASE");
    cmd.arg(key).arg(token);
    cmd
}

/// Sends `PATHLOCK.RELEASE key token` once.
pub(crate) async fn release_now(conn: &mut Conn, key: &str, token: &str) -> RedisResult<Value> {
    conn.send(&release_command(key, token)).await
}

/// Releases `token` from a spawned task on the current runtime, retrying connection errors
/// until the server answers or until `expires_at`, after which the locks have expired on their
/// own and there is nothing left to free. Does nothing outside a tokio runtime: the locks then
/// expire with their TTL.
pub(crate) fn release_in_background(conn: Conn, key: String, token: String, expires_at: Instant) {
    spawn_release(conn, key, token, expires_at, false);
}

/// Like [`release_in_background`], for the token of a waiting `ACQUIRE` given up by its caller:
/// the RELEASE is sent only once `PATHLOCK.WAITERS` no longer lists the token.
///
/// The request leaves the server's queue when the server reads the close of the connection it
/// waited on, while this RELEASE goes over another connection and may be read first; the
/// request, still queued, could then be granted after the RELEASE, and its locks would be held
/// by nobody until their TTL. Once the token is no longer queued it can no longer be granted,
/// so a RELEASE sent after that look frees whatever it got. The looks stop at `expires_at` too.
pub(crate) fn release_when_unqueued(conn: Conn, key: String, token: String, expires_at: Instant) {
    spawn_release(conn, key, token, expires_at, true);
}

fn spawn_release(mut conn: Conn, key: String, token: String, expires_at: Instant, queued: bool) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        if queued {
            let look = tokio::time::timeout_at(expires_at, until_unqueued(&mut conn, &key, &token));
            if look.await.is_err() {
                return;
            }
        }
        let cmd = release_command(&key, &token);
        let mut delay = Duration::from_millis(10);
        loop {
            let attempt = tokio::time::timeout_at(expires_at, conn.send(&cmd)).await;
            match attempt {
                Ok(Err(e)) if is_transient(&e) && Instant::now() + delay < expires_at => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                _ => return,
            }
        }
    });
}

/// Returns once `PATHLOCK.WAITERS key` does not list `token`, or answers an error that is not
/// worth a retry (the RELEASE is then sent anyway: it is what the client did before it looked).
/// Connection errors are retried with a growing pause; the caller bounds the whole.
async fn until_unqueued(conn: &mut Conn, key: &str, token: &str) {
    let mut waiters = redis::cmd("PATHLOCK.WAITERS");
    waiters.arg(key);
    let mut delay = Duration::from_millis(5);
    loop {
        match conn.send(&waiters).await {
            Ok(reply) if !lists(&reply, token) => return,
            Ok(_) => {}
            Err(e) if is_transient(&e) => {}
            Err(_) => return,
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(200));
    }
}

/// Whether a `PATHLOCK.WAITERS` reply (entries `[token, [mode, path, ...], ...]`) lists `token`.
/// A reply of another shape lists nothing.
fn lists(reply: &Value, token: &str) -> bool {
    let Value::Array(entries) = reply else {
        return false;
    };
    entries.iter().any(|entry| {
        matches!(entry, Value::Array(fields)
            if matches!(fields.first(), Some(Value::BulkString(t)) if t.as_slice() == token.as_bytes()))
    })
}
