//! The `path-lock` key type: how Redis stores, loads and frees a project's lock table.
//!
//! Level 3: imports `clock`, `config`, `contain`, `defrag`, `errors`, `eviction`, `fences`,
//! `move_db_workaround`, `registry`, `schedule`, `stats`. Its callbacks are called by Redis;
//! `store` uses its type handle. A value leaving its key only queues a signal in `registry`; it
//! never calls into the waiting machinery.
//!
//! The RDB encoding, version [`ENCODING_VERSION`], is `pathlock_core::persist`'s: this file
//! only carries its items through `RedisModule_Save*`/`Load*`, so the checks that refuse a
//! corrupt payload live in the engine, where they are unit-tested and fuzzed without Redis. The
//! one rule it adds is the module's: a value's fence counter, and the fence mark in the aux
//! data, must be possible by this server's clock (`fences::admissible` for a client's `RESTORE`
//! on a master, `fences::ceiling` for the rest), or the value (or the whole file, for the mark)
//! is refused, unless the operator asked to lower them while loading
//! (`pathlock.lower-impossible-fences`).

use std::os::raw::{c_char, c_int, c_longlong, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use pathlock_core::{persist, LockTable, Mode, Project};
use redis_module::{logging, native_types::RedisType, raw};

use crate::contain::contained;
use crate::errors::{for_log, HINT_LOWER_IMPOSSIBLE_FENCES};
use crate::{
    clock, config, defrag, eviction, fences, move_db_workaround, registry, schedule, stats,
};

/// The encoding version: `persist::VERSION`, whose layout is `persist`'s. Raise it when the
/// layout changes, and keep reading the older versions (version 1, without notes, still loads);
/// a version newer than this one is refused.
pub const ENCODING_VERSION: i32 = persist::VERSION as i32;

pub static PATHLOCK_TYPE: RedisType = RedisType::new(
    "path-lock",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::Aux::Before as i32,
        free_effort: Some(free_effort),
        unlink: Some(unlink),
        copy: Some(copy),
        defrag: Some(defrag::defrag),
        mem_usage2: Some(mem_usage2),
        free_effort2: None,
        unlink2: None,
        copy2: Some(copy2),
        aux_save2: None,
    },
);

/// # Safety
/// Redis passes a value that `set_value` or `into_value` created from a `Box<Project>`.
unsafe fn project<'a>(value: *const c_void) -> &'a Project {
    &*value.cast::<Project>()
}

/// # Safety
/// As `project`.
unsafe fn table<'a>(value: *const c_void) -> &'a LockTable {
    project(value).locks()
}

/// Hands a project to Redis, counting it in the INFO gauges until `free` takes it back.
fn into_value(project: Project) -> *mut c_void {
    fences::observe(project.locks().next_fence());
    stats::track(&stats::KEYS, 0, 1);
    stats::track(&stats::LOCKS_HELD, 0, project.locks().len());
    stats::track(&stats::LOCKS_FREEING, 0, project.locks().freeing());
    Box::into_raw(Box::new(project)).cast::<c_void>()
}

/// Runs in the server's lazy-free thread for large values (on Valkey 8 and later for a plain
/// `DEL` too), so it touches nothing but the table and the atomic gauges, which drop here, when
/// the memory goes, and not when the key leaves the keyspace (see `stats`). A project made by
/// `COPY` shares storage with its source; the engine holds shared storage behind `Arc`s, so
/// freeing one side here while the main thread uses the other only drops reference counts,
/// and whichever side lets go last frees the storage.
extern "C" fn free(value: *mut c_void) {
    contained("free", (), || {
        if !value.is_null() {
            // SAFETY: the value was created by `Box::new` in `into_value` or `set_value`.
            let project = unsafe { Box::from_raw(value.cast::<Project>()) };
            stats::track(&stats::KEYS, 1, 0);
            stats::track(&stats::LOCKS_HELD, project.locks().len(), 0);
            stats::track(&stats::LOCKS_FREEING, project.locks().freeing(), 0);
        }
    })
}

