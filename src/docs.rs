//! What `COMMAND INFO` and `COMMAND DOCS` say about each command: arity (which Redis then
//! enforces), summary, complexity and the version that introduced it. Flags and the key position
//! (argument 1, from which Redis derives the key spec used by Cluster routing and ACL key
//! patterns) are given at registration in `lib.rs`.
//!
//! Level 0: imports nothing of the crate. Called by `lib.rs` at load.

use std::ffi::CString;
use std::os::raw::c_int;

use redis_module::{raw, Context};

struct Doc {
    name: &'static str,
    arity: c_int,
    summary: &'static str,
    complexity: &'static str,
}

const DOCS: &[Doc] = &[
    Doc {
        name: "PATHLOCK.ACQUIRE",
        arity: -4,
        summary: "Grants READ or WRITE locks on paths of a project to one owner, all or nothing, optionally waiting for them",
        complexity: "O(D) per path, D being its depth, plus the locks and waiters the owner itself holds beneath it",
    },
    Doc {
        name: "PATHLOCK.RELEASE",
        arity: -3,
        summary: "Frees an owner's locks at the given paths, or all of them",
        complexity: "O(D) per lock freed, plus the waiters it wakes",
    },
    Doc {
        name: "PATHLOCK.RENEW",
        arity: 4,
        summary: "Moves the deadline of every live lock of an owner",
        complexity: "O(N) where N is the number of locks the owner holds",
    },
    Doc {
        name: "PATHLOCK.LOCKS",
        arity: -2,
        summary: "Lists the live locks at or under a path, in tree order",
        complexity: "O(D + N) where N is the number of locks returned",
    },
    Doc {
        name: "PATHLOCK.CHECK",
        arity: -4,
        summary: "Lists the live locks that would block a request now, without changing anything",
        complexity: "O(D + N) per path, where N is the number of blocking locks returned",
    },
    Doc {
        name: "PATHLOCK.EFFECT",
        arity: -3,
        summary: "Internal: applies a master's decision on a replica or during AOF loading; refused from clients",
        complexity: "O(D) per path",
    },
];

/// Sets the command docs where the server supports it (Redis 7.0 and later); elsewhere the
/// commands work without them.
pub fn register(ctx: &Context) {
    // SAFETY: the API functions exist on Redis 7.0+, checked through the Option; every pointer
    // handed to SetCommandInfo lives until the call returns, and Redis copies what it keeps.
    unsafe {
        let (Some(get), Some(set)) = (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo)
        else {
            return;
        };
        let version = raw::RedisModuleCommandInfoVersion {
            version: 1,
            sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
            sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
            sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
        };
        let since = CString::new("1.0.0").unwrap_or_default();
        for doc in DOCS {
            let (Ok(name), Ok(summary), Ok(complexity)) = (
                CString::new(doc.name),
                CString::new(doc.summary),
                CString::new(doc.complexity),
            ) else {
                continue;
            };
            let command = get(ctx.ctx, name.as_ptr());
            if command.is_null() {
                continue;
            }
            let info = raw::RedisModuleCommandInfo {
                version: &version,
                summary: summary.as_ptr(),
                complexity: complexity.as_ptr(),
                since: since.as_ptr(),
                history: std::ptr::null_mut(),
                tips: std::ptr::null(),
                arity: doc.arity,
                key_specs: std::ptr::null_mut(),
                args: std::ptr::null_mut(),
            };
            if set(command, &info) != raw::REDISMODULE_OK as c_int {
                ctx.log_warning(&format!("pathlock: could not set the docs of {}", doc.name));
            }
        }
    }
}
