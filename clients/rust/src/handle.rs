//! The handle: one project key on a client's connections, the cloud-drive operations, and
//! inspection.
//!
//! Level 6: builds on `lease`, `acquire`, `connection`, `options`, `info`, `error` and `request`.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};
use uuid::Uuid;

use crate::acquire::{grant, Ask};
use crate::connection::{Conn, Connect, Connection, Links};
use crate::error::Error;
use crate::info::{Blocker, Waiter};
use crate::lease::Lease;
use crate::options::Options;
use crate::request::{checked, default_note, described, into_folder, named, sibling, LockRequest};

/// The builder methods of a lease's settings ([`Options`]), the same on the handle (its
/// defaults) and on an [`Acquire`] (one call's): written once here.
macro_rules! settings {
    ($whose:literal) => {
        #[doc = concat!("The TTL of ", $whose, ": at least 1 ms, a fraction of a millisecond rounded up.")]
        pub fn ttl(mut self, ttl: Duration) -> Self {
            self.options.ttl = ttl;
            self
        }

        #[doc = concat!("How long ", $whose, " waits on the server for busy locks (0: not at all).")]
        pub fn wait(mut self, wait: Duration) -> Self {
            self.options.wait = wait;
            self
        }

        #[doc = concat!("How many replicas must acknowledge the grant of ", $whose, ".")]
        pub fn replicas(mut self, replicas: u32) -> Self {
            self.options.replicas = replicas;
            self
        }

        #[doc = concat!("How long ", $whose, " waits for its replicas, at least 1 ms.")]
        pub fn replicas_timeout(mut self, timeout: Duration) -> Self {
            self.options.replicas_timeout = timeout;
            self
        }

        #[doc = concat!("The note of ", $whose, ", instead of the operation's own (`\"move /A/C -> /B\"`).")]
        pub fn note(mut self, note: impl Into<String>) -> Self {
            self.options.note = Some(note.into());
            self
        }
    };
}

/// A redis-rs client bound to one project key, with the defaults of every lease it takes.
///
/// Every lease of the handle (and of its clones, which are cheap) renews on one shared
/// connection; an acquire that blocks on the server (`wait`, `replicas`) runs on a connection of
/// its own, so that no renewal ever queues behind it. Each operation returns an [`Acquire`],
/// whose per-call options override the handle's and which is awaited to get the [`Lease`]:
///
/// ```ignore
/// let lease = locks.move_into("/A/C", "/B").ttl(Duration::from_secs(60)).await?;
/// ```
///
/// The helpers refuse an empty path and the project root: the whole project is locked with
/// `lock([(Mode::Write, "/")])`, in so many words.
#[derive(Clone)]
pub struct PathLocks {
    links: Arc<Links>,
    key: String,
    options: Options,
}

impl PathLocks {
    /// Binds the project key `key` to connections that `client` opens (a `redis::Client`, or a
    /// `redis::cluster::ClusterClient`): the shared one on first use, and one for each blocking
    /// call. Default options.
    pub fn new(client: impl Connect, key: impl Into<String>) -> PathLocks {
        PathLocks {
            links: Links::new(client, None),
            key: key.into(),
            options: Options::default(),
        }
    }

    /// The same, with a connection of your own for the leases to share (a `ConnectionManager`
    /// configured as you like, say); `client` still opens a connection for each blocking call.
    pub fn with_connection(
        client: impl Connect,
        conn: impl Connection,
        key: impl Into<String>,
    ) -> PathLocks {
        PathLocks {
            links: Links::new(client, Some(Conn::new(conn))),
            key: key.into(),
            options: Options::default(),
        }
    }

    settings!("every lease of the handle");

    /// Replaces every default at once.
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// `WRITE path`.
    pub fn upload(&self, path: &str) -> Acquire {
        let locks = named(path, "path").map(|path| vec![LockRequest::write(path)]);
        self.operation(locks, format!("upload {path}"))
    }

    /// `WRITE path`.
    pub fn create(&self, path: &str) -> Acquire {
        let locks = named(path, "path").map(|path| vec![LockRequest::write(path)]);
        self.operation(locks, format!("create {path}"))
    }

    /// `READ path`.
    pub fn read(&self, path: &str) -> Acquire {
        let locks = named(path, "path").map(|path| vec![LockRequest::read(path)]);
        self.operation(locks, format!("read {path}"))
    }

    /// `WRITE path`, `WRITE <its folder>/new_name`: a new name in the same folder
    /// ([`PathLocks::move_into`] changes folders). A `new_name` with a `/`, empty, `.`, `..` or
    /// the current name is refused with [`Error::Invalid`].
    pub fn rename(&self, path: &str, new_name: &str) -> Acquire {
        let target = sibling(path, new_name);
        let name = format!("rename {path} -> {}", target.as_deref().unwrap_or(new_name));
        let locks = target.map(|to| vec![LockRequest::write(path), LockRequest::write(to)]);
        self.operation(locks, name)
    }

    /// Moving `path` into the folder `into_folder`: `WRITE path`,
    /// `WRITE into_folder/<last segment of path>`. (The contract's `move`, a keyword in Rust.)
    /// Refused when `into_folder` is `path`, inside it, or the folder `path` is already in.
    pub fn move_into(&self, path: &str, into: &str) -> Acquire {
        let locks = into_folder(path, into, "move")
            .map(|to| vec![LockRequest::write(path), LockRequest::write(to)]);
        self.operation(locks, format!("move {path} -> {into}"))
    }

