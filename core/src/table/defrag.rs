//! Moving a table's allocations for the server's active defragmentation, through a mover the
//! caller hands in ([`Relocate`]), in bounded steps resumed from a cursor.
//!
//! The engine knows nothing of the server's allocator: the caller's mover is asked, for one
//! allocation at a time, whether that allocation should move, and if so moves its bytes and
//! answers the new place. What the engine owns through a `Box` or a `Vec` is re-pointed in
//! place, which moving the bytes allows (no value in the engine points into itself). What a
//! standard or hashbrown container hides behind private fields is never re-pointed: such a
//! container is rebuilt instead, its elements moved into a fresh one allocated now, while the
//! defragmentation runs, and the old one freed. Storage that a `COPY` shares with another table
//! (behind an `Arc` held twice) is left where it is: moving it for one table would leave the
//! other pointing at freed memory.
//!
//! A walk is cut into pieces of bounded work (a handful of allocations each); after each piece
//! the mover is asked whether to stop, and the walk answers where to resume ([`Progress`]). A
//! cursor says only where to look next: if the table changed between two calls, a resumed walk
//! may skip or revisit some pieces, never touch anything that is gone, because every index is
//! checked against what the table holds when it is read.

use std::alloc::Layout;
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::Arc;

use super::compact::Compact;
use super::Tree;
use crate::bytes::ShortBytes;

/// The mover a walk is handed: the server's defragmenter, or a test's.
///
/// # Safety
/// [`Relocate::relocate`] is handed a live allocation of the global allocator, of `layout` (as
/// the owner asked for it). It either answers `None` and leaves the allocation untouched, or
/// copies all of its bytes into a new allocation of the global allocator that is at least as
/// large and as aligned, frees the old one, and answers the new one: the owner then uses that
/// instead, and frees it through the global allocator with the same layout.
pub unsafe trait Relocate {
    /// Moves the allocation at `at`, or leaves it (see the trait's contract).
    fn relocate(&mut self, at: NonNull<u8>, layout: Layout) -> Option<NonNull<u8>>;

    /// Whether the walk should stop here and resume later from the cursor it answers.
    fn should_stop(&mut self) -> bool;

    /// Runs `build`, which makes a fresh copy of a container whose allocations cannot be
    /// re-pointed (and drops the old one). The server's mover has the allocations made and
    /// freed meanwhile go where its defragmenter puts the ones it moves (the fuller pages);
    /// by default they go where the allocator puts any.
    fn rebuild(&mut self, build: &mut dyn FnMut()) {
        build();
    }
}

/// Where a walk ended: done, or stopped with the cursor to resume from (never 0, which starts
/// a walk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    Done,
    Stopped(u64),
}

/// Moves a boxed value. A zero-sized one owns no allocation.
pub(crate) fn move_box<T, R: Relocate + ?Sized>(boxed: &mut Box<T>, to: &mut R) {
    let layout = Layout::new::<T>();
    if layout.size() == 0 {
        return;
    }
    let at = NonNull::from(&mut **boxed).cast::<u8>();
    if let Some(moved) = to.relocate(at, layout) {
        // SAFETY: by `Relocate`'s contract the value's bytes are now at `moved`, an allocation
        // of the global allocator fit for `T`, and the old allocation is freed; writing the new
        // box over the old one without dropping it is therefore the move of the value.
        unsafe { std::ptr::write(boxed, Box::from_raw(moved.as_ptr().cast::<T>())) };
    }
}

/// Moves a boxed slice. An empty one owns no allocation.
pub(crate) fn move_slice<T, R: Relocate + ?Sized>(boxed: &mut Box<[T]>, to: &mut R) {
    let len = boxed.len();
    let Ok(layout) = Layout::array::<T>(len) else {
        return;
    };
    if layout.size() == 0 {
        return;
    }
    let at = NonNull::from(&mut **boxed).cast::<u8>();
    if let Some(moved) = to.relocate(at, layout) {
        // SAFETY: as in `move_box`, for `len` elements.
        unsafe {
            let slice = std::ptr::slice_from_raw_parts_mut(moved.as_ptr().cast::<T>(), len);
            std::ptr::write(boxed, Box::from_raw(slice));
        }
    }
}

