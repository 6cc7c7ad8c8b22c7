//! Granting: one `PATHLOCK.ACQUIRE` under a token, retried as the same owner after a connection
//! error, with the blockers of a refusal and the replicas' acknowledgement. A new owner's first
//! grant and a lease's further locks (`Lease::lock`) both come through here.
//!
//! Level 4: builds on `connection`, `release`, `options`, `error`, `info` and `request`.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, RedisError, Value};
use tokio::time::Instant;

use crate::connection::{is_transient, Conn, Links};
use crate::error::{Error, LostReason};
use crate::info::{integer, Blocker};
use crate::options::{millis, Options};
use crate::release::{release_in_background, release_now, release_when_unqueued};
use crate::request::LockRequest;

/// A grant: its fence, and when the request that got it was sent (the lease's clock starts
/// there, which is never later than the server's).
pub(crate) struct Granted {
    pub(crate) fence: u64,
    pub(crate) sent: Instant,
}

/// Who asks for what. `fresh` is a new owner's first grant, whose token holds nothing else: on a
/// failure after which it may hold locks anyway, the token is released. A lease's further locks
/// (`fresh` false) are never released that way, since that would free the lease too.
pub(crate) struct Ask {
    pub(crate) links: Arc<Links>,
    pub(crate) key: String,
    pub(crate) token: String,
    pub(crate) requests: Vec<LockRequest>,
    pub(crate) options: Options,
    pub(crate) fresh: bool,
}

/// Sends the ACQUIRE (and the replicas' WAIT) until it is granted, refused, or out of retries.
///
/// A call that blocks on the server (`wait`, `replicas`) holds its connection up, so it runs on
/// one of its own and the renewals of other leases never queue behind it; WAIT counts the writes
/// of its own connection, so it follows the ACQUIRE there.
pub(crate) async fn grant(ask: Ask) -> Result<Granted, Error> {
    let shared = ask
        .links
        .shared()
        .await
        .map_err(|e| Error::about(&ask.key, e))?;
    let blocks = !ask.options.wait.is_zero() || ask.options.replicas > 0;
    let budget_end = Instant::now() + ask.options.wait;
    let mut attempt = Attempt {
        run: (!blocks).then(|| shared.clone()),
        shared,
        blocks,
        ask,
        unsure: false,
        may_hold: false,
        last_sent: Instant::now(),
    };
    let mut failures = 0;
    let (mut sent, fence) = loop {
        let mut conn = match attempt.run.take() {
            Some(conn) => conn,
            None => match attempt.ask.links.blocking().await {
                Ok(conn) => conn,
                Err(e) if is_transient(&e) => {
                    failures += 1;
                    if failures > 1 && Instant::now() >= budget_end {
                        return Err(e.into());
                    }
                    tokio::time::sleep(retry_pause(budget_end)).await;
                    continue;
                }
                Err(e) => return Err(Error::about(&attempt.ask.key, e)),
            },
        };
        let wait = budget_end.saturating_duration_since(Instant::now());
        let command = attempt.acquire_command(wait);
        let sent = Instant::now();
        attempt.last_sent = sent;
        attempt.may_hold = attempt.ask.fresh;
        let reply = conn.send(&command).await;
        match reply {
            Ok(Value::Nil) => {
                attempt.run = Some(conn);
                match attempt.recover_earlier_grant().await {
                    Some(fence) => break (sent, fence),
                    None => {
                        attempt.may_hold = attempt.unsure && attempt.ask.fresh;
                        let (blockers, check_error) = attempt.blockers().await?;
                        return Err(Error::Busy {
                            blockers,
                            check_error,
                            key: attempt.ask.key.clone(),
                            locks: attempt.ask.requests.clone(),
                        });
                    }
                }
            }
            Ok(reply) => {
                attempt.run = Some(conn);
                match parse_grant(&reply, &attempt.ask.token) {
                    Some(fence) => break (sent, fence),
                    None => return Err(Error::Protocol(format!("ACQUIRE answered {reply:?}"))),
                }
            }
            Err(e) if is_transient(&e) => {
                // A connection of its own is not used again after a failure: the next attempt
                // takes another. The shared one reconnects by itself.
                if !attempt.blocks {
                    attempt.run = Some(conn);
                }
                // The request may have been granted with its reply lost: from here on, giving up
                // must release the token.
                let first_failure = !attempt.unsure;
                attempt.unsure = true;
                if !first_failure && Instant::now() >= budget_end {
                    return Err(e.into());
                }
                // The first retry goes out at once (a reconnecting connection waits for its new
                // socket by itself); later ones back off within what is left of the budget.
                if !first_failure {
                    tokio::time::sleep(retry_pause(budget_end)).await;
                }
            }
            Err(e) => {
                // The server refused the request itself; only an earlier attempt may hold.
                attempt.run = Some(conn);
                attempt.may_hold = attempt.unsure && attempt.ask.fresh;
                return Err(Error::about(&attempt.ask.key, e));
            }
        }
    };
    if attempt.ask.options.replicas > 0 {
        attempt.await_replicas().await?;
    }
    if attempt.ask.fresh && sent.elapsed() > attempt.ask.options.ttl / 3 {
        // The grant waited on the server, and the client cannot tell when in that wait it was
        // made: a renewal proves the lease alive and dates its deadline.
        sent = Instant::now();
        if attempt.renew().await? == 0 {
            attempt.may_hold = false;
            return Err(Error::Lost {
                key: attempt.ask.key.clone(),
                token: attempt.ask.token.clone(),
                reason: LostReason::Gone,
            });
        }
    }
    attempt.may_hold = false;
    Ok(Granted { fence, sent })
}

