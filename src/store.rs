//! The one way to open a project key: the type check, and the creation of a missing project.
//!
//! A project key created by a master starts its fences where `fences` says, above every fence
//! this server has seen and above the clock floor; a replica or an AOF replay creates it at 1
//! and the `GRANT` effect that comes with it sets the master's fence.
//!
//! Level 3: imports `keytype`, `errors`, `stats`, `fences`, `context`, `clock`. Called by `change` (writes) and the reading
//! commands (`LOCKS`, `CHECK`).
//!
//! A key's LRU/LFU clock (`OBJECT IDLETIME`, `OBJECT FREQ`, what `maxmemory` eviction reads)
//! moves only when a client's command writes it, as a `SET` moves it. The reading commands
//! inspect a key as `TTL` or `TYPE` do, without touching it, and the module's own work (the
//! expiry cycle, the signal worker, a waiter's timeout) opens keys with `NOTOUCH` too.

use pathlock_core::Project;
use redis_module::key::KeyFlags;
use redis_module::{Context, RedisError, RedisString};

use crate::context::{decides, in_command};
use crate::errors::wrong_type;
use crate::keytype::PATHLOCK_TYPE;
use crate::{clock, fences, stats};

/// Runs `write` on the project stored under `key_name`. A missing key is created when `create`
/// is set, and otherwise answers `Ok(None)`; a key of another type answers `WRONGTYPE`, naming
/// the key.
pub fn write<R>(
    ctx: &Context,
    key_name: &RedisString,
    create: bool,
    write: impl FnOnce(&mut Project) -> R,
) -> Result<Option<R>, RedisError> {
    let touch = if in_command(ctx) {
        KeyFlags::empty()
    } else {
        KeyFlags::NOTOUCH
    };
    let key = ctx.open_key_writable_with_flags(key_name, touch);
    let wrong_type = |_| RedisError::String(wrong_type(key_name.as_slice()));
    if let Some(project) = key
        .get_value::<Project>(&PATHLOCK_TYPE)
        .map_err(wrong_type)?
    {
        return Ok(Some(write(project)));
    }
    if !create {
        return Ok(None);
    }
    let mut project = Project::new();
    if decides(ctx) {
        project
            .locks_mut()
            .raise_next_fence(fences::first(clock::now_ms(ctx)));
    }
    key.set_value(&PATHLOCK_TYPE, project)?;
    stats::track(&stats::KEYS, 0, 1);
    Ok(key
        .get_value::<Project>(&PATHLOCK_TYPE)
        .map_err(wrong_type)?
        .map(write))
}

/// Runs `maintain` on the project stored under `key_name`, if there is one, for work that
/// changes nothing a client sees (freeing a buried owner's locks): the key is opened without
/// touching its LRU/LFU, as a client's access would, and without creating it.
pub fn maintain<R>(
    ctx: &Context,
    key_name: &RedisString,
    maintain: impl FnOnce(&mut Project) -> R,
) -> Result<Option<R>, RedisError> {
    let key = ctx.open_key_writable_with_flags(key_name, KeyFlags::NOTOUCH);
    let project = key
        .get_value::<Project>(&PATHLOCK_TYPE)
        .map_err(|_| RedisError::String(wrong_type(key_name.as_slice())))?;
    Ok(project.map(maintain))
}

/// Runs `read` on a project without changing it; a missing key answers `Ok(None)`. Expired
/// locks stay in place (a replica must not reclaim them); the engine's reading methods hide
/// them.
pub fn read<R>(
    ctx: &Context,
    key_name: &RedisString,
    read: impl FnOnce(&Project) -> R,
) -> Result<Option<R>, RedisError> {
    let key = ctx.open_key_with_flags(key_name, KeyFlags::NOTOUCH);
    let project = key
        .get_value::<Project>(&PATHLOCK_TYPE)
        .map_err(|_| RedisError::String(wrong_type(key_name.as_slice())))?;
    Ok(project.map(read))
}