/// Moves a vector's buffer. One without capacity owns no allocation.
pub(crate) fn move_vec<T, R: Relocate + ?Sized>(vec: &mut Vec<T>, to: &mut R) {
    let (len, capacity) = (vec.len(), vec.capacity());
    let Ok(layout) = Layout::array::<T>(capacity) else {
        return;
    };
    if layout.size() == 0 {
        return;
    }
    let at = NonNull::new(vec.as_mut_ptr().cast::<u8>()).expect("a vector's buffer");
    if let Some(moved) = to.relocate(at, layout) {
        // SAFETY: as in `move_box`: the buffer of `capacity` elements, `len` of them live, is at
        // `moved`, allocated as `Vec` allocates it.
        unsafe {
            std::ptr::write(
                vec,
                Vec::from_raw_parts(moved.as_ptr().cast::<T>(), len, capacity),
            )
        };
    }
}

/// Rebuilds what an `Arc` holds in a fresh allocation when this is its only holder (neither a
/// copy's storage nor borrowed by anyone), through [`Relocate::rebuild`]: the clone is equal to
/// the original, and the old one is freed as the new one takes its place.
pub(crate) fn rebuild_unique<T: Clone, R: Relocate + ?Sized>(shared: &mut Arc<T>, to: &mut R) {
    if Arc::get_mut(shared).is_none() {
        return;
    }
    to.rebuild(&mut || {
        let fresh = Arc::new(T::clone(shared));
        *shared = fresh;
    });
}

/// Moves a compact table's one allocation.
pub(super) fn compact<R: Relocate + ?Sized>(table: &mut Compact, to: &mut R) {
    move_slice(table.bytes_mut(), to);
}

/// Moves the tree's own allocation; its storage is walked by [`tree`].
pub(super) fn tree_top<R: Relocate + ?Sized>(tree: &mut Box<Tree>, to: &mut R) {
    move_box(tree, to);
}

/// The parts of the tree's storage, walked in this order; a cursor is a part and a piece in
/// it (`part << PIECE_BITS | piece`).
const SPINES: u64 = 0;
const NODES: u64 = 1;
const CHILDREN: u64 = 2;
const OWNERS: u64 = 3;
const OWNER_INDEX: u64 = 4;
const CROWDED: u64 = 5;
const OWNER_LOCKS: u64 = 6;
const BIGS: u64 = 7;
const BIG_MARKS: u64 = 8;
const CUTS: u64 = 9;
const NOTES: u64 = 10;
const EXPIRY: u64 = 11;
const PARTS: u64 = 12;

const PIECE_BITS: u32 = 48;
const PIECE_MASK: u64 = (1 << PIECE_BITS) - 1;

/// Nodes (and owners) per piece: a chunk of the arena, one check each and rarely a move.
const SLOTS_PER_PIECE: usize = 2048;
/// Children's tables per piece: each a list of segments and usually one small segment.
const TABLES_PER_PIECE: usize = 64;

/// Walks the tree's storage from `cursor` (0 starts), a bounded piece at a time: the lists
/// and bitmaps first, then the arenas a chunk at a time (their chunks and the segments' and
/// tokens' bytes that do not fit inline), the children's tables, then each hash table a segment
/// at a time and the expiry index a run at a time. Asks `to` whether to stop after each piece.
pub(super) fn tree<R: Relocate + ?Sized>(tree: &mut Tree, to: &mut R, cursor: u64) -> Progress {
    let (mut part, mut piece) = (cursor >> PIECE_BITS, cursor & PIECE_MASK);
    while part < PARTS {
        if tree_piece(tree, to, part, piece as usize) {
            piece += 1;
        } else {
            (part, piece) = (part + 1, 0);
        }
        if part < PARTS && to.should_stop() {
            return Progress::Stopped(part << PIECE_BITS | piece);
        }
    }
    Progress::Done
}

