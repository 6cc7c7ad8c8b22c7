//! The handle: one connection bound to one project key, and the cloud-drive operations.

use std::time::Duration;

use crate::acquire::Acquire;
use crate::connection::Connection;
use crate::error::Error;
use crate::request::{into_folder, LockRequest};

/// What every lease of a handle gets unless the call says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The lease's time to live; the watchdog renews it every `ttl / 3`. Default 30 s.
    pub ttl: Duration,
    /// How long an acquire waits (on the server, first come first served) for busy locks.
    /// Default 0: fail at once with [`Error::Busy`].
    pub wait: Duration,
    /// How many replicas must acknowledge a grant (`WAIT`) before the lease is returned.
    /// Default 0.
    pub replicas: u32,
    /// How long to wait for those acknowledgements. Default 1 s.
    pub replicas_timeout: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            ttl: Duration::from_millis(30_000),
            wait: Duration::ZERO,
            replicas: 0,
            replicas_timeout: Duration::from_millis(1000),
        }
    }
}

/// A connection bound to one project key, with the defaults of every lease it takes.
///
/// Cloning is cheap (the connection is a shared handle). Each operation returns an [`Acquire`],
/// whose per-call options override the handle's and which is awaited to get the [`Lease`]:
///
/// ```ignore
/// let lease = locks.move_into("/A/C", "/B").ttl(Duration::from_secs(60)).await?;
/// ```
///
/// [`Lease`]: crate::Lease
#[derive(Clone)]
pub struct PathLocks<C> {
    pub(crate) conn: C,
    pub(crate) key: String,
    pub(crate) options: Options,
}

impl<C: Connection> PathLocks<C> {
    /// Binds `conn` to the project key `key`, with the default options.
    pub fn new(conn: C, key: impl Into<String>) -> PathLocks<C> {
        PathLocks {
            conn,
            key: key.into(),
            options: Options::default(),
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

    /// Replaces every default at once.
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The connection, e.g. to inspect with `PATHLOCK.LOCKS`.
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// `WRITE path`.
    pub fn upload(&self, path: &str) -> Acquire<'_, C> {
        self.acquire(Ok(vec![LockRequest::write(path)]))
    }

    /// `WRITE path`.
    pub fn create(&self, path: &str) -> Acquire<'_, C> {
        self.acquire(Ok(vec![LockRequest::write(path)]))
    }

    /// `READ path`.
    pub fn read(&self, path: &str) -> Acquire<'_, C> {
        self.acquire(Ok(vec![LockRequest::read(path)]))
    }

    /// `WRITE path`, `WRITE new_path`.
    pub fn rename(&self, path: &str, new_path: &str) -> Acquire<'_, C> {
        self.acquire(Ok(vec![
            LockRequest::write(path),
            LockRequest::write(new_path),
        ]))
    }

    /// Moving `path` into the folder `into_folder`: `WRITE path`,
    /// `WRITE into_folder/<last segment of path>`. (The contract's `move`, a keyword in Rust.)
    pub fn move_into(&self, path: &str, into_folder: &str) -> Acquire<'_, C> {
        self.acquire(
            target(path, into_folder)
                .map(|to| vec![LockRequest::write(path), LockRequest::write(to)]),
        )
    }

    /// Copying `path` into the folder `into_folder`: `READ path`,
    /// `WRITE into_folder/<last segment of path>`.
    pub fn copy(&self, path: &str, into_folder: &str) -> Acquire<'_, C> {
        self.acquire(
            target(path, into_folder)
                .map(|to| vec![LockRequest::read(path), LockRequest::write(to)]),
        )
    }

    /// `WRITE path`.
    pub fn delete(&self, path: &str) -> Acquire<'_, C> {
        self.acquire(Ok(vec![LockRequest::write(path)]))
    }

    /// Emptying the recycle bin: `WRITE` on each path, all or nothing.
    pub fn purge<I>(&self, paths: I) -> Acquire<'_, C>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.acquire(Ok(paths.into_iter().map(LockRequest::write).collect()))
    }

    /// The given `(mode, path)` pairs, all or nothing.
    pub fn lock<I>(&self, requests: I) -> Acquire<'_, C>
    where
        I: IntoIterator,
        I::Item: Into<LockRequest>,
    {
        self.acquire(Ok(requests.into_iter().map(Into::into).collect()))
    }

    fn acquire(&self, requests: Result<Vec<LockRequest>, Error>) -> Acquire<'_, C> {
        Acquire::new(self, requests)
    }
}

fn target(path: &str, folder: &str) -> Result<String, Error> {
    into_folder(path, folder).ok_or_else(|| {
        Error::Invalid(format!(
            "{path:?} names the project root, which cannot be moved or copied"
        ))
    })
}