/// How long to wait before the next attempt: 20 ms, or what is left of the wait.
fn retry_pause(budget_end: Instant) -> Duration {
    Duration::from_millis(20).min(budget_end.saturating_duration_since(Instant::now()))
}

/// What an acquire knows while it tries. Dropping it while the token may hold locks, on any
/// failure or because the caller dropped the acquire's future (a timeout, a `select!`),
/// releases the token in the background, so a grant nobody will use does not outlive its call.
/// A connection of its own that answered goes back to the handle for the next blocking call.
struct Attempt {
    ask: Ask,
    shared: Conn,
    /// Whether the calls run on a connection of their own rather than `shared`.
    blocks: bool,
    /// The connection the ACQUIRE (and WAIT) run on, while no request is pending on it.
    run: Option<Conn>,
    /// Whether an attempt failed without an answer, so that the server may have granted it.
    unsure: bool,
    /// Whether the token may hold locks that no lease owns.
    may_hold: bool,
    /// When the latest attempt was sent.
    last_sent: Instant,
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if let (true, Some(conn)) = (self.blocks, self.run.take()) {
            self.ask.links.give_back(conn);
        }
        if self.may_hold {
            // A grant is at the latest when the server's wait ends, and lives for the TTL.
            let expires_at = self.last_sent + self.ask.options.wait + self.ask.options.ttl;
            let (shared, key, token) = (
                self.shared.clone(),
                self.ask.key.clone(),
                self.ask.token.clone(),
            );
            if self.ask.options.wait.is_zero() {
                release_in_background(shared, key, token, expires_at);
            } else {
                // A request that waits may still be queued, and granted after a RELEASE sent
                // now: the RELEASE goes out once the server no longer lists it.
                release_when_unqueued(shared, key, token, expires_at);
            }
        }
    }
}

impl Attempt {
    fn acquire_command(&self, wait: Duration) -> Cmd {
        let ask = &self.ask;
        let mut cmd = redis::cmd("PATHLOCK.ACQUIRE");
        cmd.arg(&ask.key)
            .arg("TOKEN")
            .arg(&ask.token)
            .arg("TTL")
            .arg(millis(ask.options.ttl));
        let wait = millis(wait);
        if wait > 0 {
            cmd.arg("WAIT").arg(wait);
        }
        if let Some(note) = &ask.options.note {
            cmd.arg("NOTE").arg(note);
        }
        for request in &ask.requests {
            cmd.arg(request.mode.as_str()).arg(&request.path);
        }
        cmd
    }