/// The bytes of a key name the server passes to a callback, if it passes one.
///
/// # Safety
/// `key` is null or a live `RedisModuleString`; the bytes live as long as it does.
unsafe fn name_of<'a>(key: *mut raw::RedisModuleString) -> Option<&'a [u8]> {
    if key.is_null() {
        return None;
    }
    let mut len = 0;
    let name = raw::RedisModule_StringPtrLen.map(|f| f(key, &mut len))?;
    (!name.is_null()).then(|| std::slice::from_raw_parts(name.cast::<u8>(), len))
}

/// The value is leaving its key (`DEL`, `UNLINK`, an overwrite, `RENAME`, `MOVE`, `MIGRATE`, an
/// eviction, the module's own deletion of an empty project): its entry leaves the expiry
/// schedule at once (a value that arrives under another name is scheduled again by the event
/// that announces it), and its waiters are only signalled to the registry, whose worker decides
/// what they are answered.
extern "C" fn unlink(key: *mut raw::RedisModuleString, value: *const c_void) {
    // Inside the expiry cycle's deletion of a key, this is the module's work within the server's
    // call (`stats::own`).
    contained("unlink", (), || stats::own(|| unlink_value(key, value)))
}

/// What `unlink` does.
fn unlink_value(key: *mut raw::RedisModuleString, value: *const c_void) {
    // SAFETY: see `project`; called on the main thread before the value is freed.
    let project = unsafe { project(value) };
    schedule::unscheduled(project);
    // SAFETY: the server passes the key's live name.
    let name = unsafe { name_of(key) };
    // An eviction is told apart by the `evicted` event that follows (`eviction`).
    if let Some(name) = name {
        eviction::leaving(name, project.locks().len());
    }
    // The requests are copied: a value that was deleted is freed after this, and its
    // waiters start over on the key name with them (see `registry`).
    let waiters = registry::requests_of(project);
    registry::unlinked(waiters, value as usize, name.unwrap_or_default());
}

/// `COPY`: a new project that shares the source's storage (`Project::copy`), which costs a step
/// per chunk of storage rather than one per lock, so no size of project makes it pause the
/// server; each side's first write to a shared chunk copies that chunk alone.
extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    contained("copy", std::ptr::null_mut(), || {
        // SAFETY: see `project`. The pointer is the `Box<Project>` made mutable by `into_value`,
        // passed as const only because the server does not change it; no other reference to
        // the project is alive while the server runs this callback on its main thread. The
        // copy needs `&mut` to mark the source's storage as shared with the copy.
        let source = unsafe { &mut *value.cast_mut().cast::<Project>() };
        // A copy carries the locks, not the waiters, and costs a step per chunk of storage.
        into_value(source.copy())
    })
}

/// `COPY` calls this rather than `copy` where the server has it (Redis 7.0, Valkey): the same
/// copy, and the source database for `move_db_workaround`.
extern "C" fn copy2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) -> *mut c_void {
    // SAFETY: the server passes the live key context of this COPY.
    if let Some(from_db) = unsafe { raw::RedisModule_GetDbIdFromOptCtx } {
        move_db_workaround::copying_from(unsafe { from_db(ctx) });
    }
    copy(std::ptr::null_mut(), std::ptr::null_mut(), value)
}

/// What a key holding a project costs the server, for `MEMORY USAGE`: the project's own
/// estimate (`Project::memory_estimate`, rounded as the allocator rounds), its entry in the
/// expiry schedule while it has one (its tag names it), and what the server keeps for the key beside the value
/// that `MEMORY USAGE` leaves out for a module type (`SERVER_OVERHEAD`); the server adds the
/// key's name and its entry. The estimate depends only on what the project holds: a project and
/// its `COPY` each report their whole size, as copies of Redis's own types do, although they
/// share storage until they write to it (`used_memory` shows what is shared).
fn usage(project: &Project, name_len: usize) -> usize {
    let scheduled = match SCHEDULED.get() {
        Some(bytes_per_key) if project.tag() != 0 => bytes_per_key(name_len),
        _ => 0,
    };
    project.memory_estimate() + scheduled + SERVER_OVERHEAD.load(Ordering::Relaxed)
}

