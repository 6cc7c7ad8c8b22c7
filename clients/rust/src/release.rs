//! Freeing a token's locks: at once, or in the background until the server answers.
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
pub(crate) fn release_in_background(
    mut conn: Conn,
    key: String,
    token: String,
    expires_at: Instant,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
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
