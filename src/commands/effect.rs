use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::change::change;
use crate::context::{decides, notify};
use crate::effects::Effect;
use crate::errors::ERR_EFFECT_INTERNAL;
use crate::{clock, stats};

/// PATHLOCK.EFFECT key GRANT|RELEASE|RENEW|EXPIRE|FENCE ...: a master's decision, applied.
/// Accepted only from the replication link and from the AOF; clients get an error.
pub fn effect(ctx: &Context, key: &RedisString, words: &[&[u8]]) -> RedisResult {
    if decides(ctx) {
        return Err(RedisError::Str(ERR_EFFECT_INTERNAL));
    }
    if words.len() < 3 {
        return Err(RedisError::WrongArity);
    }
    let effect = Effect::parse(&words[2..])?;
    // Before the key is opened, so a refused effect creates no key and moves no mark. The
    // error reaches no client: the server logs it as an error it sent its master or the AOF.
    effect.check_fences(clock::wall_ms())?;
    let applied = change(ctx, key, effect.creates_key(), |project| {
        effect.apply(project)
    })?;
    if let Some(applied) = applied {
        if applied.count > 0 {
            let total = match effect {
                Effect::Grant { .. } => &stats::GRANTS,
                Effect::Release { .. } => &stats::RELEASES,
                Effect::Renew { .. } => &stats::RENEWALS,
                Effect::Expire { .. } | Effect::ExpireOf { .. } | Effect::Fence { .. } => {
                    &stats::EXPIRATIONS
                }
            };
            stats::count(total, applied.count);
            notify(ctx, applied.event, key);
        }
    }
    // A replica's own AOF and its sub-replicas get the effect as it came.
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}
