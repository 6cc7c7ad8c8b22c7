//! The command handlers. Each one parses its arguments (`args.rs`), calls the engine
//! (`pathlock_core`) through `change` (writes) or `store::read` (reads), replies, and
//! replicates and announces what changed. Nothing is decided here.
//!
//! Level 6: may import anything below. Registered by `lib.rs`.

mod acquire;
mod check;
mod effect;
mod locks;
mod release;
mod renew;
mod waiters;

pub use acquire::acquire;
pub use check::check;
pub use effect::effect;
pub use locks::locks;
pub use release::release;
pub use renew::renew;
pub use waiters::waiters;

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use redis_module::{raw, Context, RedisError, RedisResult, RedisString, Status};

use crate::context::remembering_flags;
use crate::effects;
use crate::errors::ERR_PANIC;
use crate::reply;

/// A handler sees the key as a RedisString (to open it, replicate and announce) and every
/// argument as bytes, the command's name and the key included, so `words.len()` is Redis's argc.
type Handler = fn(&Context, &RedisString, &[&[u8]]) -> RedisResult;

type RawCommand =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// The function Redis calls for one command: a thin `extern "C"` shim around `dispatch`.
macro_rules! raw_command {
    ($handler:ident) => {{
        extern "C" fn command(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            dispatch(ctx, argv, argc, $handler)
        }
        command
    }};
}

/// The commands: name, handler, flags. Every one takes its key at argument 1.
const COMMANDS: [(&std::ffi::CStr, RawCommand, &std::ffi::CStr); 7] = [
    (
        c"PATHLOCK.ACQUIRE",
        raw_command!(acquire),
        c"write deny-oom",
    ),
    (c"PATHLOCK.RELEASE", raw_command!(release), c"write"),
    (c"PATHLOCK.RENEW", raw_command!(renew), c"write"),
    (c"PATHLOCK.LOCKS", raw_command!(locks), c"readonly"),
    (c"PATHLOCK.CHECK", raw_command!(check), c"readonly"),
    (c"PATHLOCK.WAITERS", raw_command!(waiters), c"readonly"),
    (effects::COMMAND, raw_command!(effect), c"write"),
];

/// Creates the commands; `docs` describes them afterwards.
pub fn register(ctx: &Context) -> Status {
    for (name, command, flags) in COMMANDS {
        // SAFETY: the name and flags are NUL-terminated literals and the function lives as long
        // as the module; Redis copies the strings.
        let created = unsafe {
            raw::RedisModule_CreateCommand.map(|create| {
                create(
                    ctx.ctx,
                    name.as_ptr(),
                    Some(command),
                    flags.as_ptr(),
                    1,
                    1,
                    1,
                )
            })
        };
        if created != Some(raw::Status::Ok as c_int) {
            return Status::Err;
        }
    }
    Status::Ok
}

/// Runs a handler for Redis. The arguments are read in place: redis-module's own dispatch
/// copies them into a vector of retained strings, which cost a twentieth of an `ACQUIRE`. A
/// panic becomes an error reply (unwinding out of the `extern "C"` function that Redis calls
/// would abort the whole server), and whatever the handler answers is made safe for
/// redis-module to write (`reply::safe`).
fn dispatch(
    raw_ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
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
        None => Err(RedisError::WrongArity),
        Some(&key) => {
            let key = RedisString::new(NonNull::new(raw_ctx), key);
            remembering_flags(&ctx, || {
                catch_unwind(AssertUnwindSafe(|| {
                    with_words(argv, |words| handler(&ctx, &key, words))
                }))
                .unwrap_or_else(|_| Err(RedisError::Str(ERR_PANIC)))
            })
        }
    };
    ctx.reply(reply::safe(result)) as c_int
}

/// The bytes of one argument.
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
