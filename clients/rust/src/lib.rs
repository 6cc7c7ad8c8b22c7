//! A client for the pathlock Redis module on redis-rs (async, tokio).
//!
//! A [`PathLocks`] handle binds a redis-rs connection (standalone or cluster) to one project key.
//! Each cloud-drive operation (`upload`, `read`, `move_into`, `copy`, ...) asks for exactly its
//! locks in one `PATHLOCK.ACQUIRE` and returns a [`Lease`]. While the lease is held, a tokio task
//! renews it every `ttl / 3`; when it is lost, [`Lease::is_lost`] turns true and [`Lease::lost`]
//! resolves. The lease is a guard: [`Lease::release`] frees it, and dropping it frees it too (on
//! the runtime, in the background).
//!
//! The contract this crate keeps is the project's CLIENTS.md; the README next to this file shows
//! the API with examples.

mod acquire;
mod connection;
mod error;
mod handle;
mod lease;
mod release;
mod request;
mod watchdog;

pub use acquire::Acquire;
pub use connection::Connection;
pub use error::{Blocker, Error};
pub use handle::{Options, PathLocks};
pub use lease::Lease;
pub use request::{LockRequest, Mode};

/// A duration as the whole milliseconds the commands take, saturating.
pub(crate) fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    fn send_and_sync<T: Send + Sync>() {}

    /// Leases and handles move between tasks and threads.
    #[test]
    fn leases_and_handles_are_send_and_sync() {
        send_and_sync::<crate::Lease>();
        send_and_sync::<crate::Error>();
        send_and_sync::<crate::PathLocks<redis::aio::ConnectionManager>>();
        send_and_sync::<crate::PathLocks<redis::cluster_async::ClusterConnection>>();
    }
}
