//! Project keys and the server's `maxmemory` eviction (`docs/commands.md`, "Eviction").
//!
//! Under `noeviction` and the `volatile-*` policies a project key is never evicted: it has no
//! TTL (a module value that someone gave one with `EXPIRE` is the exception, and its loss is
//! reported below). Under the `allkeys-*` policies with a `maxmemory` limit, any key may go,
//! a project holding live locks too, and the next acquire would grant the same paths to a
//! second owner. What the module does about it:
//!
//! - **Refuses** `ACQUIRE` while the policy can evict projects, with an error naming the policy,
//!   unless `pathlock.accept-eviction yes` says the operator accepts the risk. Nothing the module
//!   API offers keeps a key out of eviction's reach: `RM_SetLRU` can only make a key look used
//!   just now, which many cache keys also are, and `RM_SetLFU`'s highest frequency (255) decays
//!   by one every `lfu-decay-time` minutes. So the safe default is to refuse.
//! - Where the risk is accepted, **protects** as far as the API allows: every change to a
//!   project marks it as used just now (LRU) or as used at the highest frequency (LFU).
//! - **Makes any loss loud**: a project evicted while it held locks is logged as a warning with
//!   its name and lock count, counted in `INFO pathlock` (`total_evicted_projects`), announced by
//!   the server's own `evicted` keyspace event, and its holders' next `RENEW` answers 0.
//!
//! The policy is read with `CONFIG GET` when the module loads and again when a `CONFIG SET`
//! changes `maxmemory` or `maxmemory-policy` (the server's config-change event), never per
//! command: the commands read two atomics.
//!
//! Level 1: imports `config`, `contain`, `context`, `errors`, `stats`. Used by `lib.rs` (load), the ACQUIRE
//! handler, `store` (protection after every change), `keytype` (a project leaving its key) and
//! `events` (the `evicted` keyspace event).

use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis_module::{raw, Context, RedisString};

use crate::contain::contained;
use crate::context::{config_get, refresh_latency_threshold};
use crate::{config, errors, stats};

/// Whether the server's policy and limit can evict a project key.
static EVICTS: AtomicBool = AtomicBool::new(false);
/// Whether the policy is LFU-based, for the protection.
static LFU: AtomicBool = AtomicBool::new(false);
/// The policy's name, for the refusal's error and the log.
static POLICY: Mutex<String> = Mutex::new(String::new());

/// A project that just left its key while holding locks: its name, lock count and when. The
/// server calls the type's `unlink` and then, for an eviction, raises the `evicted` event for the
/// same key at once; `evicted` takes this record when the names match.
static LEAVING: Mutex<Option<(Vec<u8>, usize, Instant)>> = Mutex::new(None);

fn policy_evicts(policy: &str, maxmemory: i64) -> bool {
    maxmemory > 0 && policy.starts_with("allkeys-")
}

/// Reads the policy and the limit again, and warns when they can evict projects.
pub fn refresh(ctx: &Context) {
    let policy = config_get(ctx, "maxmemory-policy").unwrap_or_default();
    let maxmemory = config_get(ctx, "maxmemory")
        .and_then(|m| m.parse::<i64>().ok())
        .unwrap_or(0);
    let evicts = policy_evicts(&policy, maxmemory);
    EVICTS.store(evicts, Ordering::Relaxed);
    LFU.store(policy.ends_with("-lfu"), Ordering::Relaxed);
    if evicts {
        let what = if accepted() {
            "pathlock.accept-eviction is yes, so locks are granted and a project evicted with \
             live locks is logged and counted"
        } else {
            "PATHLOCK.ACQUIRE is refused until the policy is noeviction or volatile-*, or \
             pathlock.accept-eviction is yes"
        };
        ctx.log_warning(&format!(
            "pathlock: maxmemory-policy {policy} with maxmemory {maxmemory} can evict project \
             keys that hold live locks, and another owner could then be granted their paths; \
             {what}"
        ));
    }
    *POLICY.lock().unwrap_or_else(|p| p.into_inner()) = policy;
}

fn accepted() -> bool {
    config::ACCEPT_EVICTION.load(Ordering::Relaxed)
}

/// Whether the server's policy can evict projects now.
pub fn evicts() -> bool {
    EVICTS.load(Ordering::Relaxed)
}

/// The error that refuses an acquire, or `None` when locking is safe or the risk accepted.
pub fn refusal() -> Option<String> {
    if !evicts() || accepted() {
        return None;
    }
    let policy = POLICY.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Some(format!(
        "ERR maxmemory-policy {policy} can evict this project with its live locks: use \
         noeviction or a volatile-* policy, or CONFIG SET pathlock.accept-eviction yes to \
         accept the risk"
    ))
}