/// What the expiry schedule keeps for a key with an entry, by the length of its name: the
/// schedule's own count (`schedule::bytes_per_key`), handed over at load by `lib.rs`, since the
/// schedule lies at this file's level.
static SCHEDULED: OnceLock<fn(usize) -> usize> = OnceLock::new();

pub fn count_schedule_with(bytes_per_key: fn(usize) -> usize) {
    let _ = SCHEDULED.set(bytes_per_key);
}

/// `MEMORY USAGE` where the server does not give the key's name (`mem_usage2` is called where
/// it is): a name of 16 bytes is assumed.
extern "C" fn mem_usage(value: *const c_void) -> usize {
    contained("mem_usage", 0, || {
        // SAFETY: see `project`.
        usage(unsafe { project(value) }, 16)
    })
}

/// `MEMORY USAGE` with the key at hand, whose name's length the schedule's entry depends on.
extern "C" fn mem_usage2(
    ctx: *mut raw::RedisModuleKeyOptCtx,
    value: *const c_void,
    _sample_size: usize,
) -> usize {
    contained("mem_usage2", 0, || {
        // SAFETY: the server passes the live key context of this call, whose name lives as long.
        let name = unsafe {
            raw::RedisModule_GetKeyNameFromOptCtx
                .map(|f| f(ctx))
                .and_then(|name| name_of(name.cast_mut()))
        };
        // SAFETY: see `project`.
        usage(unsafe { project(value) }, name.map_or(16, <[u8]>::len))
    })
}

/// What the server keeps for a key beside its value that `MEMORY USAGE` leaves out for a module
/// type, in bytes: the value's object and module-value wrapper, the key's share of the
/// keyspace's table, and the rounding of its entry. The server's own layout, so measured per
/// server by `make bench-projects` (its memory section, "an empty project") and set at load by
/// [`learn_server`]: Redis 7.0 and 7.2 keep a `robj` (16), a `moduleValue` (16), a dict entry
/// counted as 24 bytes in a 32-byte allocation and 8 to 16 bytes of buckets per key; Redis 8.0
/// counts its entry exactly; Redis 8.2 keeps the key inside its object; Valkey 8 and 9 keep the
/// key inside the object too and index it from buckets of seven entries.
static SERVER_OVERHEAD: AtomicUsize = AtomicUsize::new(REDIS_7_OVERHEAD);

const REDIS_7_OVERHEAD: usize = 52;
const REDIS_8_0_OVERHEAD: usize = 44;
const REDIS_8_2_OVERHEAD: usize = 33;
const VALKEY_OVERHEAD: usize = 40;

/// Learns at load what the estimates need from the server: its allocator's size classes (what
/// it hands out for each small request, `pathlock_core::alloc`), and its keyspace's overhead per
/// key (`SERVER_OVERHEAD`), by its name and version.
pub fn learn_server(ctx: &redis_module::Context) {
    // SAFETY: each probe is a module allocation, measured and given back at once.
    unsafe {
        if let (Some(alloc), Some(size), Some(free)) = (
            raw::RedisModule_Alloc,
            raw::RedisModule_MallocSize,
            raw::RedisModule_Free,
        ) {
            pathlock_core::alloc::learn_size_classes(|bytes| {
                let block = alloc(bytes);
                let usable = size(block);
                free(block);
                usable
            });
        }
    }
    let info = ctx.server_info("server");
    let valkey = info
        .field("server_name")
        .is_some_and(|name| name.to_string_lossy().eq_ignore_ascii_case("valkey"));
    // SAFETY: reads the server's version, a constant.
    let version = unsafe { raw::RedisModule_GetServerVersion.map_or(0, |f| f()) };
    let overhead = match (valkey, version) {
        (true, _) => VALKEY_OVERHEAD,
        (false, v) if v >= 0x08_02_00 => REDIS_8_2_OVERHEAD,
        (false, v) if v >= 0x08_00_00 => REDIS_8_0_OVERHEAD,
        _ => REDIS_7_OVERHEAD,
    };
    SERVER_OVERHEAD.store(overhead, Ordering::Relaxed);
}

