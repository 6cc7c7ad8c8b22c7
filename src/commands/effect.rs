//! `PATHLOCK.EFFECT`: a master's decision applied on a replica or while the AOF loads.

use redis_module::{RedisError, RedisResult, RedisValue};

use super::Call;
use crate::change::{change_existing, change_or_create};
use crate::clock;
use crate::effects::Effect;
use crate::errors::ERR_EFFECT_INTERNAL;

/// PATHLOCK.EFFECT key GRANT|RELEASE|RENEW|EXPIRE|FENCE ...: a master's decision, applied.
/// Accepted only from the replication link and from the AOF; clients get an error.
pub fn effect(call: &impl Call, words: &[&[u8]]) -> RedisResult {
    if call.decides() {
        return Err(RedisError::Str(ERR_EFFECT_INTERNAL));
    }
    let effect = Effect::parse(&words[2..])?;
    // Before the key is opened, so a refused effect creates no key and moves no mark. The
    // error reaches no client: the server logs it as an error it sent its master or the AOF.
    effect.check_fences(clock::wall_ms())?;
    let apply = |project: &mut _| effect.apply(project);
    let applied = if effect.creates_key() {
        Some(change_or_create(call, apply)?)
    } else {
        change_existing(call, apply)?
    };
    if let Some(applied) = applied {
        call.count_and_notify(applied.kind, applied.count);
    }
    // A replica's own AOF and its sub-replicas get the effect as it came.
    call.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
