//! What `COMMAND INFO` and `COMMAND DOCS` say about each command: arity (which Redis then
//! enforces), summary, complexity, the version that introduced it, every argument (so that
//! `redis-cli` shows hints) and the key spec. Flags, the key position and the ACL categories are
//! given at registration in `lib.rs`.
//!
//! The key spec is what ACL key patterns are checked against: `LOCKS`, `CHECK` and `WAITERS`
//! only read their key (`RO ACCESS`), so a user with `%R~proj:*` may run them; the writing commands read
//! and change it (`RW ACCESS` with `UPDATE`, or `DELETE` for `RELEASE`), so they need write
//! permission on the key too.
//!
//! Level 0: imports nothing of the crate. Called by `lib.rs` at load.

use std::ffi::{CStr, CString};
use std::os::raw::c_int;

use redis_module::{raw, Context};

struct Doc {
    name: &'static str,
    arity: c_int,
    summary: &'static str,
    complexity: &'static str,
    /// The key spec's flags (`REDISMODULE_CMD_KEY_*`) for the key at position 1.
    key_flags: u32,
    /// The arguments after the command name, for `COMMAND DOCS`.
    args: fn() -> Vec<Arg>,
    /// The usual ACL categories the command belongs to, besides `pathlock`.
    categories: &'static CStr,
    /// Whether the command is in the `pathlock` category: every one but the replication-only
    /// command, which no client needs.
    in_pathlock: bool,
}

const RO_ACCESS: u32 = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;
const RW_UPDATE: u32 =
    raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE;
const RW_DELETE: u32 =
    raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_DELETE;

const DOCS: &[Doc] = &[
    Doc {
        name: "PATHLOCK.ACQUIRE",
        arity: -4,
        summary: "Grants READ or WRITE locks on paths of a project to one owner, all or nothing, optionally waiting for them and keeping a note with them",
        complexity: "O(D) per path, D being its depth, plus the locks and waiters the owner itself holds beneath it",
        key_flags: RW_UPDATE,
        args: acquire_args,
        categories: c"write slow blocking",
        in_pathlock: true,
    },
    Doc {
        name: "PATHLOCK.RELEASE",
        arity: -3,
        summary: "Frees an owner's locks at the given paths, or all of them",
        complexity: "O(D) per lock freed, plus the waiters it wakes",
        key_flags: RW_DELETE,
        args: release_args,
        categories: c"write fast",
        in_pathlock: true,
    },
    Doc {
        name: "PATHLOCK.RENEW",
        arity: 4,
        summary: "Moves the deadline of every live lock of an owner",
        complexity: "O(N) where N is the number of locks the owner holds",
        key_flags: RW_UPDATE,
        args: renew_args,
        categories: c"write fast",
        in_pathlock: true,
    },
    Doc {
        name: "PATHLOCK.LOCKS",
        arity: -2,
        summary: "Lists the live locks at or under a path, or only one owner's, in tree order, with their notes",
        complexity: "O(D + N) where N is the number of locks returned; with TOKEN, O(D x M) where M is the smaller of the owner's locks and the locks under the path",
        key_flags: RO_ACCESS,
        args: locks_args,
        categories: c"read slow",
        in_pathlock: true,
    },
    Doc {
        name: "PATHLOCK.CHECK",
        arity: -4,
        summary: "Lists the live locks that would block a request now, without changing anything",
        complexity: "O(D + N) per path, where N is the number of blocking locks returned",
        key_flags: RO_ACCESS,
        args: check_args,
        categories: c"read fast",
        in_pathlock: true,
    },
    Doc {
        name: "PATHLOCK.WAITERS",
        arity: -2,
        summary: "Lists the requests waiting (ACQUIRE ... WAIT) for paths at or under a path, in queue order, with how long each has waited and has left, and its note",
        complexity: "O(D + N log W) where N is the number of waiters returned and W the number waiting on the key",
        key_flags: RO_ACCESS,
        args: waiters_args,
        categories: c"read slow",
        in_pathlock: true,
    },
    Doc {
        name: "PATHLOCK.EFFECT",
        arity: -3,
        summary: "Internal: applies a master's decision on a replica or during AOF loading; refused from clients",
        complexity: "O(D) per path",
        key_flags: RW_UPDATE,
        args: effect_args,
        categories: c"write slow",
        in_pathlock: false,
    },
];

