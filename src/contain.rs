//! Where a panic stops. Every function Redis calls into (command handlers, type callbacks,
//! timers, blocked-client callbacks, server and keyspace events, INFO) runs its body through
//! [`contained`], because a panic unwinding out of an `extern "C"` function aborts the whole
//! server. What a contained panic costs is said at each call: a command answers an error, a
//! load refuses the value, a callback skips its work; and the log says where it happened.
//!
//! Level 0: imports nothing of the crate. Everything that Redis calls may import it.

use std::panic::{catch_unwind, AssertUnwindSafe};

#[cfg(not(test))]
use redis_module::logging;

/// Runs `body`; a panic inside it becomes `fallback` and one warning in the server's log naming
/// `place`. The message is fixed text, never client bytes: Redis's log takes it as a format.
pub fn contained<R>(place: &'static str, fallback: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(_) => {
            warn(format!(
                "pathlock: internal error contained in {place}; see the panic message on stderr"
            ));
            fallback
        }
    }
}

/// Writes a warning to the server's log.
#[cfg(not(test))]
fn warn(message: String) {
    logging::log_warning(message);
}

// The unit tests run without a server, whose log redis-module would need: there the warnings
// are kept for the test to read.
#[cfg(test)]
thread_local! {
    static WARNINGS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(test)]
fn warn(message: String) {
    WARNINGS.with(|warnings| warnings.borrow_mut().push(message));
}

/// The warnings this test's thread logged, taken.
#[cfg(test)]
pub fn take_warnings() -> Vec<String> {
    WARNINGS.with(|warnings| std::mem::take(&mut *warnings.borrow_mut()))
}
