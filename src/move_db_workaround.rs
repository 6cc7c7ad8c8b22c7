//! Keeps a client in its own database across `MOVE` and `COPY ... DB` on Valkey 8.1.
//!
//! From 8.1.0 until valkey-io/valkey#4024 (in 9.1; 8.1.8 still has it), Valkey runs a module's
//! keyspace-event subscribers on the client that executes the command and selects the event's
//! database on that client without selecting the previous one back. pathlock subscribes to generic
//! events (see `events`), so on those releases a client that ran `MOVE key 1` from database 0 found
//! its next commands running in database 1. The module's subscriber (`events`) calls this last,
//! after its own work on the event, and it selects the source database back on the `move_to` or
//! `copy_to` event. The source is known from `move_from`, which fires first in the source database,
//! and, for `COPY`, from the type's `copy2` callback, so a `COPY ... DB` of a key of another type
//! stays affected on those releases (`docs/operations.md` lists it). Elsewhere the subscriber's
//! client is a temporary one, or the server restores it, and this is a no-op.
//!
//! Level 1: imports `context`. Called by `events` (keyspace events) and `keytype` (`copy2`).

use std::sync::atomic::{AtomicI32, Ordering};

use redis_module::Context;

use crate::context::{select_db, selected_db};

/// The database the current `MOVE` or `COPY` reads from; -1 when none is known. Keyspace events
/// and the `copy2` callback both run on the main thread; the atomic only makes it a safe static.
static SOURCE_DB: AtomicI32 = AtomicI32::new(-1);

/// Called by the type's `copy2` callback with the database `COPY` reads from.
pub fn copying_from(db: i32) {
    SOURCE_DB.store(db, Ordering::Relaxed);
}

/// Every keyspace event, after the module's own work on it (`events`): selects the client's
/// database back after `MOVE` or `COPY ... DB` on Valkey 8.1.
pub fn on_keyspace_event(ctx: &Context, event: &str) {
    match event {
        "move_from" => SOURCE_DB.store(selected_db(ctx), Ordering::Relaxed),
        "move_to" | "copy_to" => {
            let source = SOURCE_DB.swap(-1, Ordering::Relaxed);
            if source >= 0 && source != selected_db(ctx) {
                select_db(ctx, source);
            }
        }
        _ => {}
    }
}
