//! The commands, each declared once in one table, and their handlers.
//!
//! [`COMMANDS`] holds each command's name, handler, flags, arity, key positions and key spec, ACL
//! categories and `COMMAND DOCS`, and everything else is derived from it: the registration
//! (`register`), what the server is told of each (`describe`, through `command_docs`), the
//! arity every call is held to before its handler runs, and the fuzz harness's commands.
//!
//! Level 8: imports `args`, `change`, `clock`, `command_docs`, `contain`, `context`, `effects`,
//! `errors`, `eviction`, `fences`, `grants`, `registry`, `reply`, `stats`, `store`, `waits`.
//! Registered by `lib.rs`; run by Redis through `dispatch`, and by the harness through
//! `run_in_memory`.
//!
//! Each handler (one file each) parses its arguments (`args`), calls the engine
//! (`pathlock_core`) through `change::change_existing` or `change_or_create` (writes) or the
//! store's `read`, replies, and replicates
//! counts and notifies what changed. Nothing is decided here. A handler is generic over [`Call`], the
//! storage seam (`store::Store`) plus what only a client's command does (reply, block, pass
//! itself on): Redis runs it on `store::ServerKey`, the harness on `store::MemoryKey`.
//!
//! To add a command: write its handler in a file of its own, add a row at the end of
//! [`COMMANDS`] (the fuzz corpus names commands by their row) and an entry point at the end of
//! `ENTRY_POINTS`; `tests/command_docs.rs` and `tests/acl.rs` check what the server then says of it.

mod acquire;
mod check;
mod effect;
mod locks;
mod release;
mod renew;
mod waiters;

use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr::NonNull;

use pathlock_core::{Project, Token, Waiter};
use redis_module::{raw, Context, RedisError, RedisResult, RedisString, RedisValue, Status};

use crate::command_docs::{
    arg, Arg, Docs, Keys, BLOCK, INTEGER, KEY, ONEOF, PURE_TOKEN, RO_ACCESS, RW_DELETE, RW_UPDATE,
    STRING,
};
use crate::contain::contained;
use crate::context::{may_block, remembering_flags};
use crate::errors::{for_redis_module, ERR_PANIC};
use crate::store::{ServerKey, Store};
use crate::{command_docs, effects, reply, waits};

/// One command, declared once.
pub struct Command {
    pub name: &'static CStr,
    pub handler: Handler,
    /// Its flags for `RedisModule_CreateCommand` (`write`, `readonly`, `deny-oom`, ...).
    pub flags: &'static CStr,
    /// Redis's arity: exactly `arity` arguments, the name included, or at least `-arity` when
    /// negative. [`Command::accepted`] adds the most, where no argument repeats.
    pub arity: c_int,
    pub keys: Keys,
    /// The key spec's flags: how the command uses its key, for ACL key patterns.
    pub key_access: u32,
    /// The ACL categories; `pathlock` is left out on a server that does not let a module add a
    /// category.
    pub acl: &'static CStr,
    pub docs: Docs,
}

/// A handler, as Redis runs it and as the harness runs it: the same generic function.
pub struct Handler {
    pub redis: fn(&ServerKey, &[&[u8]]) -> RedisResult,
    #[cfg(any(test, feature = "system-alloc"))]
    pub memory: fn(&crate::store::MemoryKey, &[&[u8]]) -> RedisResult,
}

/// The [`Handler`] of a generic handler function. A handler sees every argument as bytes, the
/// command's name and the key included, so `words.len()` is Redis's argc.
macro_rules! handler {
    ($run:path) => {
        Handler {
            redis: |call, words| $run(call, words),
            #[cfg(any(test, feature = "system-alloc"))]
            memory: |call, words| $run(call, words),
        }
    };
}

/// The one key of every command, at argument 1.
const KEY_AT_1: Keys = Keys {
    first: 1,
    last: 1,
    step: 1,
};

