//! Whether anything would receive a replicated effect: the AOF, a replica, or the replication
//! backlog that a replica resumes from.
//!
//! Redis itself drops what it would propagate when nothing listens (`shouldPropagate` in its
//! `server.c`: no AOF, and neither a replica nor a backlog), so a `SET` on a lone server never
//! pays for replication. `RM_Replicate` does not look: it builds an argument vector and looks the
//! command up by name before Redis throws the result away, which was a third of an `ACQUIRE`.
//! Pathlock asks the same question first and skips building the effect.
//!
//! Replicas are the part a module cannot read cheaply, so it errs on the side of sending: once a
//! replica may have heard this server it is "heard" for good (until a restart). That happens when
//! a replica asks for the stream (`SYNC`/`PSYNC`, seen by the command filter before the command
//! runs, so even an effect made later in the same event-loop iteration goes out), when the role
//! changes either way, when a replica connects or leaves, when an atomic slot migration starts
//! exporting slots (the server streams what it propagates for them to the target, a listener no
//! replica count shows; `events`), and when `INFO replication` shows a replica, a backlog or a
//! master. The first decision after the module loads asks `INFO`, which
//! also covers a module loaded at run time beside replicas and a master that restored its backlog
//! from its RDB at start-up. The AOF is read from the context's flags on every call, because it
//! can be switched on and off at run time.
//!
//! Level 1: imports `context`. Used by `effects` (the check), `events` (the filter, the role
//! change and slot migrations) and `lib.rs`.

use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{raw, Context, ContextFlags};

use crate::context;

/// Whether a replica may have heard this server since the module loaded. Only ever set.
static HEARD: AtomicBool = AtomicBool::new(false);
/// Whether `INFO replication` was read once, after loading.
static ASKED: AtomicBool = AtomicBool::new(false);

/// Whether an effect made now would reach the AOF, a replica or the backlog.
pub fn listened(ctx: &Context) -> bool {
    if HEARD.load(Ordering::Relaxed) {
        return true;
    }
    if !ASKED.swap(true, Ordering::Relaxed) && replication_in_info(ctx) {
        heard();
        return true;
    }
    context::flags(ctx).contains(ContextFlags::AOF)
}

/// From now on every effect is sent.
pub fn heard() {
    HEARD.store(true, Ordering::Relaxed);
}

/// Whether a command's name is one a replica sends to ask for the stream.
pub fn asks_for_stream(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"PSYNC") || name.eq_ignore_ascii_case(b"SYNC")
}

/// Reads `INFO replication`: a replica connected, a backlog kept for one, or a master of this
/// server. A field that cannot be read counts as heard.
fn replication_in_info(ctx: &Context) -> bool {
    let info = ctx.server_info("replication");
    let number = |field: &str| {
        info.field(field)
            .and_then(|value| value.parse_integer().ok())
    };
    let role = info.field("role").map(|role| role.to_string_lossy());
    role.as_deref() != Some("master")
        || number("connected_slaves").is_none_or(|replicas| replicas > 0)
        || number("repl_backlog_active").is_none_or(|active| active != 0)
}

/// Subscribes to replicas coming and going, so that a replica connected by any path counts.
pub fn subscribe(ctx: &Context) {
    // SAFETY: subscribing with a callback that lives as long as the module.
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            subscribe(
                ctx.ctx,
                raw::RedisModuleEvent {
                    id: raw::REDISMODULE_EVENT_REPLICA_CHANGE,
                    dataver: 1,
                },
                Some(on_replica_change),
            );
        }
    }
}

/// A replica connected or went away: the server counts as heard, so effects are built.
extern "C" fn on_replica_change(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    heard();
}
