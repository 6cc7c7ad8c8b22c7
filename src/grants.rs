//! What follows every grant, made at once or to a waiter, in one place: the effect for replicas
//! and the AOF, the keyspace event, the counts in INFO, and for a waiter its reply.
//!
//! Level 3: imports `effects`, `context`, `registry`, `blocked`, `stats`. Called by the ACQUIRE
//! handler, `change` (grants made when expired locks or cancelled waiters leave) and `waits`.

use pathlock_core::{Grant, Items, Note, Token};
use redis_module::{Context, RedisString};

use crate::blocked::Answer;
use crate::context::notify;
use crate::effects::Effect;
use crate::{blocked, registry, stats};

pub fn granted(
    ctx: &Context,
    key: &RedisString,
    token: Token,
    deadline: u64,
    fence: u64,
    items: Items,
    note: Option<Note>,
) {
    announce(
        ctx,
        key,
        &Effect::Grant {
            token,
            deadline,
            fence,
            items,
            note,
        },
    );
}

/// Replicates a grant's effect, raises its keyspace event and counts it.
fn announce(ctx: &Context, key: &RedisString, effect: &Effect) {
    effect.replicate(ctx, key);
    notify(ctx, c"pathlock.acquire", key);
    stats::count(&stats::GRANTS, 1);
}

/// Replicates and announces grants made for waiters, and unblocks their clients. The token
/// goes from the grant to its effect and then to the reply, without a copy.
pub fn deliver(ctx: &Context, key: &RedisString, grants: Vec<Grant>) {
    for grant in grants {
        let effect = Effect::Grant {
            token: grant.token,
            deadline: grant.deadline,
            fence: grant.fence,
            items: grant.items,
            note: grant.note,
        };
        announce(ctx, key, &effect);
        stats::count(&stats::WAITS_GRANTED, 1);
        if let (Some(entry), Effect::Grant { token, .. }) = (registry::forget(grant.waiter), effect)
        {
            blocked::answer(&entry, Answer::Granted(token, grant.fence));
        }
    }
}
