use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::words;
use crate::change::change;
use crate::clock::now_ms;
use crate::context::notify;
use crate::effects::Effect;
use crate::{args, grants, stats};

/// PATHLOCK.RELEASE key token [path ...]
pub fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() < 3 {
        return Err(RedisError::WrongArity);
    }
    let token = args::token(args[2].as_slice())?;
    let paths = args::paths(&words(&args[3..]))?;
    let now = now_ms(ctx);
    let (freed, grants) = change(ctx, &args[1], false, |project| {
        project.release(now, &token, paths.as_deref())
    })?
    .unwrap_or_default();
    if !freed.is_empty() {
        stats::count(&stats::RELEASES, freed.len());
        Effect::Release { token, paths }.replicate(ctx, &args[1]);
        notify(ctx, "pathlock.release", &args[1]);
        grants::deliver(ctx, &args[1], grants);
    }
    Ok(RedisValue::Integer(freed.len() as i64))
}
