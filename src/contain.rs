//! Where a panic stops. Every function Redis calls into (command handlers, type callbacks,
//! timers, blocked-client callbacks, server and keyspace events, INFO) runs its body through
//! [`contained`], because a panic unwinding out of an `extern "C"` function aborts the whole
//! server. What a contained panic costs is said at each call: a command answers an error, a
//! load refuses the value, a callback skips its work; and the log says where it happened.
//!
//! Level 0: imports nothing of the crate. Everything that Redis calls may import it.

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::logging;

/// Runs `body`; a panic inside it becomes `fallback` and one warning in the server's log naming
/// `place`. The message is fixed text, never client bytes: Redis's log takes it as a format.
pub fn contained<R>(place: &'static str, fallback: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(_) => {
            logging::log_warning(format!(
                "pathlock: internal error contained in {place}; see the panic message on stderr"
            ));
            fallback
        }
    }
}
