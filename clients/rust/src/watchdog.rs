//! The watchdog: where a lease stands, and the task that renews it every `ttl / 3` and declares
//! it lost when the server says so or when its deadline passes without a successful renewal.
//!
//! Level 4: builds on `connection`, `error` and `options`.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout_at, Instant};

use crate::connection::Conn;
use crate::error::LostReason;
use crate::options::millis;

/// Where a lease stands. It only ever leaves `Held`, once, for `Lost` or `Released`; whichever
/// of the watchdog and the releaser moves it first wins, which is what keeps a renewal that
/// answers after a release from being reported as a loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Held,
    Lost(LostReason),
    Released,
}

pub(crate) type StatusCell = Arc<watch::Sender<Status>>;

/// Moves `Held` to `to`; answers what the status was.
pub(crate) fn leave_held(status: &StatusCell, to: Status) -> Status {
    let mut before = Status::Held;
    status.send_if_modified(|now| {
        before = *now;
        if *now == Status::Held {
            *now = to;
            true
        } else {
            false
        }
    });
    before
}

/// Renews until the lease is lost; a release aborts the task.
///
/// `deadline` is when the lease expires as far as the client can tell: the send time of the
/// request that last set it, plus the TTL. The server set its own deadline from a later moment
/// (when the request arrived), so ours is never later than the server's and the client's clock
/// alone decides.
pub(crate) async fn run(
    mut conn: Conn,
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
    // The most locks a renewal has found. Renewals are one at a time, so the count they see
    // only falls when locks of the lease are gone (released with the token elsewhere, expired),
    // even while `Lease::lock` grants more.
    let mut most = 0;
    let reason = loop {
        sleep_until(next.min(deadline)).await;
        if Instant::now() >= deadline {
            break LostReason::Expired;
        }
        let sent = Instant::now();
        // A renewal that is still unanswered at the deadline comes too late, whatever it says.
        let Ok(reply) = timeout_at(deadline, conn.send(&renew)).await else {
            break LostReason::Expired;
        };
        match reply {
            Ok(Value::Int(renewed)) if renewed > 0 && renewed >= most => {
                most = renewed;
                deadline = sent + ttl;
                next = sent + period;
            }
            // The server no longer has the lease, or not all of it: expired, released
            // elsewhere, or key deleted.
            Ok(Value::Int(_)) => break LostReason::Gone,
            // The key now holds another type: the locks went with the old value.
            Err(e) if e.code() == Some("WRONGTYPE") => break LostReason::Replaced,
            // A connection error, or a server briefly unable to serve: the lease is not lost
            // while its deadline is ahead.
            Ok(_) | Err(_) => next = Instant::now() + retry,
        }
    };
    leave_held(&status, Status::Lost(reason));
}
