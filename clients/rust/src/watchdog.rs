//! The watchdog: renews a lease every `ttl / 3` and declares it lost when the server says so or
//! when its deadline passes without a successful renewal.

use std::time::Duration;

use redis::Value;
use tokio::time::{sleep_until, timeout_at, Instant};

use crate::connection::{send, Connection};
use crate::lease::{leave_held, Status, StatusCell};
use crate::millis;

/// Renews until the lease is lost; a release aborts the task.
///
/// `deadline` is when the lease expires as far as the client can tell: the send time of the
/// request that last set it, plus the TTL. The server set its own deadline from a later moment
/// (when the request arrived), so ours is never later than the server's and the client's clock
/// alone decides.
pub(crate) async fn run<C: Connection>(
    mut conn: C,
    status: StatusCell,
    key: String,
    token: String,
    ttl: Duration,
    mut deadline: Instant,
) {
    let period = (ttl / 3).max(Duration::from_millis(1));
    // Failed renewals are retried often enough to land several times before the deadline.
    let retry = (period / 4).clamp(Duration::from_millis(5), Duration::from_millis(250));
    let mut renew = redis::cmd("PATHLOCK.RENEW");
    renew.arg(&key).arg(&token).arg(millis(ttl));
    let mut next = deadline - ttl + period;
    loop {
        sleep_until(next.min(deadline)).await;
        if Instant::now() >= deadline {
            break;
        }
        let sent = Instant::now();
        // A renewal that is still unanswered at the deadline comes too late, whatever it says.
        let Ok(reply) = timeout_at(deadline, send(&mut conn, &renew)).await else {
            break;
        };
        match reply {
            Ok(Value::Int(renewed)) if renewed > 0 => {
                deadline = sent + ttl;
                next = sent + period;
            }
            // The server no longer has the lease: expired, released elsewhere, or key deleted.
            Ok(Value::Int(_)) => break,
            // The key now holds another type: the locks went with the old value.
            Err(e) if e.code() == Some("WRONGTYPE") => break,
            // A connection error, or a server briefly unable to serve: the lease is not lost
            // while its deadline is ahead.
            Ok(_) | Err(_) => next = Instant::now() + retry,
        }
    }
    leave_held(&status, Status::Lost);
}
