//! Acquiring: one `PATHLOCK.ACQUIRE` under a token the client makes, retried as the same owner
//! after a connection error, with the blockers of a refusal and the replicas' acknowledgement.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::time::Instant;
use uuid::Uuid;

use crate::connection::{is_transient, send, Connection};
use crate::error::{integer, Blocker, Error};
use crate::handle::{Options, PathLocks};
use crate::lease::Lease;
use crate::millis;
use crate::release::{release_in_background, release_now};
use crate::request::LockRequest;

/// One operation's request, with per-call options; `.await` it to get the [`Lease`].
///
/// The future it becomes owns what it needs (a clone of the connection), so it is `'static` and
/// can be spawned.
#[must_use = "an Acquire does nothing until it is awaited"]
pub struct Acquire<'a, C> {
    locks: &'a PathLocks<C>,
    requests: Result<Vec<LockRequest>, Error>,
    options: Options,
}

impl<'a, C: Connection> Acquire<'a, C> {
    pub(crate) fn new(
        locks: &'a PathLocks<C>,
        requests: Result<Vec<LockRequest>, Error>,
    ) -> Acquire<'a, C> {
        Acquire {
            locks,
            requests,
            options: locks.options,
        }
    }

    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.options.ttl = ttl;
        self
    }

    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = wait;
        self
    }

    pub fn replicas(mut self, replicas: u32) -> Self {
        self.options.replicas = replicas;
        self
    }

    pub fn replicas_timeout(mut self, timeout: Duration) -> Self {
        self.options.replicas_timeout = timeout;
        self
    }

    /// The locks this call asks for (an error when the operation itself is invalid).
    pub fn requests(&self) -> Result<&[LockRequest], &Error> {
        self.requests.as_deref()
    }
}

impl<C: Connection> IntoFuture for Acquire<'_, C> {
    type Output = Result<Lease, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Lease, Error>> + Send + 'static>>;

    fn into_future(self) -> Self::IntoFuture {
        let conn = self.locks.conn.clone();
        let key = self.locks.key.clone();
        Box::pin(acquire(conn, key, self.requests, self.options))
    }
}

async fn acquire<C: Connection>(
    conn: C,
    key: String,
    requests: Result<Vec<LockRequest>, Error>,
    options: Options,
) -> Result<Lease, Error> {
    let requests = requests?;
    if requests.is_empty() {
        return Err(Error::Invalid("no locks requested".into()));
    }
    let budget_end = Instant::now() + options.wait;
    let mut attempt = Attempt {
        conn,
        key,
        // A token of our own, sent with every attempt, makes a retry the same owner:
        // re-acquiring what a token holds is idempotent on the server.
        token: Uuid::new_v4().to_string(),
        requests,
        options,
        unsure: false,
        may_hold: false,
        last_sent: Instant::now(),
    };
    let (sent, fence) = loop {
        let wait = budget_end.saturating_duration_since(Instant::now());
        let command = acquire_command(&attempt, wait);
        let sent = Instant::now();
        attempt.last_sent = sent;
        attempt.may_hold = true;
        match send(&mut attempt.conn, &command).await {
            Ok(Value::Nil) => match attempt.recover_earlier_grant().await {
                Some(fence) => break (sent, fence),
                None => {
                    attempt.may_hold = attempt.unsure;
                    return Err(Error::Busy {
                        blockers: attempt.blockers().await,
                    });
                }
            },
            Ok(reply) => match parse_grant(&reply, &attempt.token) {
                Some(fence) => break (sent, fence),
                None => return Err(Error::Protocol(format!("ACQUIRE answered {reply:?}"))),
            },
            Err(e) if is_transient(&e) => {
                // The request may have been granted with its reply lost: from here on, giving up
                // must release the token.
                let first_failure = !attempt.unsure;
                attempt.unsure = true;
                let now = Instant::now();
                if !first_failure && now >= budget_end {
                    return Err(e.into());
                }
                // The first retry goes out at once (a reconnecting connection waits for its new
                // socket by itself); later ones back off within what is left of the budget.
                if !first_failure {
                    let pause = Duration::from_millis(20).min(budget_end - now);
                    tokio::time::sleep(pause).await;
                }
            }
            Err(e) => {
                // The server refused the request itself; only an earlier attempt may hold.
                attempt.may_hold = attempt.unsure;
                return Err(e.into());
            }
        }
    };
    if attempt.options.replicas > 0 {
        attempt.await_replicas().await?;
    }
    let lease = Lease::start(
        attempt.conn.clone(),
        attempt.key.clone(),
        attempt.token.clone(),
        fence,
        attempt.requests.clone(),
        attempt.options.ttl,
        sent,
    );
    attempt.may_hold = false;
    Ok(lease)
}

