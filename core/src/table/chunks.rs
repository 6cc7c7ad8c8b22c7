//! A vector kept in fixed-size chunks, so that growing it never moves what it holds, and whose
//! chunks copies of it share until one of them writes.
//!
//! A `Vec` of ten million nodes doubles by copying 640 MB in one call, which would stall Redis
//! for a large part of a second. Here a push that fills a chunk allocates the next one (2,048
//! elements) and the outer vector of chunk pointers grows by copying one pointer per chunk, so
//! the longest push costs one allocation of a chunk. An index is split into a chunk and a slot.
//!
//! [`Chunks::share`] makes a copy that shares every chunk: it puts each chunk behind an `Arc`
//! (moving the vector's three words, not its elements) and copies one pointer per chunk, so a
//! copy of ten million nodes costs about 5,000 pointers. The first write to a shared chunk, on
//! either side, takes it back as its own: the elements themselves when the other side has let
//! go of it, a copy of that chunk alone otherwise. So no write after a copy copies more than
//! one chunk per element it writes (128 KB of nodes; the size is chosen for that, since a copy
//! costs one step per chunk while a write after it copies whole chunks), and a chunk that
//! neither side writes stays shared for good.
//!
//! Chunks that were never shared stay plain vectors, so the common path (no copy ever made)
//! reads and writes them without touching a reference count; only the sharing copy needs
//! `&mut` to mark the source's chunks shared. `Arc` rather than `Rc` because the server may free
//! one copy in its lazy-free thread while the other is in use on the main thread: the counts
//! are atomic, and whichever side lets go of a chunk last, on whichever thread, frees it.

use std::ops::{Index, IndexMut};
use std::sync::Arc;

use super::defrag::{move_vec, Relocate};
use crate::alloc::allocation;

const CHUNK_BITS: u32 = 11;
const CHUNK: usize = 1 << CHUNK_BITS;
const SLOT_MASK: usize = CHUNK - 1;

/// Cloning copies the chunks this vector owns and shares those already shared; [`Chunks::share`]
/// is the copy that copies no element.
#[derive(Clone, Debug)]
pub struct Chunks<T> {
    chunks: Vec<Chunk<T>>,
    len: usize,
}

#[derive(Clone, Debug)]
enum Chunk<T> {
    Owned(Vec<T>),
    Shared(Arc<Vec<T>>),
}

impl<T: Clone> Chunk<T> {
    #[inline]
    fn items(&self) -> &Vec<T> {
        match self {
            Chunk::Owned(items) => items,
            Chunk::Shared(items) => items,
        }
    }

    /// The chunk's elements to write: its own, taken back or copied first when shared.
    #[inline]
    fn items_mut(&mut self) -> &mut Vec<T> {
        match self {
            Chunk::Owned(items) => items,
            Chunk::Shared(_) => self.unshare(),
        }
    }

    /// Makes a shared chunk this side's own: `make_mut` copies the elements only if the other
    /// side still holds them. Out of line, so that the common path stays a test and a branch.
    #[cold]
    #[inline(never)]
    fn unshare(&mut self) -> &mut Vec<T> {
        if let Chunk::Shared(shared) = self {
            let items = std::mem::take(Arc::make_mut(shared));
            *self = Chunk::Owned(items);
        }
        match self {
            Chunk::Owned(items) => items,
            Chunk::Shared(shared) => Arc::make_mut(shared),
        }
    }

    /// Marks the chunk shared, and returns the other side's handle to it.
    fn share(&mut self) -> Chunk<T> {
        if let Chunk::Owned(items) = self {
            *self = Chunk::Shared(Arc::new(std::mem::take(items)));
        }
        match self {
            Chunk::Shared(shared) => Chunk::Shared(Arc::clone(shared)),
            Chunk::Owned(items) => Chunk::Owned(items.clone()),
        }
    }
}