/// One piece of the walk; false when the part has no such piece (the walk goes on to the next
/// part).
fn tree_piece<R: Relocate + ?Sized>(tree: &mut Tree, to: &mut R, part: u64, piece: usize) -> bool {
    let slot = piece * SLOTS_PER_PIECE;
    match part {
        SPINES => {
            if piece > 0 {
                return false;
            }
            tree.nodes.defrag_buffers(to);
            // A fork holds indexes only: moving the arena's chunks moves all of it.
            tree.forks.defrag_buffers(to);
            tree.tables.defrag_buffers(to);
            tree.owners.defrag_buffers(to);
            tree.free_nodes.defrag(to);
            tree.free_forks.defrag(to);
            tree.free_tables.defrag(to);
            tree.free_owners.defrag(to);
            tree.owner_index.defrag_spine(to);
            tree.crowded.entries_mut().defrag_spine(to);
            tree.owner_locks.entries_mut().defrag_spine(to);
            tree.bigs.entries_mut().defrag_spine(to);
            tree.big_marks.entries_mut().defrag_spine(to);
            tree.cuts.entries_mut().defrag_spine(to);
            tree.expiry.defrag_spine(to);
            if !tree.graveyard.is_empty() {
                let graveyard = &mut tree.graveyard;
                to.rebuild(&mut || {
                    let mut fresh = VecDeque::with_capacity(graveyard.capacity());
                    fresh.extend(graveyard.iter().copied());
                    *graveyard = fresh;
                });
            }
            true
        }
        NODES => tree
            .nodes
            .defrag_slots(slot, SLOTS_PER_PIECE, to, |node, to| {
                // A long segment is two allocations: the bytes, and the thin box pointing at them.
                if let ShortBytes::Heap(outer) = &mut node.segment {
                    move_slice(&mut **outer, to);
                    move_box(outer, to);
                }
            }),
        CHILDREN => tree.tables.defrag_slots(
            piece * TABLES_PER_PIECE,
            TABLES_PER_PIECE,
            to,
            |table, to| {
                table.defrag_spine(to);
                let mut i = 0;
                while table.defrag_segment(i, to) {
                    i += 1;
                }
            },
        ),
        OWNERS => tree
            .owners
            .defrag_slots(slot, SLOTS_PER_PIECE, to, |owner, to| {
                if let Some(owner) = owner {
                    owner.token.with_heap(|bytes| move_slice(bytes, to));
                }
            }),
        OWNER_INDEX => tree.owner_index.defrag_segment(piece, to),
        CROWDED => tree.crowded.entries_mut().defrag_segment(piece, to),
        OWNER_LOCKS => tree.owner_locks.entries_mut().defrag_segment(piece, to),
        BIGS => tree.bigs.entries_mut().defrag_segment(piece, to),
        BIG_MARKS => tree.big_marks.entries_mut().defrag_segment(piece, to),
        CUTS => tree.cuts.entries_mut().defrag_segment(piece, to),
        NOTES => tree.notes.defrag_segment(piece, to),
        EXPIRY => tree.expiry.defrag_run(piece, to),
        _ => false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A mover that moves every allocation it is handed (as the server does with those in
    /// sparse pages), poisoning the old bytes before it frees them so that a stale pointer
    /// shows, and stops every `stop_every` questions.
    pub(crate) struct MoveAll {
        pub(crate) moved: usize,
        pub(crate) asked: usize,
        pub(crate) stop_every: usize,
    }

    impl MoveAll {
        pub(crate) fn new(stop_every: usize) -> MoveAll {
            MoveAll {
                moved: 0,
                asked: 0,
                stop_every,
            }
        }
    }

    // SAFETY: copies the bytes into a fresh allocation of `layout` and frees the old one.
    unsafe impl Relocate for MoveAll {
        fn relocate(&mut self, at: NonNull<u8>, layout: Layout) -> Option<NonNull<u8>> {
            unsafe {
                let moved = NonNull::new(std::alloc::alloc(layout))?;
                std::ptr::copy_nonoverlapping(at.as_ptr(), moved.as_ptr(), layout.size());
                std::ptr::write_bytes(at.as_ptr(), 0xA5, layout.size());
                std::alloc::dealloc(at.as_ptr(), layout);
                self.moved += 1;
                Some(moved)
            }
        }

        fn should_stop(&mut self) -> bool {
            self.asked += 1;
            self.stop_every != 0 && self.asked.is_multiple_of(self.stop_every)
        }
    }

    use crate::lock::{Mode, Note, Token};
    use crate::path::{Path, PathLimits};
    use crate::table::LockTable;

    fn path(text: &str) -> Path {
        Path::parse(text.as_bytes(), &PathLimits::default()).expect("a valid path")
    }

    /// A tree with every part of its storage in use: long segments and tokens (on the heap),
    /// folders with many children, owners with one lock and with several, a big owner, readers
    /// sharing paths, notes, a grant over a lapsed lock (a cut), and many deadlines.
    fn busy_table() -> LockTable {
        let mut table = LockTable::with_limits(4, 8);
        let long = "a-folder-name-longer-than-twenty-two-bytes";
        for i in 0..3000u64 {
            let token =
                Token::new(format!("owner-{i}-with-a-token-longer-than-38-bytes").as_bytes())
                    .expect("a token");
            let items = [(Mode::Write, path(&format!("/{long}/d{}/f{i}", i % 40)))];
            let note: Note = format!("note {}", i % 7).into_bytes().into();
            table.grant_noted(&token, 1_000_000 + i, i + 1, &items, Some(&note));
        }
        // A chain of segments kept as one node (see `tree::Node`), too long to be inline.
        let chain = Token::new(b"chain").expect("a token");
        let items = [(Mode::Write, path(&format!("/chain/{long}/file")))];
        table.grant_noted(&chain, 2_000_000, 3_001, &items, None);
        let several = Token::new(b"several").expect("a token");
        let items: Vec<(Mode, Path)> = (0..3)
            .map(|i| (Mode::Write, path(&format!("/several/{i}"))))
            .collect();
        table.acquire(0, &several, 500_000, &items);
        let big = Token::new(b"big").expect("a token");
        let items: Vec<(Mode, Path)> = (0..50)
            .map(|i| (Mode::Read, path(&format!("/big/{i}"))))
            .collect();
        table.acquire(0, &big, 500_000, &items);
        for reader in 0..5 {
            let token = Token::new(format!("reader{reader}").as_bytes()).expect("a token");
            table.acquire(0, &token, 500_000, &[(Mode::Read, path("/shared"))]);
        }
        let lapsing = Token::new(b"lapsing").expect("a token");
        table.acquire(0, &lapsing, 10, &[(Mode::Write, path("/cut/under"))]);
        let over = Token::new(b"over").expect("a token");
        table.acquire_with(
            20,
            &crate::table::Request {
                token: &over,
                generated: false,
                ttl: 500_000,
                items: &[(Mode::Write, path("/cut"))],
                note: None,
            },
            false,
        );
        assert!(!table.is_compact());
        table.check_integrity().expect("integrity");
        table
    }

    /// Walks `table` to the end with `mover`, resuming from each cursor it stops at; returns the
    /// calls it took.
    fn walk(table: &mut LockTable, mover: &mut MoveAll) -> usize {
        let (mut cursor, mut calls) = (0, 0);
        loop {
            calls += 1;
            assert!(calls < 100_000, "the walk does not end");
            match table.defrag(mover, cursor) {
                Progress::Done => return calls,
                Progress::Stopped(next) => {
                    assert_ne!(next, 0, "a stopped walk resumes past its start");
                    cursor = next;
                }
            }
        }
    }

    #[test]
    fn a_tree_moved_piece_by_piece_keeps_every_lock() {
        for stop_every in [0, 1, 3] {
            let mut table = busy_table();
            let before = table.stored();
            let estimate = table.memory_estimate();
            let mut mover = MoveAll::new(stop_every);
            let calls = walk(&mut table, &mut mover);
            table.check_integrity().expect("integrity after the walk");
            assert_eq!(table.stored(), before);
            assert_eq!(table.memory_estimate(), estimate);
            assert!(mover.moved > 100, "moved only {}", mover.moved);
            if stop_every == 1 {
                assert!(calls > 20, "one piece per call took only {calls} calls");
            }
            // The moved table still decides and changes as before.
            let t = Token::new(b"late").expect("a token");
            assert!(table
                .acquire(30, &t, 1000, &[(Mode::Write, path("/shared"))])
                .fence
                .is_none());
            assert!(table
                .acquire(30, &t, 1000, &[(Mode::Write, path("/fresh/x"))])
                .fence
                .is_some());
            table.check_integrity().expect("integrity after a change");
        }
    }

    /// The heap form of tokens at its length boundaries (20 and 128 bytes, a UUID's length in
    /// capitals), in a small tree, moved piece by piece: small enough for Miri (`make miri`),
    /// which checks that each token's bytes are read, lent, moved and freed soundly; each token
    /// then still finds its owner, and releasing them all leaves the table empty.
    #[test]
    fn a_small_tree_moves_its_heap_tokens() {
        let mut table = LockTable::with_limits(2, 0);
        let texts: Vec<Vec<u8>> = vec![
            vec![b'x'; 20],
            vec![b'y'; 128],
            b"123E4567-E89B-12D3-A456-426614174000".to_vec(),
            b"short".to_vec(),
        ];
        let tokens: Vec<Token> = texts
            .iter()
            .map(|t| Token::new(t).expect("a token"))
            .collect();
        let generated = Token::generate();
        for (i, token) in tokens.iter().chain([&generated]).enumerate() {
            // Three locks each: past `small`, so that every owner is also a big one.
            let items: Vec<(Mode, Path)> = (0..3)
                .map(|j| {
                    (
                        Mode::Write,
                        path(&format!("/t{i}/a-segment-longer-than-inline/{j}")),
                    )
                })
                .collect();
            assert!(table.acquire(0, token, 1000, &items).fence.is_some());
        }
        assert!(!table.is_compact());
        let before = table.stored();
        let mut mover = MoveAll::new(1);
        walk(&mut table, &mut mover);
        table.check_integrity().expect("integrity after the walk");
        assert_eq!(table.stored(), before);
        assert!(mover.moved >= texts.len(), "moved only {}", mover.moved);
        for token in tokens.iter().chain([&generated]) {
            assert_eq!(table.release(1, token, None, false).count, 3);
        }
        assert!(table.stored().is_empty());
        table.check_integrity().expect("integrity once empty");
    }

    #[test]
    fn storage_shared_with_a_copy_stays_for_both() {
        let mut table = busy_table();
        let mut copy = table.share();
        let before = table.stored();
        let mut mover = MoveAll::new(2);
        walk(&mut table, &mut mover);
        walk(&mut copy, &mut mover);
        for side in [&table, &copy] {
            side.check_integrity().expect("integrity");
            assert_eq!(side.stored(), before);
        }
        // Each side writes on its own after the walk.
        let t = Token::new(b"late").expect("a token");
        table.acquire(30, &t, 1000, &[(Mode::Write, path("/only/here"))]);
        assert_eq!(copy.stored(), before);
    }

    #[test]
    fn a_compact_table_moves_its_one_allocation() {
        let mut table = LockTable::new();
        let t = Token::new(b"one").expect("a token");
        table.acquire(0, &t, 1000, &[(Mode::Write, path("/a/b"))]);
        assert!(table.is_compact());
        let before = table.stored();
        let mut mover = MoveAll::new(0);
        assert_eq!(table.defrag(&mut mover, 0), Progress::Done);
        assert_eq!(mover.moved, 1);
        assert_eq!(table.stored(), before);
        table.check_integrity().expect("integrity");
    }

    #[test]
    fn boxes_slices_and_vectors_keep_their_values_when_moved() {
        let mut mover = MoveAll::new(0);
        let mut boxed = Box::new([7u64; 5]);
        let mut slice: Box<[u8]> = b"a compact table".to_vec().into_boxed_slice();
        let mut vec = Vec::with_capacity(10);
        vec.extend([1u32, 2, 3]);
        let mut empty: Vec<u64> = Vec::new();
        move_box(&mut boxed, &mut mover);
        move_slice(&mut slice, &mut mover);
        move_vec(&mut vec, &mut mover);
        move_vec(&mut empty, &mut mover);
        assert_eq!(mover.moved, 3, "the empty vector owns nothing to move");
        assert_eq!(*boxed, [7; 5]);
        assert_eq!(&*slice, b"a compact table");
        assert_eq!((vec.as_slice(), vec.capacity()), (&[1, 2, 3][..], 10));
        vec.push(4);
        assert_eq!(vec, [1, 2, 3, 4]);
    }
}