/// One argument as `COMMAND DOCS` shows it. Every string is a `'static` C string literal, so
/// the pointers handed to the server stay valid; the server copies what it keeps.
struct Arg {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&'static CStr>,
    flags: u32,
    subargs: Vec<Arg>,
}

fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        flags: raw::REDISMODULE_CMD_ARG_NONE,
        subargs: Vec::new(),
    }
}

impl Arg {
    fn token(mut self, token: &'static CStr) -> Arg {
        self.token = Some(token);
        self
    }

    fn optional(mut self) -> Arg {
        self.flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
        self
    }

    fn multiple(mut self) -> Arg {
        self.flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
        self
    }

    fn of(mut self, subargs: Vec<Arg>) -> Arg {
        self.subargs = subargs;
        self
    }
}

const KEY: raw::RedisModuleCommandArgType = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
const STRING: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
const INTEGER: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
const PURE_TOKEN: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN;
const ONEOF: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF;
const BLOCK: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK;

/// `mode path [mode path ...]`, the requests of `ACQUIRE` and `CHECK`.
fn requests() -> Arg {
    arg(c"request", BLOCK).multiple().of(vec![
        arg(c"mode", ONEOF).of(vec![
            arg(c"read", PURE_TOKEN).token(c"READ"),
            arg(c"write", PURE_TOKEN).token(c"WRITE"),
        ]),
        arg(c"path", STRING),
    ])
}

fn acquire_args() -> Vec<Arg> {
    vec![
        arg(c"key", KEY),
        arg(c"token", STRING).token(c"TOKEN").optional(),
        arg(c"ttl", INTEGER).token(c"TTL").optional(),
        arg(c"wait", INTEGER).token(c"WAIT").optional(),
        arg(c"note", STRING).token(c"NOTE").optional(),
        requests(),
    ]
}

fn release_args() -> Vec<Arg> {
    vec![
        arg(c"key", KEY),
        arg(c"token", STRING),
        arg(c"path", STRING).optional().multiple(),
    ]
}

fn renew_args() -> Vec<Arg> {
    vec![arg(c"key", KEY), arg(c"token", STRING), arg(c"ms", INTEGER)]
}

fn locks_args() -> Vec<Arg> {
    vec![
        arg(c"key", KEY),
        arg(c"path", STRING).optional(),
        arg(c"token", STRING).token(c"TOKEN").optional(),
    ]
}

fn waiters_args() -> Vec<Arg> {
    vec![arg(c"key", KEY), arg(c"path", STRING).optional()]
}

fn check_args() -> Vec<Arg> {
    vec![
        arg(c"key", KEY),
        arg(c"token", STRING).token(c"TOKEN").optional(),
        requests(),
    ]
}

fn effect_args() -> Vec<Arg> {
    vec![
        arg(c"key", KEY),
        arg(c"effect", STRING),
        arg(c"word", STRING).optional().multiple(),
    ]
}

/// The server's form of a list of arguments, ending with the all-zero entry it stops at. The
/// returned vectors own the sub-lists the entries point into; they must outlive the call.
fn raw_args(
    args: &[Arg],
    keep: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    let mut list: Vec<raw::RedisModuleCommandArg> = args
        .iter()
        .map(|a| raw::RedisModuleCommandArg {
            name: a.name.as_ptr(),
            type_: a.kind,
            key_spec_index: if a.kind == KEY { 0 } else { -1 },
            token: a.token.map_or(std::ptr::null(), CStr::as_ptr),
            summary: std::ptr::null(),
            since: std::ptr::null(),
            flags: a.flags as c_int,
            deprecated_since: std::ptr::null(),
            subargs: if a.subargs.is_empty() {
                std::ptr::null_mut()
            } else {
                raw_args(&a.subargs, keep)
            },
            display_text: std::ptr::null(),
        })
        .collect();
    // SAFETY: an all-zero RedisModuleCommandArg (null pointers, zero numbers) is the terminator
    // the server looks for.
    list.push(unsafe { std::mem::zeroed() });
    let pointer = list.as_mut_ptr();
    // Moving the vector into `keep` does not move its heap buffer, so `pointer` stays valid.
    keep.push(list);
    pointer
}

