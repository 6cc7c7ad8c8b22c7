//! Active defragmentation of a project: the type's `defrag` callback, which hands the engine
//! the server's defragmenter as its mover ([`pathlock_core::Relocate`]).
//!
//! The server calls the callback once per key in a defrag cycle. A key whose `free_effort` is
//! above `active-defrag-max-scan-fields` (1,000 by default: a tree of a few hundred locks) is
//! defragmented "late": the server gives the callback a time limit (`DefragShouldStop`) and a
//! cursor (`DefragCursorGet`/`Set`), and calls it again for as long as it answers 1. A smaller
//! key is done in one call, without a limit, which its size bounds. Where the server cannot
//! defragment (no bundled jemalloc, `activedefrag no`) the callback is never called.
//!
//! Level 1: imports `contain`, `stats` (the module's allocator times its calls for the expiry
//! cycle's figures).

use std::alloc::Layout;
use std::cell::Cell;
use std::os::raw::{c_int, c_ulong, c_void};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};

use pathlock_core::{Progress, Project, Relocate};
use redis_module::raw;

use crate::contain::contained;

type DefragAlloc = unsafe extern "C" fn(*mut raw::RedisModuleDefragCtx, *mut c_void) -> *mut c_void;
type ShouldStop = unsafe extern "C" fn(*mut raw::RedisModuleDefragCtx) -> c_int;

/// The server's defragmenter, as the engine's mover.
struct Server {
    ctx: *mut raw::RedisModuleDefragCtx,
    alloc: DefragAlloc,
    should_stop: Option<ShouldStop>,
}

// SAFETY: every allocation of the module is the server's (`RedisAlloc` is the global
// allocator). `RedisModule_DefragAlloc` either answers null and leaves the allocation, or copies
// all of its usable bytes into a new allocation of the same size class (so at least as large and
// as aligned, jemalloc aligning each class alike), frees the old one and answers the new one.
unsafe impl Relocate for Server {
    fn relocate(&mut self, at: NonNull<u8>, _layout: Layout) -> Option<NonNull<u8>> {
        // SAFETY: `at` is a live allocation of the server's allocator (see above).
        NonNull::new(unsafe { (self.alloc)(self.ctx, at.as_ptr().cast()) }.cast())
    }

    fn should_stop(&mut self) -> bool {
        // SAFETY: the context of this callback; without a time limit it answers 0.
        self.should_stop
            .is_some_and(|should_stop| unsafe { should_stop(self.ctx) } != 0)
    }

    /// Runs `build` with this thread's allocations made and freed as the defragmenter makes
    /// and frees the ones it moves ([`Allocator`]).
    fn rebuild(&mut self, build: &mut dyn FnMut()) {
        let _rebuilding = Rebuilding::start(self.ctx);
        build();
    }
}

/// The defrag context of a rebuild under way, or null: read by [`Allocator`] on every
/// allocation, so one relaxed load decides the common case.
static REBUILD_CTX: AtomicPtr<raw::RedisModuleDefragCtx> = AtomicPtr::new(ptr::null_mut());

thread_local! {
    /// Whether this thread is the one rebuilding: the server's lazy-free thread may free a
    /// project meanwhile, and its frees stay ordinary. A constant without a destructor, so
    /// reading it never allocates.
    static REBUILDER: Cell<bool> = const { Cell::new(false) };
}

/// Marks a rebuild under way on this thread until dropped (a contained panic included).
struct Rebuilding;

impl Rebuilding {
    fn start(ctx: *mut raw::RedisModuleDefragCtx) -> Rebuilding {
        REBUILDER.with(|rebuilder| rebuilder.set(true));
        REBUILD_CTX.store(ctx, Ordering::Relaxed);
        Rebuilding
    }
}

impl Drop for Rebuilding {
    fn drop(&mut self) {
        REBUILD_CTX.store(ptr::null_mut(), Ordering::Relaxed);
        REBUILDER.with(|rebuilder| rebuilder.set(false));
    }
}

/// The global allocator, built into the module only: unit tests and fuzz targets use the
/// system's.
#[cfg(not(any(test, feature = "system-alloc")))]
mod global {
    use std::alloc::{GlobalAlloc, Layout};
    use std::cell::Cell;
    use std::ptr;
    use std::sync::atomic::Ordering;

    use redis_module::alloc::RedisAlloc;
    use redis_module::raw;

    use super::{REBUILDER, REBUILD_CTX};

    /// The size from which an allocation is timed as the server's work in an expiry tick's
    /// figures (`stats::in_server`), as every free is: where the allocator's upkeep lands.
    /// glibc's malloc consolidates all its freed small blocks in a request of this size or more
    /// (one outside its small bins), and in any free whose block, merged with its free
    /// neighbours, reaches 64 KiB; jemalloc flushes its thread cache and purges pages in frees.
    /// Smaller allocations are not timed, for two clock readings cost about as much as one of
    /// them; they count as the module's work.
    const LARGE: usize = 1024;

