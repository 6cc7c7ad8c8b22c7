//! A held lease: its fields, its loss signals, the locks it takes under its own token, and the
//! guard that releases it.
//!
//! Level 5: builds on `acquire`, `watchdog`, `release`, `connection`, `options`, `error` and
//! `request`.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::acquire::{grant, Ask};
use crate::connection::{is_transient, Conn, Links};
use crate::error::{Error, LostReason};
use crate::options::{millis, Options};
use crate::release::{release_in_background, release_now};
use crate::request::{checked, LockRequest};
use crate::watchdog::{self, leave_held, Status, StatusCell};

/// Locks granted to one owner, kept alive by a watchdog task until released.
///
/// [`Lease::lock`] takes more locks under the same token; the watchdog renews them with the
/// rest and the release frees them with the rest.
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
    options: Options,
    status: StatusCell,
    watchdog: JoinHandle<()>,
    links: Arc<Links>,
    conn: Option<Conn>,
}

impl Lease {
    /// A lease granted by an `ACQUIRE` sent at `sent`, with its watchdog started on `conn`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        links: Arc<Links>,
        conn: Conn,
        key: String,
        token: String,
        fence: u64,
        locks: Vec<LockRequest>,
        options: Options,
        sent: Instant,
    ) -> Lease {
        let status: StatusCell = Arc::new(watch::Sender::new(Status::Held));
        let watchdog = tokio::spawn(watchdog::run(
            conn.clone(),
            status.clone(),
            key.clone(),
            token.clone(),
            options.ttl,
            sent + options.ttl,
        ));
        Lease {
            key,
            token,
            fence,
            locks,
            options,
            status,
            watchdog,
            links,
            conn: Some(conn),
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

    /// Every lock the lease holds, as requested: the operation's, then those [`Lease::lock`]
    /// added.
    pub fn locks(&self) -> &[LockRequest] {
        &self.locks
    }

    /// The TTL each renewal sets: whole milliseconds, a fraction of one rounded up.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(millis(self.options.ttl))
    }

    /// The note sent with the grant, shown with the locks to whoever they block.
    pub fn note(&self) -> Option<&str> {
        self.options.note.as_deref()
    }

    /// Whether the lease was lost: a renewal answered 0 (expired, released with its token
    /// elsewhere, key deleted) or no renewal succeeded before the deadline the client last knew.
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why the lease was lost, once it is.
    pub fn lost_reason(&self) -> Option<LostReason> {
        match *self.status.borrow() {
            Status::Lost(reason) => Some(reason),
            _ => None,
        }
    }

    /// `Err(Error::Lost { .. })` once the lease is lost, so work under it can stop with `?`.
    pub fn check(&self) -> Result<(), Error> {
        match self.lost_reason() {
            Some(reason) => Err(Error::Lost {
                key: self.key.clone(),
                token: self.token.clone(),
                reason,
            }),
            None => Ok(()),
        }
    }

    /// A future that resolves with `Some(reason)` when the lease is lost, and with `None` once it
    /// is released (or dropped) without a loss, at once if either has happened: nothing waits
    /// for the loss of a lease that is gone, as a `oneshot` receiver ends when its sender does.
    /// It owns what it needs, so it can be raced against the work in `tokio::select!`, or
    /// spawned with a callback of your own:
    /// `tokio::spawn({ let lost = lease.lost(); async move { if let Some(r) = lost.await { on_lost(r) } } })`.
    pub fn lost(&self) -> impl Future<Output = Option<LostReason>> + Send + 'static {
        let mut status = self.status.subscribe();
        async move {
            let ended = status
                .wait_for(|s| *s != Status::Held)
                .await
                .map(|status| *status);
            match ended {
                Ok(Status::Lost(reason)) => Some(reason),
                // Released, or the lease and its watchdog are gone without a loss.
                _ => None,
            }
        }
    }

    /// Takes more locks under this lease's token, inside or beside what it holds; `.await` it for
    /// the fence of that grant. They have the lease's TTL and replicas, are renewed by its
    /// watchdog and freed by its release; the note and the wait are the lease's unless
    /// [`LockMore::note`] and [`LockMore::wait`] say otherwise. Locking what the lease already
    /// holds is an idempotent re-acquire (a new fence; a note replaces theirs). Fails with
    /// [`Error::Busy`] when another owner is in the way, [`Error::Lost`] once the lease is lost.
    pub fn lock<I>(&mut self, requests: I) -> LockMore<'_>
    where
        I: IntoIterator,
        I::Item: Into<LockRequest>,
    {
        let requests =
            checked(requests.into_iter().map(Into::into).collect()).map_err(Error::Invalid);
        let options = self.options.clone();
        LockMore {
            lease: self,
            requests,
            options,
        }
    }

    /// Renews the lease before it takes more locks: once its own locks are gone (its key
    /// deleted, its token released elsewhere), an ACQUIRE under its token would make new ones
    /// that keep answering its renewals, and the loss would go unseen.
    async fn prove_held(&mut self) -> Result<(), Error> {
        self.check()?;
        let Some(conn) = self.conn.as_mut() else {
            return Err(Error::Lost {
                key: self.key.clone(),
                token: self.token.clone(),
                reason: LostReason::Gone,
            });
        };
        let mut renew = redis::cmd("PATHLOCK.RENEW");
        renew
            .arg(&self.key)
            .arg(&self.token)
            .arg(millis(self.options.ttl));
        let lost = match conn.send(&renew).await {
            Ok(Value::Int(renewed)) if renewed > 0 => None,
            Ok(Value::Int(_)) => Some(LostReason::Gone),
            Ok(other) => return Err(Error::Protocol(format!("RENEW answered {other:?}"))),
            Err(e) if e.code() == Some("WRONGTYPE") => Some(LostReason::Replaced),
            Err(e) => return Err(e.into()),
        };
        if let Some(reason) = lost {
            leave_held(&self.status, Status::Lost(reason));
            self.watchdog.abort();
        }
        self.check()
    }

    async fn lock_more(
        &mut self,
        requests: Result<Vec<LockRequest>, Error>,
        options: Options,
    ) -> Result<u64, Error> {
        let requests = requests?;
        options.check()?;
        self.prove_held().await?;
        let granted = grant(Ask {
            links: self.links.clone(),
            key: self.key.clone(),
            token: self.token.clone(),
            requests: requests.clone(),
            options,
            fresh: false,
        })
        .await?;
        if let Err(lost) = self.check() {
            // The lease ended while the grant was on its way: nobody renews those locks now.
            if let Some(conn) = &self.conn {
                let expires_at = Instant::now() + self.options.ttl;
                release_in_background(
                    conn.clone(),
                    self.key.clone(),
                    self.token.clone(),
                    expires_at,
                );
            }
            return Err(lost);
        }
        for request in requests {
            if !self.locks.contains(&request) {
                self.locks.push(request);
            }
        }
        Ok(granted.fence)
    }

    /// Stops the watchdog, then releases the locks (`PATHLOCK.RELEASE key token`), those taken
    /// by [`Lease::lock`] too. Releasing a lost lease is not an error: it still asks the server
    /// to free whatever is left, but ignores the outcome. When the server cannot be reached, the
    /// error is returned and the release is retried in the background until the locks would
    /// have expired anyway.
    pub async fn release(mut self) -> Result<(), Error> {
        let before = self.stop();
        let Some(mut conn) = self.conn.take() else {
            return Ok(());
        };
        let result = release_now(&mut conn, &self.key, &self.token).await;
        let failure = match result {
            Ok(_) => return Ok(()),
            // A key overwritten by another value took the locks with it: nothing left to free.
            Err(e) if e.code() == Some("WRONGTYPE") => return Ok(()),
            Err(e) if is_transient(&e) => {
                release_in_background(
                    conn,
                    self.key.clone(),
                    self.token.clone(),
                    Instant::now() + self.options.ttl,
                );
                e
            }
            Err(e) => e,
        };
        if matches!(before, Status::Lost(_)) {
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
                Instant::now() + self.options.ttl,
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
            .field("note", &self.options.note)
            .field("status", &*self.status.borrow())
            .finish()
    }
}

/// More locks for a lease ([`Lease::lock`]), with per-call options; `.await` it for the fence.
#[must_use = "a LockMore does nothing until it is awaited"]
pub struct LockMore<'a> {
    lease: &'a mut Lease,
    requests: Result<Vec<LockRequest>, Error>,
    options: Options,
}

impl LockMore<'_> {
    /// How long to wait for busy locks (on a connection of its own). Default: the lease's.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = wait;
        self
    }

    /// The note of these locks. Default: the lease's.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.options.note = Some(note.into());
        self
    }
}

impl<'a> IntoFuture for LockMore<'a> {
    type Output = Result<u64, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<u64, Error>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.lease.lock_more(self.requests, self.options))
    }
}
