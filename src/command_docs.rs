//! What the server is told of a command besides its registration: its `COMMAND DOCS`, arity, key
//! spec and ACL categories, in the server's form.
//!
//! The argument tree of `COMMAND DOCS` makes `redis-cli` show hints; Redis enforces the arity.
//! The table in `commands/mod.rs` declares all of it, command by command, with the types and
//! builders of this file ([`Arg`], [`Docs`], [`Keys`]); `commands::describe` hands each
//! command's declaration to [`describe`] and [`categorize`] while the module loads.
//!
//! The key spec is what ACL key patterns are checked against: `LOCKS`, `CHECK` and `WAITERS`
//! only read their key ([`RO_ACCESS`]), so a user with `%R~proj:*` may run them; the writing
//! commands read and change it ([`RW_UPDATE`], or [`RW_DELETE`] for `RELEASE`), so they need
//! write permission on the key too.
//!
//! Level 0: imports nothing of the crate. Used by `commands` (the table, and describing it at
//! load).

use std::ffi::{CStr, CString};
use std::os::raw::c_int;

use redis_module::{raw, Context};

/// The key's position in the arguments (the command's name is argument 0): where the first key
/// is, the last, and the step between keys, as `RedisModule_CreateCommand` takes them; the key
/// spec of `COMMAND INFO` says the same.
#[derive(Clone, Copy)]
pub struct Keys {
    pub first: c_int,
    pub last: c_int,
    pub step: c_int,
}

/// The key spec's flags (`REDISMODULE_CMD_KEY_*`) of a command that only reads its key.
pub const RO_ACCESS: u32 = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;
/// Of a command that reads and changes its key.
pub const RW_UPDATE: u32 =
    raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE;
/// Of a command that reads its key and may delete what it holds.
pub const RW_DELETE: u32 =
    raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_DELETE;

/// What `COMMAND DOCS` says of a command besides its name, arity and key spec.
pub struct Docs {
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    /// The version of the module that introduced the command.
    pub since: &'static CStr,
    /// The arguments after the command's name, the key included.
    pub args: &'static [Arg],
}

/// One argument as `COMMAND DOCS` shows it. Every string is a `'static` C string literal, so
/// the pointers handed to the server stay valid; the server copies what it keeps.
pub struct Arg {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&'static CStr>,
    flags: u32,
    subargs: &'static [Arg],
}

/// An argument named `name` of type `kind` ([`KEY`], [`STRING`], ...), required, given once.
pub const fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        flags: raw::REDISMODULE_CMD_ARG_NONE,
        subargs: &[],
    }
}

impl Arg {
    /// Preceded by the word `token` (`TOKEN t`, `TTL ms`); for a [`PURE_TOKEN`], the word itself.
    pub const fn token(mut self, token: &'static CStr) -> Arg {
        self.token = Some(token);
        self
    }

    pub const fn optional(mut self) -> Arg {
        self.flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
        self
    }

    pub const fn multiple(mut self) -> Arg {
        self.flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
        self
    }

    /// The parts of a [`ONEOF`] (one of them) or a [`BLOCK`] (all of them, in order).
    pub const fn of(mut self, subargs: &'static [Arg]) -> Arg {
        self.subargs = subargs;
        self
    }

    /// The most words the argument takes, or `None` when it may repeat.
    const fn most_words(&self) -> Option<usize> {
        if self.flags & raw::REDISMODULE_CMD_ARG_MULTIPLE != 0 {
            return None;
        }
        let token = if self.token.is_some() { 1 } else { 0 };
        let value = if self.kind == PURE_TOKEN {
            Some(0)
        } else if self.kind == ONEOF {
            let mut most = 0;
            let mut i = 0;
            while i < self.subargs.len() {
                match self.subargs[i].most_words() {
                    Some(words) if words > most => most = words,
                    Some(_) => {}
                    None => return None,
                }
                i += 1;
            }
            Some(most)
        } else if self.kind == BLOCK {
            most_words(self.subargs)
        } else {
            Some(1)
        };
        match value {
            Some(words) => Some(token + words),
            None => None,
        }
    }
}

/// The most words a list of arguments takes, or `None` when one of them may repeat: what bounds
/// the arity of a command whose arguments are all optional or fixed (`LOCKS`, `WAITERS`).
pub const fn most_words(args: &[Arg]) -> Option<usize> {
    let mut total = 0;
    let mut i = 0;
    while i < args.len() {
        match args[i].most_words() {
            Some(words) => total += words,
            None => return None,
        }
        i += 1;
    }
    Some(total)
}

pub const KEY: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
pub const STRING: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
pub const INTEGER: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
pub const PURE_TOKEN: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN;
pub const ONEOF: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF;
pub const BLOCK: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK;

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
                raw_args(a.subargs, keep)
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

/// The one key spec: the keys at `keys`, with the command's access flags; then the all-zero
/// terminator.
fn key_specs(keys: Keys, flags: u32) -> Vec<raw::RedisModuleCommandKeySpec> {
    // SAFETY: an all-zero key spec (begin search type INVALID) is the terminator; the first
    // entry is filled in below with plain numbers.
    let mut spec: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    spec.flags = u64::from(flags);
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index.pos = keys.first;
    spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    // The last key relative to the first.
    spec.fk.range.lastkey = keys.last - keys.first;
    spec.fk.range.keystep = keys.step;
    spec.fk.range.limit = 0;
    vec![spec, unsafe { std::mem::zeroed() }]
}

/// Puts each command in its ACL categories where the server lets modules do so (Redis 7.2+,
/// Valkey 8+), given as `(name, categories)`. The category `pathlock` is created first; where
/// the server does not let a module add one, the commands go in the usual categories only. Redis
/// 7.0 has neither API; ACL rules name the commands there (`+pathlock.acquire ...`), and nothing
/// else changes. Both calls are only allowed while the module loads.
pub fn categorize<'a>(ctx: &Context, commands: impl Iterator<Item = (&'a CStr, &'a CStr)>) {
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
        for (name, categories) in commands {
            let command = get(ctx.ctx, name.as_ptr());
            if command.is_null() {
                continue;
            }
            let wanted = categories
                .to_string_lossy()
                .split_whitespace()
                .filter(|category| own || *category != "pathlock")
                .collect::<Vec<_>>()
                .join(" ");
            let Ok(wanted) = CString::new(wanted) else {
                continue;
            };
            if set(command, wanted.as_ptr()) != raw::REDISMODULE_OK as c_int {
                ctx.log_warning(&format!(
                    "pathlock: could not put {} in the ACL categories {}",
                    name.to_string_lossy(),
                    wanted.to_string_lossy()
                ));
            }
        }
    }
}

/// Sets a command's docs, arity and key spec where the server supports it (Redis 7.0 and
/// later); elsewhere the command works without them, with the key position given at
/// registration.
pub fn describe(ctx: &Context, name: &CStr, arity: c_int, keys: Keys, key_flags: u32, docs: &Docs) {
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
        let command = get(ctx.ctx, name.as_ptr());
        if command.is_null() {
            return;
        }
        let mut keep = Vec::new();
        let raw_args = raw_args(docs.args, &mut keep);
        let mut specs = key_specs(keys, key_flags);
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: docs.summary.as_ptr(),
            complexity: docs.complexity.as_ptr(),
            since: docs.since.as_ptr(),
            history: std::ptr::null_mut(),
            tips: std::ptr::null(),
            arity,
            key_specs: specs.as_mut_ptr(),
            args: raw_args,
        };
        if set(command, &info) != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!(
                "pathlock: could not set the docs of {}",
                name.to_string_lossy()
            ));
        }
    }
}
