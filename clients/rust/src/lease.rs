//! A held lease: its fields, its loss signals, and the guard that releases it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::connection::{is_transient, Connection};
use crate::error::Error;
use crate::release::{release_in_background, release_now};
use crate::request::LockRequest;
use crate::watchdog;

/// Where a lease stands. It only ever leaves `Held`, once, for `Lost` or `Released`; whichever
/// of the watchdog and the releaser moves it first wins, which is what keeps a renewal that
/// answers after a release from being reported as a loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Held,
    Lost,
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

/// Locks granted to one owner, kept alive by a watchdog task until released.
///
/// This is a guard: dropping a lease that was not released stops its watchdog and releases it
/// from a task spawned on the current tokio runtime (retrying connection errors until the locks
/// would have expired anyway). The drop cannot wait for that, and outside a runtime it cannot
/// send anything, in which case the locks expire with their TTL. Call [`Lease::release`] to
/// release and see the outcome.
#[must_use = "dropping a Lease releases it at once"]
pub struct Lease {
    key: String,
    token: String,
    fence: u64,
    locks: Vec<LockRequest>,
    ttl: Duration,
    status: StatusCell,
    watchdog: JoinHandle<()>,
    conn: Option<SharedConnection>,
}

impl Lease {
    /// A lease granted by an `ACQUIRE` sent at `sent`, with its watchdog started.
    pub(crate) fn start<C: Connection>(
        conn: C,
        key: String,
        token: String,
        fence: u64,
        locks: Vec<LockRequest>,
        ttl: Duration,
        sent: Instant,
    ) -> Lease {
        let status: StatusCell = Arc::new(watch::Sender::new(Status::Held));
        let watchdog = tokio::spawn(watchdog::run(
            conn.clone(),
            status.clone(),
            key.clone(),
            token.clone(),
            ttl,
            sent + ttl,
        ));
        Lease {
            key,
            token,
            fence,
            locks,
            ttl,
            status,
            watchdog,
            conn: Some(SharedConnection(Box::new(conn))),
        }
    }

    /// The project key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner's token (a UUID v4 made by the client).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fence of the grant: pass it to the storage the locks protect, which can then refuse
    /// writes that carry an older one.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The locks the lease holds, as requested.
    pub fn locks(&self) -> &[LockRequest] {
        &self.locks
    }

    /// The TTL each renewal sets.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether the lease was lost: a renewal answered 0 (expired, released with its token
    /// elsewhere, key deleted) or no renewal succeeded before the deadline the client last knew.
    pub fn is_lost(&self) -> bool {
        *self.status.borrow() == Status::Lost
    }

    /// `Err(Error::Lost)` once the lease is lost, so work under it can stop with `?`.
    pub fn check(&self) -> Result<(), Error> {
        if self.is_lost() {
            Err(Error::Lost)
        } else {
            Ok(())
        }
    }

    /// A future that resolves when the lease is lost, at once if it already is. It never resolves
    /// for a lease that is released first. It owns what it needs, so it can be raced against the
    /// work in `tokio::select!`, or spawned with a callback of your own:
    /// `tokio::spawn({ let lost = lease.lost(); async move { lost.await; on_lost() } })`.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut status = self.status.subscribe();
        async move {
            if status.wait_for(|s| *s == Status::Lost).await.is_err() {
                // The lease and its watchdog are gone without a loss: it was released.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Stops the watchdog, then releases the locks (`PATHLOCK.RELEASE key token`). Releasing a
    /// lost lease is not an error: it still asks the server to free whatever is left, but
    /// ignores the outcome. When the server cannot be reached, the error is returned and the
    /// release is retried in the background until the locks would have expired anyway.
    pub async fn release(mut self) -> Result<(), Error> {
        let before = self.stop();
        let Some(mut conn) = self.conn.take() else {
            return Ok(());
        };
        let result = release_now(&mut conn, &self.key, &self.token).await;
        let failure = match result {
            Ok(_) => return Ok(()),
            Err(e) if is_transient(&e) => {
                release_in_background(
                    conn,
                    self.key.clone(),
                    self.token.clone(),
                    Instant::now() + self.ttl,
                );
                e
            }
            Err(e) => e,
        };
        if before == Status::Lost {
            Ok(())
        } else {
            Err(failure.into())
        }
    }

    /// Ends the watchdog: the status leaves `Held` before the task is aborted, so a renewal that
    /// answers in between (0, since the lock is being released) cannot be taken for a loss.
    fn stop(&mut self) -> Status {
        let before = leave_held(&self.status, Status::Released);
        self.watchdog.abort();
        before
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop();
        if let Some(conn) = self.conn.take() {
            // The server may still hold the locks of a lost lease (its deadline is later than
            // ours), so they are released too.
            release_in_background(
                conn,
                std::mem::take(&mut self.key),
                std::mem::take(&mut self.token),
                Instant::now() + self.ttl,
            );
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("fence", &self.fence)
            .field("locks", &self.locks)
            .field("status", &*self.status.borrow())
            .finish()
    }
}

/// Any of the connections, boxed, so that a `Lease` does not carry the connection's type.
struct SharedConnection(Box<dyn ConnectionLike + Send + Sync>);

impl ConnectionLike for SharedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}
