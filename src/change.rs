//! The one function every change to a project goes through, whoever makes it (a command, a
//! waiter's timeout, the expiry cycle, the signal worker).
//!
//! Level 4: imports `store`, `registry`, `grants`, `effects`, `schedule`, `context`, `clock`,
//! `stats`, `fences`, `eviction`. Called by the writing commands, `waits` and `expiry`.
//!
//! Before the change, when this server decides: waiters that gave up are taken out of the
//! queue (so they are never granted), and expired locks are reclaimed, replicated as an
//! `EXPIRE` effect ahead of whatever the change replicates; both may grant waiters. After it:
//! the INFO gauge and the expiry schedule follow the table, and the server's fence mark
//! (`fences`) rises to the project's counter, whether a grant or an applied effect moved it.

use pathlock_core::{Grant, Project};
use redis_module::{Context, RedisError, RedisString};

use crate::context::{decides, notify, selected_db};
use crate::effects::Effect;
use crate::{clock, eviction, fences, grants, registry, schedule, stats, store};

pub fn change<R>(
    ctx: &Context,
    key_name: &RedisString,
    create: bool,
    change: impl FnOnce(&mut Project) -> R,
) -> Result<Option<R>, RedisError> {
    let result = store::write(ctx, key_name, create, |project| {
        let before = project.locks().len();
        if decides(ctx) {
            let now = clock::now_ms(ctx);
            let cancelled = registry::take_cancelled(selected_db(ctx), key_name.as_slice());
            let grants: Vec<Grant> = cancelled
                .into_iter()
                .flat_map(|id| project.cancel(now, id).1)
                .collect();
            grants::deliver(ctx, key_name, grants);
            let (expired, grants) = project.reclaim_expired(now);
            if !expired.is_empty() {
                Effect::Expire { now }.replicate(ctx, key_name);
                stats::count(&stats::EXPIRATIONS, expired.len());
                notify(ctx, "pathlock.expired", key_name);
                grants::deliver(ctx, key_name, grants);
            }
        }
        let result = change(project);
        fences::observe(project.locks().next_fence());
        stats::track(&stats::LOCKS_HELD, before, project.locks().len());
        schedule::schedule(ctx, key_name.as_slice(), project.locks().next_deadline());
        result
    })?;
    // Where the maxmemory policy can evict projects, each change marks the key as just used.
    eviction::protect(ctx, key_name);
    Ok(result)
}