/// `mode path [mode path ...]`, the requests of `ACQUIRE` and `CHECK`.
const REQUESTS: Arg = arg(c"request", BLOCK).multiple().of(&[
    arg(c"mode", ONEOF).of(&[
        arg(c"read", PURE_TOKEN).token(c"READ"),
        arg(c"write", PURE_TOKEN).token(c"WRITE"),
    ]),
    arg(c"path", STRING),
]);

/// Every command. The order is the fuzz corpus's: a record's first byte names a row, so a new
/// command goes at the end.
pub const COMMANDS: [Command; 7] = [
    Command {
        name: c"PATHLOCK.ACQUIRE",
        handler: handler!(acquire::acquire),
        flags: c"write deny-oom",
        arity: -4,
        keys: KEY_AT_1,
        key_access: RW_UPDATE,
        acl: c"write slow blocking pathlock",
        docs: Docs {
            summary: c"Grants READ or WRITE locks on paths of a project to one owner, all or nothing, optionally waiting for them and keeping a note with them",
            complexity: c"O(D) per path, D being its depth, plus the locks and waiters the owner itself holds beneath it",
            since: c"1.0.0",
            args: &[
                arg(c"key", KEY),
                arg(c"token", STRING).token(c"TOKEN").optional(),
                arg(c"ttl", INTEGER).token(c"TTL").optional(),
                arg(c"wait", INTEGER).token(c"WAIT").optional(),
                arg(c"note", STRING).token(c"NOTE").optional(),
                REQUESTS,
            ],
        },
    },
    Command {
        name: c"PATHLOCK.RELEASE",
        handler: handler!(release::release),
        flags: c"write",
        arity: -3,
        keys: KEY_AT_1,
        key_access: RW_DELETE,
        acl: c"write fast pathlock",
        docs: Docs {
            summary: c"Frees an owner's locks at the given paths, or all of them",
            complexity: c"O(D) per path named, D being its depth; without paths, O(D) per lock for an owner of at most 64 locks and O(1) for a bigger one, whose locks are freed in the background; plus the waiters it wakes",
            since: c"1.0.0",
            args: &[
                arg(c"key", KEY),
                arg(c"token", STRING),
                arg(c"path", STRING).optional().multiple(),
            ],
        },
    },
    Command {
        name: c"PATHLOCK.RENEW",
        handler: handler!(renew::renew),
        flags: c"write",
        arity: 4,
        keys: KEY_AT_1,
        key_access: RW_UPDATE,
        acl: c"write fast pathlock",
        docs: Docs {
            summary: c"Moves the deadline of every live lock of an owner",
            complexity: c"O(1): an owner's locks in a key share one lease",
            since: c"1.0.0",
            args: &[
                arg(c"key", KEY),
                arg(c"token", STRING),
                arg(c"ms", INTEGER),
            ],
        },
    },
    Command {
        name: c"PATHLOCK.LOCKS",
        handler: handler!(locks::locks),
        flags: c"readonly",
        arity: -2,
        keys: KEY_AT_1,
        key_access: RO_ACCESS,
        acl: c"read slow pathlock",
        docs: Docs {
            summary: c"Lists the live locks at or under a path, or only one owner's, in tree order, with their notes",
            complexity: c"O(D + N) where N is the number of locks returned; with TOKEN, O(D x M) where M is the smaller of the owner's locks and the locks under the path",
            since: c"1.0.0",
            args: &[
                arg(c"key", KEY),
                arg(c"path", STRING).optional(),
                arg(c"token", STRING).token(c"TOKEN").optional(),
            ],
        },
    },
    Command {
        name: c"PATHLOCK.CHECK",
        handler: handler!(check::check),
        flags: c"readonly",
        arity: -4,
        keys: KEY_AT_1,
        key_access: RO_ACCESS,
        acl: c"read fast pathlock",
        docs: Docs {
            summary: c"Lists the live locks that would block a request now, without changing anything",
            complexity: c"O(D + N) per path, where N is the number of blocking locks returned",
            since: c"1.0.0",
            args: &[
                arg(c"key", KEY),
                arg(c"token", STRING).token(c"TOKEN").optional(),
                REQUESTS,
            ],
        },
    },
    Command {
        // Replication only: no client needs it, so it is not in the `pathlock` category.
        name: effects::COMMAND,
        handler: handler!(effect::effect),
        flags: c"write",
        arity: -3,
        keys: KEY_AT_1,
        key_access: RW_UPDATE,
        acl: c"write slow",
        docs: Docs {
            summary: c"Internal: applies a master's decision on a replica or during AOF loading; refused from clients",
            complexity: c"O(D) per path",
            since: c"1.0.0",
            args: &[
                arg(c"key", KEY),
                arg(c"effect", STRING),
                arg(c"word", STRING).optional().multiple(),
            ],
        },
    },
    Command {
        name: c"PATHLOCK.WAITERS",
        handler: handler!(waiters::waiters),
        flags: c"readonly",
        arity: -2,
        keys: KEY_AT_1,
        key_access: RO_ACCESS,
        acl: c"read slow pathlock",
        docs: Docs {
            summary: c"Lists the requests waiting (ACQUIRE ... WAIT) for paths at or under a path, in queue order, with how long each has waited and has left, and its note",
            complexity: c"O(D + N log W) where N is the number of waiters returned and W the number waiting on the key",
            since: c"1.0.0",
            args: &[arg(c"key", KEY), arg(c"path", STRING).optional()],
        },
    },
];

