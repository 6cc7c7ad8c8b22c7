use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::change::change;
use crate::clock::now_ms;
use crate::context::notify;
use crate::effects::Effect;
use crate::{args, grants, stats};

/// PATHLOCK.RENEW key token ms
pub fn renew(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    if args.len() != 4 {
        return Err(RedisError::WrongArity);
    }
    let token = args::token(args[2].as_slice())?;
    let ttl = args::ttl_ms(args[3].as_slice())?;
    let now = now_ms(ctx);
    let deadline = now.saturating_add(ttl);
    let (renewed, grants) = change(ctx, &args[1], false, |project| {
        project.renew(now, &token, deadline)
    })?
    .unwrap_or_default();
    if renewed > 0 {
        stats::count(&stats::RENEWALS, renewed);
        Effect::Renew { token, deadline }.replicate(ctx, &args[1]);
        notify(ctx, "pathlock.renew", &args[1]);
    }
    // The waiters that the caller's own lapsed locks let in, after the renewal.
    grants::deliver(ctx, &args[1], grants);
    Ok(RedisValue::Integer(renewed as i64))
}