/// Above Redis's `lazyfree` threshold (64) for any table with a few locks, so `UNLINK`,
/// `FLUSHALL ASYNC` and lazy deletes free large projects in the background.
extern "C" fn free_effort(_key: *mut raw::RedisModuleString, value: *const c_void) -> usize {
    contained("free_effort", 0, || {
        // SAFETY: see `table`.
        unsafe { table(value) }.free_effort()
    })
}

/// Feeds every lock, in tree order, and the fence counter to `DEBUG DIGEST`, so a master and
/// its replicas can be compared. A lock's note, when it has one, is one more element of its
/// sequence, so the digest of a project without notes is what it was before notes.
extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    contained("digest", (), || {
        // SAFETY: see `table`; the digest functions only read the buffers they are given.
        let table = unsafe { table(value) };
        unsafe {
            let (Some(add_buffer), Some(add_number), Some(end)) = (
                raw::RedisModule_DigestAddStringBuffer,
                raw::RedisModule_DigestAddLongLong,
                raw::RedisModule_DigestEndSequence,
            ) else {
                return;
            };
            // The locks an RDB carries: a master and a replica hold the same ones, but free a
            // released big owner's locks at their own pace, and a replica that loaded an RDB
            // never had the lapsed locks a later grant passed over.
            table.for_each_persisted(&mut |lock| {
                add_buffer(
                    md,
                    lock.path.key().as_ptr().cast::<c_char>(),
                    lock.path.key().len(),
                );
                add_number(md, mode_code(lock.mode) as c_longlong);
                add_buffer(
                    md,
                    lock.token.as_bytes().as_ptr().cast::<c_char>(),
                    lock.token.as_bytes().len(),
                );
                add_number(md, lock.deadline as c_longlong);
                add_number(md, lock.fence as c_longlong);
                if let Some(note) = &lock.note {
                    add_buffer(md, note.as_ptr().cast::<c_char>(), note.len());
                }
                end(md);
            });
            add_number(md, table.next_fence() as c_longlong);
            end(md);
        }
    })
}

/// Rewrites a project as the effects that rebuild it: its fence counter, then one `GRANT` per
/// lock an RDB carries, with its absolute deadline and fence, and its `NOTE` when it has one.
extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    contained("aof_rewrite", (), || {
        // SAFETY: see `table`.
        let table = unsafe { table(value) };
        let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
            return;
        };
        let command = c"PATHLOCK.EFFECT".as_ptr();
        // SAFETY: every format letter matches its argument: `s` a RedisModuleString, `c` a C string,
        // `l` a long long, `b` a pointer and a size_t length.
        unsafe {
            emit(
                aof,
                command,
                c"scl".as_ptr(),
                key,
                c"FENCE".as_ptr(),
                table.next_fence() as c_longlong,
            );
            table.for_each_persisted(&mut |lock| {
                let token = lock.token.as_bytes();
                let path = lock.path.to_bytes();
                let mode = match lock.mode {
                    Mode::Write => c"WRITE".as_ptr(),
                    Mode::Read => c"READ".as_ptr(),
                };
                if let Some(note) = &lock.note {
                    emit(
                        aof,
                        command,
                        c"scbllcbcb".as_ptr(),
                        key,
                        c"GRANT".as_ptr(),
                        token.as_ptr().cast::<c_char>(),
                        token.len(),
                        lock.deadline as c_longlong,
                        lock.fence as c_longlong,
                        c"NOTE".as_ptr(),
                        note.as_ptr().cast::<c_char>(),
                        note.len(),
                        mode,
                        path.as_ptr().cast::<c_char>(),
                        path.len(),
                    );
                    return;
                }
                emit(
                    aof,
                    command,
                    c"scbllcb".as_ptr(),
                    key,
                    c"GRANT".as_ptr(),
                    token.as_ptr().cast::<c_char>(),
                    token.len(),
                    lock.deadline as c_longlong,
                    lock.fence as c_longlong,
                    mode,
                    path.as_ptr().cast::<c_char>(),
                    path.len(),
                );
            });
        }
    })
}

