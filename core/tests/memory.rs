//! The memory estimate against the heap a project really takes, without Redis: this test binary
//! counts every allocation's usable size through its global allocator, and a project's estimate
//! (`Project::memory_estimate`, what `MEMORY USAGE` reports beside the server's share) must come
//! within 5% of what building it allocated, in both forms and at every size, notes included.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;

use pathlock_core::{Mode, Note, Path, Project, Request, Token};

/// The system allocator, counting what it hands out as `malloc_usable_size` reports it, the
/// figure a server's `used_memory` is kept in.
struct Counting;

thread_local! {
    /// The bytes this thread holds: the test harness's own threads allocate while a test
    /// measures (a process-wide count read 112 bytes, then 240, for a project of 80), so each
    /// thread counts its own and a project is built and measured on one.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn count(bytes: isize) {
    // `try_with`: a thread that is being torn down has no counter left, and nothing to measure.
    let _ = LIVE.try_with(|live| live.set(live.get() + bytes));
}

fn usable(block: *mut u8) -> isize {
    // SAFETY: `block` was returned by the system allocator and not freed yet.
    unsafe { libc::malloc_usable_size(block.cast()) as isize }
}

// SAFETY: every call is passed on to the system allocator unchanged; only counts are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let block = System.alloc(layout);
        if !block.is_null() {
            count(usable(block));
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        count(-usable(block));
        System.dealloc(block, layout);
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        let before = usable(block);
        let moved = System.realloc(block, layout, size);
        if !moved.is_null() {
            count(usable(moved) - before);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The tests of this file one at a time: each reads the process's live bytes.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn learn_the_allocator() {
    pathlock_core::alloc::learn_size_classes(|size| {
        // SAFETY: a block of the C library's allocator, measured and given back at once.
        unsafe {
            let block = libc::malloc(size);
            let usable = libc::malloc_usable_size(block);
            libc::free(block);
            usable
        }
    });
}

/// Builds a project of `n` locks (`/d{i % 1000}/f{i}`, a token each or one for all, with or
/// without the same note on each call) and compares its estimate with what it allocated.
fn compare(n: usize, token_each: bool, note: Option<&[u8]>) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    learn_the_allocator();
    let shared = Token::new(b"mover").expect("a token");
    let before = LIVE.with(Cell::get);
    let project = Box::new({
        let mut project = Project::new();
        for i in 0..n {
            let token = if token_each {
                Token::new(format!("t{i}").as_bytes()).expect("a token")
            } else {
                shared.clone()
            };
            let path = format!("/d{}/f{i}", i % 1000);
            let items = [(
                Mode::Write,
                Path::parse(path.as_bytes(), &Default::default()).expect("a path"),
            )];
            // Each call brings its own copy of the note, as each ACQUIRE does.
            let note = note.map(Note::from);
            let request = Request {
                token: &token,
                generated: false,
                ttl: 60_000,
                items: &items,
                note: note.as_ref(),
            };
            assert!(project.acquire_request(1_000, &request).is_some());
        }
        project
    });
    let real = LIVE.with(Cell::get) - before;
    let estimate = project.memory_estimate() as isize;
    let gap = (estimate - real) as f64 / real as f64;
    println!(
        "{n} locks, {} token{}: {real} bytes allocated, {estimate} estimated ({:+.1}%)",
        if token_each { "a" } else { "one" },
        if note.is_some() {
            ", a note each call"
        } else {
            ""
        },
        gap * 100.0
    );
    assert!(
        gap.abs() <= 0.05,
        "{estimate} estimated against {real} allocated"
    );
    assert_eq!(project.locks().is_compact(), n <= 8);
}

#[test]
fn the_estimate_of_small_projects_is_what_they_allocate() {
    for n in 1..=8 {
        compare(n, true, None);
        compare(n, false, Some(b"moved by alice"));
    }
}

#[test]
fn the_estimate_of_trees_is_what_they_allocate_at_every_size() {
    let note = [b'n'; 256];
    for n in [9, 100, 1_000, 10_000, 100_000] {
        compare(n, true, None);
        compare(n, false, None);
        compare(n, true, Some(&note));
        compare(n, false, Some(&note));
    }
}