    /// The defrag context when this thread is rebuilding, else null.
    fn rebuilding() -> *mut raw::RedisModuleDefragCtx {
        let ctx = REBUILD_CTX.load(Ordering::Relaxed);
        if ctx.is_null() || !REBUILDER.try_with(Cell::get).unwrap_or(false) {
            return ptr::null_mut();
        }
        ctx
    }

    /// The module's global allocator: the server's (`RedisAlloc`), except during a rebuild
    /// ([`Relocate::rebuild`]) on the thread that runs it, where allocations and frees go through
    /// `RedisModule_DefragAllocRaw`/`DefragFreeRaw`. Those bypass jemalloc's thread cache, as the
    /// defragmenter's own moves do, so that a rebuilt container lands in the fuller pages instead of
    /// the sparse one its old copy is leaving; both are the server's allocator, so either kind of
    /// allocation may be freed by the other kind of free.
    pub(crate) struct Allocator;

    // SAFETY: every path hands out and takes back allocations of the server's allocator, sized as
    // `RedisAlloc` sizes them (rounded up to the alignment, which jemalloc's size classes then
    // honour).
    unsafe impl GlobalAlloc for Allocator {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let ctx = rebuilding();
            match unsafe { raw::RedisModule_DefragAllocRaw } {
                Some(alloc_raw) if !ctx.is_null() => {
                    let size = (layout.size() + layout.align() - 1) & !(layout.align() - 1);
                    unsafe { alloc_raw(ctx, size) }.cast()
                }
                _ if layout.size() >= LARGE => {
                    crate::stats::in_server(|| unsafe { RedisAlloc.alloc(layout) })
                }
                _ => unsafe { RedisAlloc.alloc(layout) },
            }
        }

        unsafe fn dealloc(&self, at: *mut u8, layout: Layout) {
            let ctx = rebuilding();
            match unsafe { raw::RedisModule_DefragFreeRaw } {
                Some(free_raw) if !ctx.is_null() => unsafe { free_raw(ctx, at.cast()) },
                // Any free may start the allocator's upkeep (see `LARGE`).
                _ => crate::stats::in_server(|| unsafe { RedisAlloc.dealloc(at, layout) }),
            }
        }
    }
}

#[cfg(not(any(test, feature = "system-alloc")))]
pub(crate) use global::Allocator;

/// Active defragmentation, on a server whose allocator supports it (Redis or Valkey built with
/// their bundled jemalloc, `activedefrag yes`): moves the project's own allocation, then every
/// allocation of its table (`Project::defrag`), in steps bounded by the server's time limit for
/// a large key, resumed from the cursor it keeps. Returns 1 while work is left for a later call,
/// 0 when the key is done, so the server's cycle ends.
pub extern "C" fn defrag(
    ctx: *mut raw::RedisModuleDefragCtx,
    _key: *mut raw::RedisModuleString,
    value: *mut *mut c_void,
) -> c_int {
    contained("defrag", 0, || {
        // SAFETY: reads the server's function table, filled at load.
        let Some(alloc) = (unsafe { raw::RedisModule_DefragAlloc }) else {
            return 0;
        };
        // SAFETY: the server passes its pointer to the value, which it owns during the call.
        if value.is_null() || unsafe { *value }.is_null() {
            return 0;
        }
        let mut cursor: c_ulong = 0;
        // A late defrag has a cursor (0 when the key starts); a key done in one call has none.
        // SAFETY: the context of this callback and a local to write the cursor to.
        let late = unsafe { raw::RedisModule_DefragCursorGet }
            .is_some_and(|get| unsafe { get(ctx, &mut cursor) == raw::REDISMODULE_OK as c_int });
        // SAFETY: `*value` is the `Box<Project>` allocation, the server's; DefragAlloc moves it
        // (a bitwise copy, which any Rust value allows) or answers null and leaves it.
        unsafe {
            if cursor == 0 {
                let moved = alloc(ctx, *value);
                if !moved.is_null() {
                    *value = moved;
                }
            }
        }
        let mut server = Server {
            ctx,
            alloc,
            // SAFETY: reads the server's function table.
            should_stop: unsafe { raw::RedisModule_DefragShouldStop },
        };
        // SAFETY: the value is a `Box<Project>` (see `keytype`), which nothing else touches
        // while the server's main thread runs this callback.
        let project = unsafe { &mut *(*value).cast::<Project>() };
        match project.defrag(&mut server, cursor as u64) {
            Progress::Done => 0,
            Progress::Stopped(next) => {
                // SAFETY: the context of this late defrag, which has a cursor.
                let kept = late
                    && unsafe { raw::RedisModule_DefragCursorSet }.is_some_and(|set| unsafe {
                        set(ctx, next as c_ulong) == raw::REDISMODULE_OK as c_int
                    });
                c_int::from(kept)
            }
        }
    })
}