/// Marks a project key as just used, where the policy can evict it and the risk is accepted, so
/// that eviction picks other keys first. A key open for writing already; O(1).
pub fn protect(ctx: &Context, key_name: &RedisString) {
    if !evicts() {
        return;
    }
    // SAFETY: the key is opened, marked and closed within this call on the command's context;
    // the functions are checked through their Options.
    unsafe {
        let (Some(open), Some(close)) = (raw::RedisModule_OpenKey, raw::RedisModule_CloseKey)
        else {
            return;
        };
        let key = open(
            ctx.ctx,
            key_name.inner,
            // Without touching the clock on the way in: it is set just below.
            (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE | raw::REDISMODULE_OPEN_KEY_NOTOUCH)
                as i32,
        )
        .cast::<raw::RedisModuleKey>();
        if key.is_null() {
            return;
        }
        if LFU.load(Ordering::Relaxed) {
            if let Some(set_lfu) = raw::RedisModule_SetLFU {
                set_lfu(key, 255);
            }
        } else if let Some(set_lru) = raw::RedisModule_SetLRU {
            set_lru(key, 0);
        }
        close(key);
    }
}

/// A project is leaving its key (`DEL`, overwrite, eviction...) holding `locks` locks.
pub fn leaving(key: &[u8], locks: usize) {
    let mut leaving = LEAVING.lock().unwrap_or_else(|p| p.into_inner());
    *leaving = (locks > 0).then(|| (key.to_vec(), locks, Instant::now()));
}

/// The server evicted `key`: when a project holding locks just left under that name, the loss
/// is logged and counted.
pub fn evicted(ctx: &Context, key: &[u8]) {
    let taken = LEAVING.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some((name, locks, when)) = taken else {
        return;
    };
    if name != key || when.elapsed() > Duration::from_millis(100) {
        return;
    }
    stats::count(&stats::EVICTED_PROJECTS, 1);
    let policy = POLICY.lock().unwrap_or_else(|p| p.into_inner()).clone();
    // The log line is a format to the server: the key's bytes go in escaped, `%` doubled.
    ctx.log_warning(&format!(
        "pathlock: maxmemory-policy {policy} evicted project key '{}' holding {locks} locks; \
         their holders lost them, and their next RENEW answers 0",
        errors::for_log(key)
    ));
}

/// Follows `CONFIG SET maxmemory-policy` and `CONFIG SET maxmemory` through the server's
/// config-change event (Redis 7.0+, Valkey).
pub fn subscribe(ctx: &Context) {
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_CONFIG,
        dataver: 1,
    };
    // SAFETY: subscribing with a callback that lives as long as the module.
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            subscribe(ctx.ctx, event, Some(on_config_change));
        }
    }
}

/// A `CONFIG SET` changed settings: when `maxmemory` or `maxmemory-policy` is among them,
/// whether project keys can be evicted is read again.
extern "C" fn on_config_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_CONFIG_CHANGE || data.is_null() {
        return;
    }
    contained("the config-change event", (), || {
        // SAFETY: the server passes a RedisModuleConfigChange with this event, whose names are
        // C strings that live for the call.
        let change = unsafe { &*data.cast::<raw::RedisModuleConfigChange>() };
        let names = (0..change.num_changes as usize).filter_map(|i| {
            let name = unsafe { *change.config_names.add(i) };
            (!name.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(name) })
        });
        let (mut policy, mut latency) = (false, false);
        for name in names.map(|n| n.to_bytes().to_ascii_lowercase()) {
            policy |= name == b"maxmemory-policy" || name == b"maxmemory";
            latency |= name == b"latency-monitor-threshold";
        }
        let ctx = Context::new(ctx);
        if policy {
            refresh(&ctx);
        }
        // The module's one subscriber to this event (a second subscription would replace it)
        // also follows the latency monitor's threshold, which the expiry cycle reads.
        if latency {
            refresh_latency_threshold(&ctx);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allkeys_policies_with_a_limit_evict_projects() {
        assert!(policy_evicts("allkeys-lru", 1));
        assert!(policy_evicts("allkeys-lfu", 20 << 20));
        assert!(policy_evicts("allkeys-random", 1));
        assert!(!policy_evicts("allkeys-lru", 0), "no limit, no eviction");
        for policy in ["noeviction", "volatile-lru", "volatile-lfu", "volatile-ttl"] {
            assert!(!policy_evicts(policy, 1), "{policy}");
        }
    }
}