/// The one key spec: the key at argument 1, with the command's access flags; then the all-zero
/// terminator.
fn key_specs(flags: u32) -> Vec<raw::RedisModuleCommandKeySpec> {
    // SAFETY: an all-zero key spec (begin search type INVALID) is the terminator; the first
    // entry is filled in below with plain numbers.
    let mut spec: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    spec.flags = u64::from(flags);
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index.pos = 1;
    spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    spec.fk.range.lastkey = 0;
    spec.fk.range.keystep = 1;
    spec.fk.range.limit = 0;
    vec![spec, unsafe { std::mem::zeroed() }]
}

/// Puts each command in its ACL categories where the server lets modules do so (Redis 7.2+,
/// Valkey 8+): the usual ones, and `pathlock` where the server also lets a module add a
/// category. Redis 7.0 has neither API; ACL rules name the commands there
/// (`+pathlock.acquire ...`), and nothing else changes. Both calls are only allowed while the
/// module loads.
fn categorize(ctx: &Context) {
    // SAFETY: the API functions are checked through their Options; the strings are 'static.
    unsafe {
        let (Some(get), Some(set)) = (
            raw::RedisModule_GetCommand,
            raw::RedisModule_SetCommandACLCategories,
        ) else {
            ctx.log_notice(
                "pathlock: this server has no module ACL categories; name the commands in ACL rules",
            );
            return;
        };
        let own = raw::RedisModule_AddACLCategory
            .is_some_and(|add| add(ctx.ctx, c"pathlock".as_ptr()) == raw::REDISMODULE_OK as c_int);
        if !own {
            ctx.log_warning("pathlock: could not add the ACL category pathlock");
        }
        for doc in DOCS {
            let Ok(name) = CString::new(doc.name) else {
                continue;
            };
            let command = get(ctx.ctx, name.as_ptr());
            if command.is_null() {
                continue;
            }
            let usual = doc.categories.to_string_lossy();
            let wanted = if own && doc.in_pathlock {
                format!("{usual} pathlock")
            } else {
                usual.into_owned()
            };
            let Ok(wanted) = CString::new(wanted) else {
                continue;
            };
            if set(command, wanted.as_ptr()) != raw::REDISMODULE_OK as c_int {
                ctx.log_warning(&format!(
                    "pathlock: could not put {} in the ACL categories {}",
                    doc.name,
                    wanted.to_string_lossy()
                ));
            }
        }
    }
}

/// Sets the command docs and key specs where the server supports it (Redis 7.0 and later);
/// elsewhere the commands work without them, with the key position given at registration.
pub fn register(ctx: &Context) {
    categorize(ctx);
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
        let since = c"1.0.0";
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
            let args = (doc.args)();
            let mut keep = Vec::new();
            let raw_args = raw_args(&args, &mut keep);
            let mut specs = key_specs(doc.key_flags);
            let info = raw::RedisModuleCommandInfo {
                version: &version,
                summary: summary.as_ptr(),
                complexity: complexity.as_ptr(),
                since: since.as_ptr(),
                history: std::ptr::null_mut(),
                tips: std::ptr::null(),
                arity: doc.arity,
                key_specs: specs.as_mut_ptr(),
                args: raw_args,
            };
            if set(command, &info) != raw::REDISMODULE_OK as c_int {
                ctx.log_warning(&format!("pathlock: could not set the docs of {}", doc.name));
            }
        }
    }
}