impl Command {
    /// Where a panic of its handler is said to have happened, in the server's log: its name.
    pub const fn place(&self) -> &'static str {
        match self.name.to_str() {
            Ok(name) => name,
            Err(_) => "a command",
        }
    }

    /// The argument counts the command accepts, its name included, as `(least, most)`: Redis's
    /// arity, and at most what its arguments add up to when none of them repeats.
    pub const fn accepted(&self) -> (usize, usize) {
        let least = self.arity.unsigned_abs() as usize;
        if self.arity >= 0 {
            return (least, least);
        }
        match command_docs::most_words(self.docs.args) {
            Some(most) => (least, most + 1),
            None => (least, usize::MAX),
        }
    }
}

/// What a handler needs beyond the storage seam, for a client's command only.
pub trait Call: Store {
    /// Whether the command may block its client (`context::may_block`).
    fn may_block(&self) -> bool;
    /// Blocks the client until `waiter` is granted or `timeout_ms` passes, and queues it in
    /// `project`; false when the client cannot be blocked.
    fn block(&self, project: &mut Project, waiter: Waiter, timeout_ms: u64) -> bool;
    /// Answers a grant, `[token, fence]`, and returns what the handler passes on.
    fn reply_grant(&self, token: &Token, fence: u64) -> RedisValue;
    /// Sends the command, as it came, to replicas and the AOF.
    fn replicate_verbatim(&self);
}

impl Call for ServerKey<'_> {
    #[inline]
    fn may_block(&self) -> bool {
        may_block(self.ctx)
    }

    fn block(&self, project: &mut Project, waiter: Waiter, timeout_ms: u64) -> bool {
        waits::block(self.ctx, self.key, project, waiter, timeout_ms)
    }

    #[inline]
    fn reply_grant(&self, token: &Token, fence: u64) -> RedisValue {
        reply::send_grant(self.ctx, token, fence)
    }

    fn replicate_verbatim(&self) {
        self.ctx.replicate_verbatim();
    }
}

/// Nobody waits without a server: the harness's commands never block, and a grant is the
/// reply's value.
#[cfg(any(test, feature = "system-alloc"))]
impl Call for crate::store::MemoryKey<'_> {
    fn may_block(&self) -> bool {
        false
    }

    fn block(&self, _project: &mut Project, _waiter: Waiter, _timeout_ms: u64) -> bool {
        false
    }

    fn reply_grant(&self, token: &Token, fence: u64) -> RedisValue {
        reply::grant(token, fence)
    }

    fn replicate_verbatim(&self) {}
}

