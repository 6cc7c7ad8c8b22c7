//! The one way to open a project key: the type check, and the creation of a missing project.
//!
//! Level 3: imports `keytype`, `errors`, `stats`. Called by `change` (writes) and the reading
//! commands (`LOCKS`, `CHECK`).

use pathlock_core::Project;
use redis_module::{Context, RedisError, RedisString};

use crate::errors::WRONGTYPE;
use crate::keytype::PATHLOCK_TYPE;
use crate::stats;

/// Runs `write` on the project stored under `key_name`. A missing key is created when `create`
/// is set, and otherwise answers `Ok(None)`; a key of another type answers `WRONGTYPE`.
pub fn write<R>(
    ctx: &Context,
    key_name: &RedisString,
    create: bool,
    write: impl FnOnce(&mut Project) -> R,
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
    Ok(key
        .get_value::<Project>(&PATHLOCK_TYPE)
        .map_err(wrong_type)?
        .map(write))
}

/// Runs `read` on a project without changing it; a missing key answers `Ok(None)`. Expired
/// locks stay in place (a replica must not reclaim them); the engine's reading methods hide
/// them.
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