/// The items of an RDB payload, read and written through Redis's module IO.
struct Rdb(*mut raw::RedisModuleIO);

impl persist::Source for Rdb {
    fn unsigned(&mut self) -> Option<u64> {
        raw::load_unsigned(self.0).ok()
    }

    fn buffer(&mut self) -> Option<Vec<u8>> {
        raw::load_string_buffer(self.0)
            .ok()
            .map(|buffer| buffer.as_ref().to_vec())
    }

    /// The server's own copy of the string, read in place and freed after.
    fn read_buffer<R>(&mut self, read: impl FnOnce(&[u8]) -> R) -> Option<R> {
        raw::load_string_buffer(self.0)
            .ok()
            .map(|buffer| read(buffer.as_ref()))
    }
}

impl persist::Sink for Rdb {
    fn unsigned(&mut self, value: u64) {
        raw::save_unsigned(self.0, value);
    }

    fn buffer(&mut self, bytes: &[u8]) {
        raw::save_slice(self.0, bytes);
    }
}

/// Writes a project into an RDB file or a `DUMP` payload.
extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    contained("rdb_save", (), || {
        // SAFETY: see `project`.
        let project = unsafe { project(value) };
        // `MIGRATE` serializes a value right before it unlinks it; `registry` tells it from a
        // `DEL` by this, where the command filter does not see it run (`EXEC`, scripts).
        if project.waiting() > 0 {
            registry::serialized(value as usize);
        }
        persist::encode(project.locks(), &mut Rdb(rdb));
    })
}

/// Reads a project from an RDB file or a `RESTORE` payload, refusing one that does not check.
extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    contained("rdb_load", std::ptr::null_mut(), || {
        if encver > ENCODING_VERSION {
            logging::log_warning(format!(
                "pathlock: cannot load a path-lock value of encoding version {encver}; \
                 this module reads versions up to {ENCODING_VERSION}"
            ));
            return std::ptr::null_mut();
        }
        // `encver` is at most ENCODING_VERSION here, and not negative on any server.
        let version = u32::try_from(encver).unwrap_or(0);
        let now = clock::wall_ms();
        // A client's RESTORE or MIGRATE payload on a master is held to what a client may bring
        // in; a file being loaded, and a RESTORE that a replica's master sent, to what a server
        // may hold, unless the operator asked for a file's impossible counters to be lowered.
        let (loading, replica) = server_state(rdb);
        let lower = loading && config::lower_impossible_fences();
        let bound = match (lower, loading || replica) {
            (true, _) => u64::MAX,
            (false, true) => fences::ceiling(now),
            (false, false) => fences::admissible(now),
        };
        match persist::decode_version(&mut Rdb(rdb), version, bound) {
            Ok(table) => {
                let counter = table.next_fence();
                let (table, dropped) = fences::lowered(table, now);
                if table.next_fence() != counter {
                    logging::log_warning(format!(
                        "pathlock: lowered the impossible fence counter {counter} of key '{}' to \
                         {} (pathlock.lower-impossible-fences), dropping the {dropped} locks \
                         whose fences were at or above that",
                        key_name(rdb),
                        table.next_fence()
                    ));
                }
                into_value(Project::from_locks(table))
            }
            Err(reason) => {
                let hint = match reason {
                    persist::DecodeError::CounterAboveCeiling { .. } if loading => {
                        format!("; {HINT_LOWER_IMPOSSIBLE_FENCES}")
                    }
                    _ => String::new(),
                };
                logging::log_warning(format!(
                    "pathlock: refusing the path-lock value of key '{}': {reason}{hint}",
                    key_name(rdb)
                ));
                std::ptr::null_mut()
            }
        }
    })
}