type RawCommand =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// The function Redis calls for the command in row `I` of [`COMMANDS`]: its arity and handler
/// are constants here, so the call is as direct as a function written for the one command.
extern "C" fn entry_point<const I: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    dispatch(
        ctx,
        argv,
        argc,
        const { COMMANDS[I].accepted() },
        const { COMMANDS[I].place() },
        const { COMMANDS[I].handler.redis },
    )
}

/// One entry point per row of [`COMMANDS`], in its order.
const ENTRY_POINTS: [RawCommand; COMMANDS.len()] = [
    entry_point::<0>,
    entry_point::<1>,
    entry_point::<2>,
    entry_point::<3>,
    entry_point::<4>,
    entry_point::<5>,
    entry_point::<6>,
];

/// Creates the commands; `describe` tells the server about them afterwards.
pub fn register(ctx: &Context) -> Status {
    for (command, entry) in COMMANDS.iter().zip(ENTRY_POINTS) {
        // SAFETY: the name and flags are NUL-terminated literals and the function lives as long
        // as the module; Redis copies the strings.
        let created = unsafe {
            raw::RedisModule_CreateCommand.map(|create| {
                create(
                    ctx.ctx,
                    command.name.as_ptr(),
                    Some(entry),
                    command.flags.as_ptr(),
                    command.keys.first,
                    command.keys.last,
                    command.keys.step,
                )
            })
        };
        if created != Some(raw::Status::Ok as c_int) {
            return Status::Err;
        }
    }
    Status::Ok
}

/// Puts the commands in their ACL categories, then sets their docs, arity and key spec, where
/// the server supports each.
pub fn describe(ctx: &Context) {
    command_docs::categorize(ctx, COMMANDS.iter().map(|c| (c.name, c.acl)));
    for c in &COMMANDS {
        command_docs::describe(ctx, c.name, c.arity, c.keys, c.key_access, &c.docs);
    }
}

/// Whether `argc` arguments are within `(least, most)`.
fn accepts((least, most): (usize, usize), argc: usize) -> bool {
    (least..=most).contains(&argc)
}

/// Runs a handler for Redis. The arguments are read in place: redis-module's own dispatch
/// copies them into a vector of retained strings, which cost a twentieth of an `ACQUIRE`. The
/// handler runs through [`handled`], and whatever it answers is made safe for redis-module to
/// write (`errors::for_redis_module`).
#[inline(always)]
fn dispatch(
    raw_ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    accepted: (usize, usize),
    place: &'static str,
    handler: fn(&ServerKey, &[&[u8]]) -> RedisResult,
) -> c_int {
    let ctx = Context::new(raw_ctx);
    let count = usize::try_from(argc).unwrap_or(0);
    let argv: &[*mut raw::RedisModuleString] = if argv.is_null() || count == 0 {
        &[]
    } else {
        // SAFETY: Redis passes `argc` valid strings that live for the whole call.
        unsafe { std::slice::from_raw_parts(argv, count) }
    };
    let result = match argv.get(1) {
        Some(&key) if accepts(accepted, argv.len()) => {
            let key = RedisString::new(NonNull::new(raw_ctx), key);
            remembering_flags(&ctx, || {
                handled(place, || {
                    with_words(argv, |words| handler(&ServerKey::new(&ctx, &key), words))
                })
            })
        }
        _ => Err(RedisError::WrongArity),
    };
    ctx.reply(for_redis_module(result)) as c_int
}

/// Runs a handler through `contain`: a panic becomes the error reply `ERR_PANIC` and one warning
/// in the server's log naming the command, since unwinding out of the `extern "C"` function
/// that Redis calls would abort the whole server.
#[inline(always)]
fn handled(place: &'static str, handler: impl FnOnce() -> RedisResult) -> RedisResult {
    contained(place, Err(RedisError::Str(ERR_PANIC)), handler)
}

