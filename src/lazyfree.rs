//! The module's lazy free: a thread of its own that frees large storage the engine gives up
//! (`pathlock_core::lazyfree`) and the expiry schedule's tables of a flushed database, as the
//! server's lazy-free thread frees a large value that `UNLINK` deleted.
//!
//! A project of millions of locks that shrinks to a few turns back into the compact form, and
//! its tree still holds the arenas of its peak; freed on the main thread they were a pause the
//! size of that peak (65 ms at 10,000,000 locks) in whichever command or expiry tick let the
//! last lock but a few go. Here the main thread only sends them: one allocation of a channel's
//! slot. The server's allocator, to which the module routes every allocation, is thread-safe (its
//! own lazy free frees from a thread), and nothing else refers to storage sent here.
//!
//! `INFO pathlock` shows `lazyfree_pending_objects` and `lazyfreed_objects`, the server's own
//! names for the same figures of its lazy free.
//!
//! Level 1: imports `contain`, `stats`.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;

use crate::contain::contained;
use crate::stats::{LAZYFREED, LAZYFREE_PENDING};

type Garbage = Box<dyn Send>;

/// The way to the thread, made at the first call.
static QUEUE: Mutex<Option<Sender<Garbage>>> = Mutex::new(None);

/// Makes the engine send large storage it gives up here.
pub fn start() {
    pathlock_core::lazyfree::set_hook(free);
}

/// Frees `value` in the module's lazy-free thread, started at the first call; here, when the
/// thread cannot be started.
pub fn free(value: Garbage) {
    LAZYFREE_PENDING.fetch_add(1, Ordering::Relaxed);
    let left = {
        let mut queue = QUEUE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if queue.is_none() {
            *queue = spawn();
        }
        match queue.as_ref() {
            Some(sender) => sender.send(value).err().map(|unsent| unsent.0),
            None => Some(value),
        }
    };
    if let Some(value) = left {
        drop_counted(value);
    }
}

fn spawn() -> Option<Sender<Garbage>> {
    let (sender, receiver) = channel::<Garbage>();
    std::thread::Builder::new()
        .name("pathlock-lazyfree".into())
        .spawn(move || {
            for value in receiver {
                drop_counted(value);
            }
        })
        .ok()
        .map(|_| sender)
}

fn drop_counted(value: Garbage) {
    contained("the lazy-free thread", (), || drop(value));
    LAZYFREE_PENDING.fetch_sub(1, Ordering::Relaxed);
    LAZYFREED.fetch_add(1, Ordering::Relaxed);
}