/// Whether the server is loading a file (a restart, `DEBUG RELOAD`, a full sync, an AOF
/// replay) rather than running a `RESTORE`, and whether it is a replica, whose `RESTORE`s come
/// from its master (or, with `replica-read-only no`, from clients it lets write).
fn server_state(rdb: *mut raw::RedisModuleIO) -> (bool, bool) {
    // SAFETY: the server passes a live IO; the context it returns belongs to the IO.
    let flags = unsafe {
        match (
            raw::RedisModule_GetContextFromIO,
            raw::RedisModule_GetContextFlags,
        ) {
            (Some(context_of), Some(flags_of)) => flags_of(context_of(rdb)),
            _ => 0,
        }
    };
    let set = |flag: u32| flags & flag as c_int != 0;
    (
        set(raw::REDISMODULE_CTX_FLAGS_LOADING),
        set(raw::REDISMODULE_CTX_FLAGS_SLAVE),
    )
}

/// The name of the key an RDB value is loaded into, escaped for the log.
fn key_name(rdb: *mut raw::RedisModuleIO) -> String {
    // SAFETY: the server passes a live IO; the name, when there is one, lives as long as it.
    let name = unsafe {
        raw::RedisModule_GetKeyNameFromIO
            .map(|f| f(rdb))
            .and_then(|name| name_of(name.cast_mut()))
    };
    for_log(name.unwrap_or_default())
}

/// Saves the server's fence mark (`fences`) ahead of the keys of every RDB: snapshots, the AOF's
/// RDB preamble and full syncs to replicas. An RDB saved after every project key was deleted
/// or flushed still carries it, so fences do not go back after a restart or a failover.
extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    contained("aux_save", (), || {
        raw::save_unsigned(rdb, fences::high());
    })
}

/// Raises the server's fence mark to the one an RDB carries; it never lowers it. A mark above
/// the ceiling refuses the whole file (a server cannot start from it with its mark pushed out of
/// reach), unless `pathlock.lower-impossible-fences` is set: then the mark is raised to the
/// admissible one, the most any payload could have brought, instead.
extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    contained("aux_load", raw::REDISMODULE_ERR as c_int, || {
        if encver > ENCODING_VERSION {
            logging::log_warning(format!(
                "pathlock: cannot load aux data of encoding version {encver}"
            ));
            return raw::REDISMODULE_ERR as c_int;
        }
        let Ok(mark) = raw::load_unsigned(rdb) else {
            return raw::REDISMODULE_ERR as c_int;
        };
        let now = clock::wall_ms();
        match fences::check(mark, fences::ceiling(now)) {
            Ok(()) => fences::observe(mark),
            Err(_) if config::lower_impossible_fences() => {
                let lowered = fences::lowered_counter(mark, now);
                logging::log_warning(format!(
                    "pathlock: lowered the RDB's impossible fence mark {mark} to {lowered} \
                     (pathlock.lower-impossible-fences)"
                ));
                fences::observe(lowered);
            }
            Err(impossible) => {
                logging::log_warning(format!(
                    "pathlock: refusing the RDB: its fence mark {mark} is impossible, above {}, \
                     the highest any server can have reached by now; {HINT_LOWER_IMPOSSIBLE_FENCES}",
                    impossible.bound
                ));
                return raw::REDISMODULE_ERR as c_int;
            }
        }
        raw::REDISMODULE_OK as c_int
    })
}

fn mode_code(mode: Mode) -> u64 {
    match mode {
        Mode::Write => 0,
        Mode::Read => 1,
    }
}
