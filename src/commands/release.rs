use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::words;
use crate::effects::Effect;
use crate::{args, project, stats};

/// PATHLOCK.RELEASE key token [path ...]
pub fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() < 3 {
        return Err(RedisError::WrongArity);
    }
    let token = args::token(args[2].as_slice())?;
    let paths = args::paths(&words(&args[3..]))?;
    let freed = project::change(ctx, &args[1], false, |table| {
        table.release(&token, paths.as_deref()).len()
    })?
    .unwrap_or(0);
    if freed > 0 {
        stats::count(&stats::RELEASES, freed);
        Effect::Release { token, paths }.replicate(ctx, &args[1]);
        project::notify(ctx, "pathlock.release", &args[1]);
    }
    Ok(RedisValue::Integer(freed as i64))
}