/// What an acquire knows while it tries. Dropping it while the token may hold locks, on any
/// failure or because the caller dropped the acquire's future (a timeout, a `select!`),
/// releases the token in the background, so a grant nobody will use does not outlive its call.
struct Attempt<C: Connection> {
    conn: C,
    key: String,
    token: String,
    requests: Vec<LockRequest>,
    options: Options,
    /// Whether an attempt failed without an answer, so that the server may have granted it.
    unsure: bool,
    /// Whether the token may hold locks that no lease owns.
    may_hold: bool,
    /// When the latest attempt was sent.
    last_sent: Instant,
}

impl<C: Connection> Drop for Attempt<C> {
    fn drop(&mut self) {
        if self.may_hold {
            // A grant is at the latest when the server's wait ends, and lives for the TTL.
            release_in_background(
                self.conn.clone(),
                self.key.clone(),
                self.token.clone(),
                self.last_sent + self.options.wait + self.options.ttl,
            );
        }
    }
}

impl<C: Connection> Attempt<C> {
    /// After an earlier attempt went unanswered, a refusal of the retry does not prove that the
    /// token holds nothing: the earlier attempt may have been granted, and a request of another
    /// owner queued since (waiting for us) refuses our retry, since nobody may overtake a waiter.
    /// A fresh token holds locks only if that grant happened, so a `RENEW` that finds any tells;
    /// it also refreshes them as the retry would have. The fence is the one `LOCKS` reports for
    /// the token's lock on the first path.
    async fn recover_earlier_grant(&mut self) -> Option<u64> {
        if !self.unsure {
            return None;
        }
        let mut renew = redis::cmd("PATHLOCK.RENEW");
        renew
            .arg(&self.key)
            .arg(&self.token)
            .arg(millis(self.options.ttl));
        let renewed = send(&mut self.conn, &renew).await.ok()?;
        if integer(&renewed)? <= 0 {
            return None;
        }
        let first = self.requests.first()?;
        let mut list = redis::cmd("PATHLOCK.LOCKS");
        list.arg(&self.key).arg(&first.path);
        let listed = send(&mut self.conn, &list).await.ok()?;
        Blocker::parse_all(&listed)?
            .into_iter()
            .find(|lock| lock.token == self.token)
            .map(|lock| lock.fence)
    }

    /// The live locks that refused this request, as `PATHLOCK.CHECK` reports them.
    async fn blockers(&mut self) -> Vec<Blocker> {
        let mut check = redis::cmd("PATHLOCK.CHECK");
        check.arg(&self.key).arg("TOKEN").arg(&self.token);
        for request in &self.requests {
            check.arg(request.mode.as_str()).arg(&request.path);
        }
        match send(&mut self.conn, &check).await {
            Ok(reply) => Blocker::parse_all(&reply).unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// `WAIT replicas timeout` on the node that holds the key; with fewer acknowledgements the
    /// grant is released and the acquire fails.
    async fn await_replicas(&mut self) -> Result<(), Error> {
        let wanted = self.options.replicas;
        let mut wait = redis::cmd("WAIT");
        // WAIT with a timeout of 0 blocks for ever; the smallest real timeout is 1 ms.
        wait.arg(wanted)
            .arg(millis(self.options.replicas_timeout).max(1));
        let reply = self
            .conn
            .send_for_key(self.key.as_bytes(), &wait)
            .await
            .and_then(Value::extract_error);
        let failure = match reply {
            Ok(Value::Int(acked)) if acked >= i64::from(wanted) => return Ok(()),
            Ok(Value::Int(acked)) => Error::NotReplicated {
                acked: u32::try_from(acked).unwrap_or(0),
                wanted,
            },
            Ok(other) => Error::Protocol(format!("WAIT answered {other:?}")),
            Err(e) => Error::Redis(e),
        };
        // Released now, or else by the drop of this attempt, in the background.
        if release_now(&mut self.conn, &self.key, &self.token)
            .await
            .is_ok()
        {
            self.may_hold = false;
        }
        Err(failure)
    }
}

fn acquire_command<C: Connection>(attempt: &Attempt<C>, wait: Duration) -> Cmd {
    let mut cmd = redis::cmd("PATHLOCK.ACQUIRE");
    cmd.arg(&attempt.key)
        .arg("TOKEN")
        .arg(&attempt.token)
        .arg("TTL")
        .arg(millis(attempt.options.ttl));
    let wait = millis(wait);
    if wait > 0 {
        cmd.arg("WAIT").arg(wait);
    }
    for request in &attempt.requests {
        cmd.arg(request.mode.as_str()).arg(&request.path);
    }
    cmd
}

/// The fence of a grant reply `[token, fence]`, which must carry our token.
fn parse_grant(reply: &Value, token: &str) -> Option<u64> {
    let Value::Array(fields) = reply else {
        return None;
    };
    let [Value::BulkString(granted), Value::Int(fence)] = fields.as_slice() else {
        return None;
    };
    if granted.as_slice() != token.as_bytes() {
        return None;
    }
    u64::try_from(*fence).ok()
}
