//! `INFO pathlock`: the section Redis shows for the module. Redis prefixes each field with the
//! module's name, so `locks` appears as `pathlock_locks`.
//!
//! Level 3: imports `stats`, `fences`, `eviction`, `schedule` and `contain`. Called by Redis for `INFO`.

use redis_module::{raw, InfoContext, RedisResult};
use redis_module_macros::info_command_handler;

use crate::contain::contained;
use crate::stats::{self, *};
use crate::{eviction, fences, schedule};

/// `INFO` (or `INFO pathlock`): the module's section.
#[info_command_handler]
fn info(ctx: &InfoContext, _for_crash_report: bool) -> RedisResult<()> {
    contained("INFO", (), || section(ctx));
    Ok(())
}

fn section(ctx: &InfoContext) {
    // The raw calls name the section after the module alone (`# pathlock`); the builder would
    // call it `pathlock_<name>`.
    raw::add_info_section(ctx.ctx, None);
    for (name, gauge) in [
        ("locks", &LOCKS_HELD),
        ("keys", &KEYS),
        ("clients_waiting", &CLIENTS_WAITING),
        ("locks_freeing", &LOCKS_FREEING),
        ("lazyfree_pending_objects", &LAZYFREE_PENDING),
    ] {
        raw::add_info_field_long_long(ctx.ctx, name, stats::get(gauge));
    }
    // Keys whose released or lapsed big owners' locks are still being freed in the background.
    raw::add_info_field_long_long(ctx.ctx, "background_keys", schedule::pending_count() as i64);
    // Keys in the expiry schedule: every project key with a lock, none for a deleted one.
    raw::add_info_field_long_long(ctx.ctx, "scheduled_keys", schedule::len() as i64);
    for (name, total) in [
        ("total_grants", &GRANTS),
        ("total_conflicts", &CONFLICTS),
        ("total_releases", &RELEASES),
        ("total_renewals", &RENEWALS),
        ("total_expirations", &EXPIRATIONS),
        ("total_waits_granted", &WAITS_GRANTED),
        ("total_wait_timeouts", &WAIT_TIMEOUTS),
        ("total_evicted_projects", &EVICTED_PROJECTS),
        ("lazyfreed_objects", &LAZYFREED),
        ("total_cycles", &CYCLES),
        ("total_cycles_over_1ms", &CYCLES_OVER_1MS),
        ("cycle_longest_us", &CYCLE_LONGEST_US),
        ("cycle_longest_cpu_us", &CYCLE_LONGEST_CPU_US),
        ("total_cycles_own_over_1ms", &CYCLES_OWN_OVER_1MS),
        ("cycle_own_longest_us", &CYCLE_OWN_LONGEST_US),
        ("cycle_own_longest_cpu_us", &CYCLE_OWN_LONGEST_CPU_US),
    ] {
        raw::add_info_field_unsigned_long_long(ctx.ctx, name, stats::total(total));
    }
    // The highest fence counter seen on any project key: a new key starts at or above it.
    raw::add_info_field_unsigned_long_long(ctx.ctx, "fence_mark", fences::high());
    // 1 while the server's maxmemory policy and limit can evict project keys.
    raw::add_info_field_long_long(ctx.ctx, "eviction_risk", i64::from(eviction::evicts()));
}