impl<T> Default for Chunks<T> {
    fn default() -> Self {
        Chunks {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Clone> Chunks<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A copy that shares every chunk with this vector, in one step per chunk.
    pub(super) fn share(&mut self) -> Chunks<T> {
        Chunks {
            chunks: self.chunks.iter_mut().map(Chunk::share).collect(),
            len: self.len,
        }
    }

    pub fn push(&mut self, value: T) {
        let chunk = self.len >> CHUNK_BITS;
        if chunk == self.chunks.len() {
            // The first chunk grows as a `Vec` does, by doubling up to a chunk, so that a small
            // project (most are) holds what it uses rather than a whole chunk: a move of at
            // most one chunk is as bounded as allocating one. Later chunks are whole at once.
            self.chunks.push(Chunk::Owned(if chunk == 0 {
                Vec::new()
            } else {
                Vec::with_capacity(CHUNK)
            }));
        }
        self.chunks[chunk].items_mut().push(value);
        self.len += 1;
    }

    pub fn pop(&mut self) -> Option<T> {
        let last = self.len.checked_sub(1)?;
        let value = self.chunks[last >> CHUNK_BITS].items_mut().pop();
        self.len = last;
        // One empty chunk is kept, so that pushing and popping across a chunk's edge does not
        // allocate and free a chunk each time.
        if self.chunks.len() > (last >> CHUNK_BITS) + 2 {
            self.chunks.pop();
        }
        value
    }

    pub fn get(&self, index: usize) -> Option<&T> {
        self.chunks
            .get(index >> CHUNK_BITS)
            .and_then(|chunk| chunk.items().get(index & SLOT_MASK))
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks.iter().flat_map(|chunk| chunk.items().iter())
    }

    /// How many allocations freeing the vector takes: its chunks and the vector of them.
    pub(super) fn allocations(&self) -> usize {
        self.chunks.len() + 1
    }

    /// The bytes the vector takes on the heap, as the allocator rounds them, for the memory
    /// estimate: its chunks, full or not (all but the first are a whole chunk), and the vector
    /// of chunks. A chunk shared with a copy counts on both sides, as copies report their whole
    /// size.
    pub(super) fn heap_bytes(&self) -> usize {
        let Some(first) = self.chunks.first() else {
            return 0;
        };
        let size = std::mem::size_of::<T>();
        allocation(first.items().capacity() * size)
            + (self.chunks.len() - 1) * allocation(CHUNK * size)
            + allocation(self.chunks.capacity() * std::mem::size_of::<Chunk<T>>())
    }

    /// The bytes the chunks reserve, full or not.
    #[cfg(test)]
    pub(super) fn reserved_bytes(&self) -> usize {
        self.chunks
            .iter()
            .map(|c| c.items().capacity())
            .sum::<usize>()
            * std::mem::size_of::<T>()
    }

    /// How many chunks this vector and `other` hold in common, for tests of sharing.
    #[cfg(test)]
    pub(super) fn shared_with(&self, other: &Chunks<T>) -> usize {
        self.chunks
            .iter()
            .zip(&other.chunks)
            .filter(|(a, b)| std::ptr::eq(a.items(), b.items()))
            .count()
    }
}

impl<T: Clone> Index<usize> for Chunks<T> {
    type Output = T;

    #[inline]
    fn index(&self, index: usize) -> &T {
        &self.chunks[index >> CHUNK_BITS].items()[index & SLOT_MASK]
    }
}

impl<T: Clone> IndexMut<usize> for Chunks<T> {
    #[inline]
    fn index_mut(&mut self, index: usize) -> &mut T {
        &mut self.chunks[index >> CHUNK_BITS].items_mut()[index & SLOT_MASK]
    }
}

impl<T> Chunks<T> {
    /// For `defrag`: moves the list of chunks, then the buffer of each chunk this vector owns
    /// alone (a chunk shared with a copy stays where it is).
    pub(super) fn defrag_buffers<R: Relocate + ?Sized>(&mut self, to: &mut R) {
        move_vec(&mut self.chunks, to);
        for chunk in &mut self.chunks {
            if let Chunk::Owned(items) = chunk {
                move_vec(items, to);
            }
        }
    }

    /// For `defrag`: hands `each` the elements in slots `from..from + count` that this vector
    /// owns alone. False when `from` is past the last slot.
    pub(super) fn defrag_slots<R: Relocate + ?Sized>(
        &mut self,
        from: usize,
        count: usize,
        to: &mut R,
        mut each: impl FnMut(&mut T, &mut R),
    ) -> bool {
        if from >= self.len {
            return false;
        }
        for slot in from..(from + count).min(self.len) {
            if let Some(Chunk::Owned(items)) = self.chunks.get_mut(slot >> CHUNK_BITS) {
                if let Some(item) = items.get_mut(slot & SLOT_MASK) {
                    each(item, to);
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_pops_and_indexes_across_chunk_edges() {
        let mut chunks = Chunks::default();
        let n = 3 * CHUNK + 5;
        for i in 0..n {
            chunks.push(i);
        }
        assert_eq!(chunks.len(), n);
        assert!((0..n).all(|i| chunks[i] == i && chunks.get(i) == Some(&i)));
        assert_eq!(chunks.get(n), None);
        assert!(chunks.iter().copied().eq(0..n));
        chunks[CHUNK] = 7;
        assert_eq!(chunks[CHUNK], 7);
        for i in (CHUNK + 1..n).rev() {
            assert_eq!(chunks.pop(), Some(i));
        }
        assert_eq!(chunks.len(), CHUNK + 1);
        assert!(chunks.reserved_bytes() <= 3 * CHUNK * std::mem::size_of::<usize>());
        while chunks.pop().is_some() {}
        assert_eq!(chunks.len(), 0);
    }

    #[test]
    fn a_copy_shares_its_chunks_until_one_side_writes_to_one() {
        let mut original = Chunks::default();
        let n = 4 * CHUNK;
        for i in 0..n {
            original.push(i);
        }
        let mut copy = original.share();
        assert_eq!(copy.shared_with(&original), 4);
        // A write to one slot unshares that chunk alone, on the side that wrote.
        copy[CHUNK + 1] = 0;
        assert_eq!(copy.shared_with(&original), 3);
        assert_eq!((original[CHUNK + 1], copy[CHUNK + 1]), (CHUNK + 1, 0));
        original[2 * CHUNK] = 1;
        assert_eq!(copy.shared_with(&original), 2);
        assert_eq!((original[2 * CHUNK], copy[2 * CHUNK]), (1, 2 * CHUNK));
        // Pushes and pops on either side leave the other as it was.
        copy.pop();
        original.push(9);
        assert_eq!((original.len(), copy.len()), (n + 1, n - 1));
        assert_eq!(original[n - 1], n - 1);
        assert!(copy.iter().copied().eq((0..n - 1).map(|i| match i {
            i if i == CHUNK + 1 => 0,
            i => i,
        })));
        // Dropping one side leaves the other whole, and the survivor takes the chunks back
        // without copying them.
        drop(original);
        assert_eq!(copy[3 * CHUNK], 3 * CHUNK);
        let before = copy.get(3 * CHUNK).map(std::ptr::from_ref);
        copy[3 * CHUNK] = 3;
        assert_eq!(copy.get(3 * CHUNK).map(std::ptr::from_ref), before);
        // A plain clone copies the chunks a side owns and shares those already shared (here
        // the two that neither side wrote).
        let mut third = copy.clone();
        assert_eq!(third.shared_with(&copy), 2);
        third[0] = 5;
        assert_eq!((copy[0], third[0]), (0, 5));
    }
}