    async fn renew(&mut self) -> Result<i64, Error> {
        let mut renew = redis::cmd("PATHLOCK.RENEW");
        renew
            .arg(&self.ask.key)
            .arg(&self.ask.token)
            .arg(millis(self.ask.options.ttl));
        let renewed = self
            .shared
            .send(&renew)
            .await
            .map_err(|e| Error::about(&self.ask.key, e))?;
        integer(&renewed).ok_or_else(|| Error::Protocol(format!("RENEW answered {renewed:?}")))
    }

    /// After an earlier attempt of a new owner went unanswered, a refusal of the retry does not
    /// prove that the token holds nothing: the earlier attempt may have been granted, and a
    /// request of another owner queued since (waiting for us) refuses our retry, since nobody
    /// may overtake a waiter. A fresh token holds locks only if that grant happened, so a
    /// `RENEW` that finds any tells; it also refreshes them as the retry would have. The fence
    /// is the one `LOCKS` reports for the token's lock on the first path.
    async fn recover_earlier_grant(&mut self) -> Option<u64> {
        if !self.unsure || !self.ask.fresh {
            return None;
        }
        if self.renew().await.ok()? <= 0 {
            return None;
        }
        let first = self.ask.requests.first()?;
        let mut list = redis::cmd("PATHLOCK.LOCKS");
        list.arg(&self.ask.key)
            .arg(&first.path)
            .arg("TOKEN")
            .arg(&self.ask.token);
        let listed = self.shared.send(&list).await.ok()?;
        Blocker::parse_all(&listed)?.first().map(|lock| lock.fence)
    }

    /// The live locks that refused this request, as `PATHLOCK.CHECK` reports them; when the
    /// server cannot be asked (an error `is_transient` accepts), none, with that error: an empty list alone
    /// would claim that nothing holds the paths. Any other error fails the acquire.
    async fn blockers(&mut self) -> Result<(Vec<Blocker>, Option<RedisError>), Error> {
        let mut check = redis::cmd("PATHLOCK.CHECK");
        check.arg(&self.ask.key).arg("TOKEN").arg(&self.ask.token);
        for request in &self.ask.requests {
            check.arg(request.mode.as_str()).arg(&request.path);
        }
        // Any failure of the check but a WRONGTYPE (the key was overwritten, which the caller must
        // hear as such) leaves the refusal standing with the blockers unknown, as in the other
        // clients: a connection error, a server briefly unable to serve, or a NOPERM for an ACL
        // user without `PATHLOCK.CHECK`, which would otherwise hide that the paths were busy.
        match self.shared.send(&check).await {
            Ok(reply) => Ok((Blocker::parse_all(&reply).unwrap_or_default(), None)),
            Err(e) if e.code() == Some("WRONGTYPE") => Err(Error::about(&self.ask.key, e)),
            Err(e) => Ok((Vec::new(), Some(e))),
        }
    }

    /// `WAIT replicas timeout` on the node that holds the key; with fewer acknowledgements a new
    /// owner's grant is released and the acquire fails.
    async fn await_replicas(&mut self) -> Result<(), Error> {
        let wanted = self.ask.options.replicas;
        let mut wait = redis::cmd("WAIT");
        wait.arg(wanted)
            .arg(millis(self.ask.options.replicas_timeout));
        let Some(mut conn) = self.run.take() else {
            return Err(Error::Protocol("no connection left for WAIT".into()));
        };
        let reply = conn.send_for_key(self.ask.key.as_bytes(), &wait).await;
        if !matches!(&reply, Err(e) if is_transient(e)) {
            self.run = Some(conn);
        }
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
        if self.ask.fresh
            && release_now(&mut self.shared, &self.ask.key, &self.ask.token)
                .await
                .is_ok()
        {
            self.may_hold = false;
        }
        Err(failure)
    }
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