/// Runs a command on projects in memory, as [`dispatch`] runs it for Redis: its arity, its
/// handler, and the reply made safe for redis-module to write. For the fuzz harness, which
/// must see a handler's panic, so it is not contained here.
#[cfg(any(test, feature = "system-alloc"))]
pub fn run_in_memory(
    command: &Command,
    memory: &crate::store::MemoryKey,
    words: &[&[u8]],
) -> RedisResult {
    let result = if accepts(command.accepted(), words.len()) {
        (command.handler.memory)(memory, words)
    } else {
        Err(RedisError::WrongArity)
    };
    for_redis_module(result)
}

/// The bytes of one argument. Inlined: it runs once per argument of every command, and once
/// dispatch went through `contain` the compiler made it a call of its own, which cost a RENEW
/// some 24 instructions (callgrind).
#[inline(always)]
fn bytes<'a>(arg: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0;
    // SAFETY: `arg` is one of the command's arguments, alive for the whole call; the bytes are
    // only borrowed within it.
    unsafe {
        match raw::RedisModule_StringPtrLen {
            Some(ptr_len) => {
                let ptr = ptr_len(arg, &mut len);
                if ptr.is_null() {
                    &[]
                } else {
                    std::slice::from_raw_parts(ptr.cast::<u8>(), len)
                }
            }
            None => &[],
        }
    }
}

/// Runs `parse` on the arguments' bytes. Up to `ON_STACK` of them are gathered on the stack,
/// which spares an allocation on every call of the common commands; more take a vector.
fn with_words<R>(argv: &[*mut raw::RedisModuleString], parse: impl FnOnce(&[&[u8]]) -> R) -> R {
    const ON_STACK: usize = 16;
    if argv.len() <= ON_STACK {
        let mut words: [&[u8]; ON_STACK] = [&[]; ON_STACK];
        for (word, &arg) in words.iter_mut().zip(argv) {
            *word = bytes(arg);
        }
        parse(&words[..argv.len()])
    } else {
        let words: Vec<&[u8]> = argv.iter().map(|&arg| bytes(arg)).collect();
        parse(&words)
    }
}

#[cfg(test)]
mod tests {
    use redis_module::RedisError;

    use super::{handled, COMMANDS};
    use crate::contain::take_warnings;
    use crate::errors::ERR_PANIC;

    /// What `dispatch` makes of a handler that panics: the client is answered `ERR_PANIC` and the
    /// server's log has one warning naming the command.
    #[test]
    fn a_handler_that_panics_is_answered_an_internal_error_and_logged_once() {
        take_warnings();
        let acquire = &COMMANDS[0];
        let reply = handled(acquire.place(), || panic!("a handler's bug"));
        assert!(
            matches!(reply, Err(RedisError::Str(message)) if message == ERR_PANIC),
            "{reply:?}"
        );
        assert_eq!(
            take_warnings(),
            ["pathlock: internal error contained in PATHLOCK.ACQUIRE; see the panic message on stderr"]
        );
    }

    /// What each command accepts, from its arity and its arguments: what the handlers checked
    /// one by one before the table.
    #[test]
    fn the_arity_of_each_command_follows_from_its_row() {
        let accepted: Vec<(&str, (usize, usize))> = COMMANDS
            .iter()
            .map(|c| (c.name.to_str().unwrap_or("?"), c.accepted()))
            .collect();
        let any = usize::MAX;
        assert_eq!(
            accepted,
            [
                ("PATHLOCK.ACQUIRE", (4, any)),
                ("PATHLOCK.RELEASE", (3, any)),
                ("PATHLOCK.RENEW", (4, 4)),
                ("PATHLOCK.LOCKS", (2, 5)),
                ("PATHLOCK.CHECK", (4, any)),
                ("PATHLOCK.EFFECT", (3, any)),
                ("PATHLOCK.WAITERS", (2, 3)),
            ]
        );
    }
}
