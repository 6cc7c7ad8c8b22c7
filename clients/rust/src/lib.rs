//! A client for the pathlock Redis module on redis-rs (async, tokio).
//!
//! A [`PathLocks`] handle binds a redis-rs client (`redis::Client`, or a `ClusterClient` for a
//! cluster) to one project key. Each cloud-drive operation (`upload`, `read`, `move_into`,
//! `copy`, ...) asks for exactly its locks in one `PATHLOCK.ACQUIRE` and returns a [`Lease`]. While
//! the lease is held, a tokio task renews it every `ttl / 3`; when it is lost, [`Lease::is_lost`]
//! turns true and [`Lease::lost`] resolves with the reason. [`Lease::lock`] takes more locks
//! under the lease's own token. The lease is a guard: [`Lease::release`] frees it, and dropping
//! it frees it too (on the runtime, in the background). [`PathLocks::locks`],
//! [`PathLocks::check`] and [`PathLocks::waiters`] show who holds and who waits, with their notes.
//!
//! The README next to this file shows the API with examples.
//!
//! The modules build on one another in levels without a circle (each file's header says its
//! level; `make lint` checks): `request` and `connection` at the bottom, then `info`, `release`,
//! `error`, `options`, `watchdog` and `acquire`, `lease`, and `handle` on top.

mod acquire;
mod connection;
mod error;
mod handle;
mod info;
mod lease;
mod options;
mod release;
mod request;
mod watchdog;

pub use connection::{Connect, Connection};
pub use error::{Error, LostReason};
pub use handle::{Acquire, PathLocks};
pub use info::{Blocker, Waiter};
pub use lease::{Lease, LockMore};
pub use options::Options;
pub use request::{LockRequest, Mode};

#[cfg(test)]
mod tests {
    fn send_and_sync<T: Send + Sync>() {}

    /// Leases and handles move between tasks and threads.
    #[test]
    fn leases_and_handles_are_send_and_sync() {
        send_and_sync::<crate::Lease>();
        send_and_sync::<crate::Error>();
        send_and_sync::<crate::PathLocks>();
        send_and_sync::<crate::Acquire>();
    }
}
