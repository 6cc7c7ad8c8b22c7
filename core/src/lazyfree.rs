//! Freeing what the engine gives up away from the command that gives it up, as the server's
//! lazy free (`lazyfree.c`) frees a large value that `UNLINK` deleted.
//!
//! A tree that turns back into the compact form (a project of millions of locks down to a few,
//! see `table::form`) still holds the arenas its peak needed: a chunk of 2,048 slots per 2,048
//! nodes it ever held at once, and the like for its owners and folders' tables. Dropping them
//! where they stand is a pause the size of what the project once held, paid by whichever command
//! or expiry tick let the last lock but a few go: 9 ms at 1,000,000 locks and 65 ms at
//! 10,000,000 on the machine of docs/performance.md. The engine starts no threads and knows none
//! of the server's, so its embedder says where such storage goes ([`set_hook`]): the module hands
//! it to a thread of its own. Without a hook, and for storage of a few allocations, it is dropped
//! in place, which its size bounds.

use std::sync::OnceLock;

/// Storage of more allocations than this goes to the hook, as the server's `LAZYFREE_THRESHOLD`
/// (64) sends a value of more elements to its lazy-free thread.
pub const THRESHOLD: usize = 64;

/// Where large storage the engine gives up goes. It must drop what it is given, on whichever
/// thread: the storage is owned outright (shared chunks are behind atomic counts), and the
/// server's allocator, which the module routes every allocation to, is thread-safe.
pub type Hook = fn(Box<dyn Send>);

static HOOK: OnceLock<Hook> = OnceLock::new();

/// Sets where large storage goes, once for the process; false when a hook was already set.
pub fn set_hook(hook: Hook) -> bool {
    HOOK.set(hook).is_ok()
}

/// Gives up `value`, whose freeing takes `effort` allocations: to the hook past [`THRESHOLD`],
/// otherwise dropped here.
pub(crate) fn give_up<T: Send + 'static>(value: T, effort: usize) {
    match HOOK.get() {
        Some(hook) if effort > THRESHOLD => hook(Box::new(value)),
        _ => drop(value),
    }
}
