//! Opening a project key: type checks, creation, lazy reclamation of expired locks, and the
//! bookkeeping every change needs (effects, keyspace events, INFO gauges, the expiry schedule).

use pathlock_core::{Mode, Path, Project, Token};
use redis_module::{Context, ContextFlags, NotifyEvent, RedisError, RedisString};

use crate::effects::Effect;
use crate::errors::WRONGTYPE;
use crate::keytype::PATHLOCK_TYPE;
use crate::{clock, expiry, stats, waits};

/// Whether this call decides, rather than applies a decision: a replica applying its master's
/// stream and a server replaying its AOF must never reclaim or refuse on their own.
pub fn decides(ctx: &Context) -> bool {
    !ctx.get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
}

/// Opens a project for a change and runs `change` on its table. A missing key is created when
/// `create` is set, and otherwise answers `Ok(None)`. When this server decides, expired locks
/// are reclaimed first and the reclamation is replicated ahead of whatever `change` replicates.
pub fn change<R>(
    ctx: &Context,
    key_name: &RedisString,
    create: bool,
    change: impl FnOnce(&mut Project) -> R,
) -> Result<Option<R>, RedisError> {
    let key = ctx.open_key_writable(key_name);
    let wrong_type = |_| RedisError::Str(WRONGTYPE);
    if key
        .get_value::<Project>(&PATHLOCK_TYPE)
        .map_err(wrong_type)?
        .is_none()
    {
        if !create {
            return Ok(None);
        }
        key.set_value(&PATHLOCK_TYPE, Project::new())?;
        stats::track(&stats::KEYS, 0, 1);
    }
    let Some(project) = key
        .get_value::<Project>(&PATHLOCK_TYPE)
        .map_err(wrong_type)?
    else {
        return Ok(None);
    };
    let before = project.locks().len();
    if decides(ctx) {
        let now = clock::now_ms(ctx);
        let grants = waits::purge_cancelled(ctx, key_name.as_slice(), project, now);
        waits::deliver(ctx, key_name, grants);
        let (expired, grants) = project.reclaim_expired(now);
        if !expired.is_empty() {
            Effect::Expire { now }.replicate(ctx, key_name);
            stats::count(&stats::EXPIRATIONS, expired.len());
            notify(ctx, "pathlock.expired", key_name);
            waits::deliver(ctx, key_name, grants);
        }
    }
    let result = change(project);
    stats::track(&stats::LOCKS_HELD, before, project.locks().len());
    expiry::schedule(ctx, key_name.as_slice(), project.locks().next_deadline());
    Ok(Some(result))
}

/// Runs `read` on a project's table without changing it; a missing key answers `Ok(None)`.
/// Expired locks stay in place (a replica must not reclaim them); the engine's reading methods
/// hide them.
pub fn read<R>(
    ctx: &Context,
    key_name: &RedisString,
    read: impl FnOnce(&Project) -> R,
) -> Result<Option<R>, RedisError> {
    let key = ctx.open_key(key_name);
    let project = key
        .get_value::<Project>(&PATHLOCK_TYPE)
        .map_err(|_| RedisError::Str(WRONGTYPE))?;
    Ok(project.map(read))
}

pub fn notify(ctx: &Context, event: &str, key: &RedisString) {
    ctx.notify_keyspace_event(NotifyEvent::MODULE, event, key);
}

/// What follows every grant, made at once or to a waiter: the effect for replicas and the AOF,
/// the keyspace event, and the count in INFO.
pub fn granted(
    ctx: &Context,
    key: &RedisString,
    token: Token,
    deadline: u64,
    fence: u64,
    items: Vec<(Mode, Path)>,
) {
    Effect::Grant {
        token,
        deadline,
        fence,
        items,
    }
    .replicate(ctx, key);
    notify(ctx, "pathlock.acquire", key);
    stats::count(&stats::GRANTS, 1);
}
