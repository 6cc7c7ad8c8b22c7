//! The engine's lazy free: a tree that turns back into the compact form goes to the embedder's
//! hook when freeing it is more than `lazyfree::THRESHOLD` allocations, and is dropped in place
//! otherwise. A test binary of its own, as the hook is set once for the process.

use std::sync::atomic::{AtomicUsize, Ordering};

use pathlock_core::{lazyfree, LockTable, Mode, Path, PathLimits, Token};

static GIVEN: AtomicUsize = AtomicUsize::new(0);

fn hook(value: Box<dyn Send>) {
    GIVEN.fetch_add(1, Ordering::SeqCst);
    drop(value);
}

fn path(text: &str) -> Path {
    Path::parse(text.as_bytes(), &PathLimits::default()).expect("a path")
}

fn token(text: &str) -> Token {
    Token::new(text.as_bytes()).expect("a token")
}

#[test]
fn a_large_tree_given_up_for_the_compact_form_goes_to_the_hook_and_a_small_one_does_not() {
    assert!(lazyfree::set_hook(hook));
    assert!(!lazyfree::set_hook(hook), "the hook is set once");
    // Nine locks make a tree; releasing five of them brings it back: a small tree, dropped here.
    let mut table = LockTable::new();
    for i in 0..9u64 {
        let items = [(Mode::Write, path(&format!("/f{i}")))];
        table.grant(&token(&format!("t{i}")), 1_000, i + 1, &items);
    }
    assert!(!table.is_compact());
    for i in 0..5 {
        table.release(0, &token(&format!("t{i}")), None, false);
    }
    assert!(table.is_compact());
    assert_eq!(GIVEN.load(Ordering::SeqCst), 0);
    // Ten thousand locks leave arenas of several chunks behind: the hook takes them.
    for i in 0..10_000u64 {
        let items = [(Mode::Write, path(&format!("/d{}/f{i}", i % 100)))];
        table.grant(&token(&format!("u{i}")), 1_000, 100 + i, &items);
    }
    assert!(!table.is_compact());
    assert!(table.free_effort() > lazyfree::THRESHOLD);
    for i in 0..10_000u64 {
        table.release(0, &token(&format!("u{i}")), None, false);
    }
    assert!(table.is_compact());
    assert_eq!(table.len(), 4);
    assert_eq!(GIVEN.load(Ordering::SeqCst), 1);
    table.check_integrity().expect("consistent");
}
