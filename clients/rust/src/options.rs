//! The settings of a lease: a handle's defaults, overridden per call, checked before anything is
//! sent.
//!
//! Level 3: builds on `error`.

use std::time::Duration;

use crate::error::Error;

/// What every lease of a handle gets unless the call says otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The lease's time to live, at least 1 ms (a fraction of a millisecond is rounded up); the
    /// watchdog renews it every `ttl / 3`. Default 30 s.
    pub ttl: Duration,
    /// How long an acquire waits (on the server, first come first served) for busy locks.
    /// Default 0: fail at once with [`Error::Busy`]. A fraction of a millisecond is rounded up.
    pub wait: Duration,
    /// How many replicas must acknowledge a grant (`WAIT`) before the lease is returned.
    /// Default 0.
    pub replicas: u32,
    /// How long to wait for those acknowledgements, at least 1 ms. Default 1 s.
    pub replicas_timeout: Duration,
    /// Shown with the locks to whoever they block (`NOTE`). Default `None`: each operation names
    /// itself, e.g. `"move /A/C -> /B"`; a handle's note replaces that, a call's replaces both;
    /// `Some("")` sends none.
    pub note: Option<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            ttl: Duration::from_millis(30_000),
            wait: Duration::ZERO,
            replicas: 0,
            replicas_timeout: Duration::from_millis(1000),
            note: None,
        }
    }
}

impl Options {
    /// `Err(Error::Invalid)` for a duration the server cannot take: a TTL, or a replicas'
    /// timeout, under one millisecond (the server refuses a TTL of 0, and reads a `WAIT` timeout
    /// of 0 as "for ever"). Any wait is fine: a fraction of a millisecond rounds up to one.
    pub(crate) fn check(&self) -> Result<(), Error> {
        let at_least_a_millisecond = [
            ("ttl", self.ttl, true),
            ("replicas_timeout", self.replicas_timeout, self.replicas > 0),
        ];
        for (name, duration, checked) in at_least_a_millisecond {
            if checked && duration < Duration::from_millis(1) {
                return Err(Error::Invalid(format!(
                    "{name} must be at least 1 millisecond (the commands count whole \
                     milliseconds, a fraction rounded up), not {duration:?}"
                )));
            }
        }
        Ok(())
    }
}

/// A duration as the whole milliseconds the commands take: a fraction of a millisecond rounds up,
/// as in every client, so that nothing is shorter than asked; saturating.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}
