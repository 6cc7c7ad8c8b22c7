use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use super::{change_project, notify, words};
use crate::args;

/// PATHLOCK.RELEASE key token [path ...]
pub fn release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() < 3 {
        return Err(RedisError::WrongArity);
    }
    let token = args::token(args[2].as_slice())?;
    let paths = args::paths(&words(&args[3..]))?;
    let freed = change_project(ctx, &args[1], false, |table| {
        table.release(&token, paths.as_deref()).len()
    })?
    .unwrap_or(0);
    if freed > 0 {
        notify(ctx, "pathlock.release", &args[1]);
    }
    Ok(RedisValue::Integer(freed as i64))
}
