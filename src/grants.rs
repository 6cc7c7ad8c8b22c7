//! What follows every grant, made at once or to a waiter, in one place: the effect for replicas
//! and the AOF, the keyspace event, the counts in INFO, and for a waiter its reply.
//!
//! Level 5: imports `blocked`, `effects`, `registry`, `stats`, `store`. Called by the ACQUIRE
//! handler, `change` (grants made when expired locks or cancelled waiters leave) and `waits`.

use pathlock_core::{Grant, Items, Note, Token};

use crate::blocked::Answer;
use crate::effects::{Effect, Kind};
use crate::store::Store;
use crate::{blocked, registry, stats};

/// Publishes a grant made at once to the command's caller (`ACQUIRE`), whose reply the handler
/// writes itself.
pub fn publish_immediate(
    store: &impl Store,
    token: Token,
    deadline: u64,
    fence: u64,
    items: Items,
    note: Option<Note>,
) {
    publish(
        store,
        &Effect::Grant {
            token,
            deadline,
            fence,
            items,
            note,
        },
    );
}

/// Publishes a grant: replicates its effect, counts it and raises its keyspace event.
fn publish(store: &impl Store, effect: &Effect) {
    store.replicate(effect);
    store.count_and_notify(Kind::Grant, 1);
}

/// Publishes the grants made for waiters, and unblocks their clients with their replies. The token
/// goes from the grant to its effect and then to the reply, without a copy.
pub fn deliver(store: &impl Store, grants: Vec<Grant>) {
    for grant in grants {
        let effect = Effect::Grant {
            token: grant.token,
            deadline: grant.deadline,
            fence: grant.fence,
            items: grant.items,
            note: grant.note,
        };
        publish(store, &effect);
        stats::count(&stats::WAITS_GRANTED, 1);
        if let (Some(entry), Effect::Grant { token, .. }) = (registry::forget(grant.waiter), effect)
        {
            blocked::answer(&entry, Answer::Granted(token, grant.fence));
        }
    }
}
