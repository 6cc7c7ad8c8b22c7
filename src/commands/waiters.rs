//! `PATHLOCK.WAITERS`: the requests waiting at or under a path, in queue order.

use redis_module::{RedisResult, RedisValue};

use super::Call;
use crate::reply::WaiterEntry;
use crate::{args, registry, reply};

/// PATHLOCK.WAITERS key [path]
pub fn waiters(call: &impl Call, words: &[&[u8]]) -> RedisResult {
    let under = args::under(words.get(2).copied())?;
    // Waits are timed on the registry's clock, which the wall clock's jumps do not move.
    let now = registry::monotonic_us();
    let listed = call.read(|project| {
        let waiting = project.waiters_under(&under);
        let ids: Vec<u64> = waiting.iter().map(|(id, _)| *id).collect();
        // A waiter the registry no longer knows gave up; its queue forgets it at the key's
        // next change, and it is listed no more.
        let entries: Vec<WaiterEntry> = waiting
            .iter()
            .zip(registry::wait_times(&ids))
            .filter_map(|((_, waiter), times)| {
                let (since, deadline) = times?;
                Some(WaiterEntry {
                    waiter,
                    waited_ms: now.saturating_sub(since) / 1000,
                    left_ms: deadline.saturating_sub(now).div_ceil(1000),
                })
            })
            .collect();
        reply::waiter_entries(&entries)
    })?;
    Ok(listed.unwrap_or_else(|| RedisValue::Array(Vec::new())))
}