    /// Copying `path` into the folder `into_folder`: `READ path`,
    /// `WRITE into_folder/<last segment of path>`, refused as [`PathLocks::move_into`] is.
    pub fn copy(&self, path: &str, into: &str) -> Acquire {
        let locks = into_folder(path, into, "copy")
            .map(|to| vec![LockRequest::read(path), LockRequest::write(to)]);
        self.operation(locks, format!("copy {path} -> {into}"))
    }

    /// `WRITE path`.
    pub fn delete(&self, path: &str) -> Acquire {
        let locks = named(path, "path").map(|path| vec![LockRequest::write(path)]);
        self.operation(locks, format!("delete {path}"))
    }

    /// Emptying the recycle bin: `WRITE` on each path, all or nothing.
    pub fn purge<I>(&self, paths: I) -> Acquire
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let paths: Vec<String> = paths.into_iter().map(Into::into).collect();
        let locks = paths
            .iter()
            .map(|path| named(path, "path").map(LockRequest::write))
            .collect::<Result<Vec<_>, _>>()
            .and_then(checked);
        self.operation(locks, format!("purge {}", paths.join(" ")))
    }

    /// The given `(mode, path)` pairs, all or nothing; `"/"` is the whole project.
    pub fn lock<I>(&self, requests: I) -> Acquire
    where
        I: IntoIterator,
        I::Item: Into<LockRequest>,
    {
        let locks = checked(requests.into_iter().map(Into::into).collect());
        let name = locks.as_deref().map(described).unwrap_or_default();
        self.operation(locks, name)
    }

    /// The live locks that would block `requests` now (`PATHLOCK.CHECK`): empty when they would
    /// be granted, waiters aside. With `token`, that owner's own locks do not count.
    pub async fn check<I>(&self, requests: I, token: Option<&str>) -> Result<Vec<Blocker>, Error>
    where
        I: IntoIterator,
        I::Item: Into<LockRequest>,
    {
        let requests =
            checked(requests.into_iter().map(Into::into).collect()).map_err(Error::Invalid)?;
        let mut cmd = redis::cmd("PATHLOCK.CHECK");
        cmd.arg(&self.key);
        if let Some(token) = token {
            cmd.arg("TOKEN").arg(token);
        }
        for request in &requests {
            cmd.arg(request.mode.as_str()).arg(&request.path);
        }
        let reply = self.query(&cmd).await?;
        Blocker::parse_all(&reply)
            .ok_or_else(|| Error::Protocol(format!("CHECK answered {reply:?}")))
    }

    /// The live locks at or under `path` (the whole project by default), only `token`'s when it
    /// is given (`PATHLOCK.LOCKS`).
    pub async fn locks(
        &self,
        path: Option<&str>,
        token: Option<&str>,
    ) -> Result<Vec<Blocker>, Error> {
        let mut cmd = redis::cmd("PATHLOCK.LOCKS");
        cmd.arg(&self.key);
        if let Some(path) = path {
            cmd.arg(path);
        }
        if let Some(token) = token {
            cmd.arg("TOKEN").arg(token);
        }
        let reply = self.query(&cmd).await?;
        Blocker::parse_all(&reply)
            .ok_or_else(|| Error::Protocol(format!("LOCKS answered {reply:?}")))
    }

    /// The waiting acquires for paths at or under `path`, in queue order (`PATHLOCK.WAITERS`).
    pub async fn waiters(&self, path: Option<&str>) -> Result<Vec<Waiter>, Error> {
        let mut cmd = redis::cmd("PATHLOCK.WAITERS");
        cmd.arg(&self.key);
        if let Some(path) = path {
            cmd.arg(path);
        }
        let reply = self.query(&cmd).await?;
        Waiter::parse_all(&reply)
            .ok_or_else(|| Error::Protocol(format!("WAITERS answered {reply:?}")))
    }

    async fn query(&self, cmd: &Cmd) -> Result<Value, Error> {
        let about = |e| Error::about(&self.key, e);
        let mut conn = self.links.shared().await.map_err(about)?;
        conn.send(cmd).await.map_err(about)
    }

    fn operation(&self, locks: Result<Vec<LockRequest>, String>, name: String) -> Acquire {
        let mut options = self.options.clone();
        if options.note.is_none() {
            options.note = Some(default_note(name));
        }
        Acquire {
            links: self.links.clone(),
            key: self.key.clone(),
            requests: locks.map_err(Error::Invalid),
            options,
        }
    }
}

/// One operation's request, with per-call options; `.await` it to get the [`Lease`].
///
/// The future it becomes owns what it needs, so it is `'static` and can be spawned.
#[must_use = "an Acquire does nothing until it is awaited"]
pub struct Acquire {
    links: Arc<Links>,
    key: String,
    requests: Result<Vec<LockRequest>, Error>,
    options: Options,
}

impl Acquire {
    settings!("this call's lease");

    /// The locks this call asks for (an error when the operation itself is invalid).
    pub fn requests(&self) -> Result<&[LockRequest], &Error> {
        self.requests.as_deref()
    }
}

impl IntoFuture for Acquire {
    type Output = Result<Lease, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Lease, Error>> + Send + 'static>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let requests = self.requests?;
            self.options.check()?;
            // A token of our own, sent with every attempt, makes a retry the same owner:
            // re-acquiring what a token holds is idempotent on the server.
            let token = Uuid::new_v4().to_string();
            let granted = grant(Ask {
                links: self.links.clone(),
                key: self.key.clone(),
                token: token.clone(),
                requests: requests.clone(),
                options: self.options.clone(),
                fresh: true,
            })
            .await?;
            // Opened by the grant, which needed it first.
            let conn = self.links.shared().await?;
            Ok(Lease::start(
                self.links,
                conn,
                self.key,
                token,
                granted.fence,
                requests,
                self.options,
                granted.sent,
            ))
        })
    }
}
