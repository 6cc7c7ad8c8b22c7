//! A vector kept in fixed-size chunks, so that growing it never moves what it holds, and whose
//! chunks are shared between copies until one of them writes.
//!
//! A `Vec` of ten million nodes doubles by copying 640 MB in one call, which would stall Redis
//! for a large part of a second. Here a push that fills a chunk allocates the next one (4,096
//! elements) and the outer vector of chunk pointers grows by copying one pointer per chunk, so
//! the longest push costs one allocation of a chunk. An index is split into a chunk and a slot.
//!
//! Each chunk sits behind an `Arc`, so cloning the vector copies one pointer per chunk, not the
//! elements: `COPY` of a project with ten million nodes copies about 2,500 pointers. The first
//! write to a chunk that another copy still holds copies that chunk alone (`Arc::make_mut`), so
//! no write after a copy costs more than one chunk, and chunks that neither copy writes stay
//! shared for good. `Arc` rather than `Rc` because the server may free one copy in its
//! lazy-free thread while the other is in use on the main thread: the counts are atomic, and
//! the last owner of a chunk, on whichever thread, frees it.

use std::ops::{Index, IndexMut};
use std::sync::Arc;

const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;
const SLOT_MASK: usize = CHUNK - 1;

#[derive(Clone, Debug)]
pub(super) struct Chunks<T> {
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
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
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn push(&mut self, value: T) {
        let chunk = self.len >> CHUNK_BITS;
        if chunk == self.chunks.len() {
            // The first chunk grows as a `Vec` does, by doubling up to a chunk, so that a small
            // project (most are) holds what it uses rather than a whole chunk: a move of at
            // most one chunk is as bounded as allocating one. Later chunks are whole at once.
            self.chunks.push(Arc::new(if chunk == 0 {
                Vec::new()
            } else {
                Vec::with_capacity(CHUNK)
            }));
        }
        Arc::make_mut(&mut self.chunks[chunk]).push(value);
        self.len += 1;
    }

    pub(super) fn pop(&mut self) -> Option<T> {
        let last = self.len.checked_sub(1)?;
        let value = Arc::make_mut(&mut self.chunks[last >> CHUNK_BITS]).pop();
        self.len = last;
        // One empty chunk is kept, so that pushing and popping across a chunk's edge does not
        // allocate and free a chunk each time.
        if self.chunks.len() > (last >> CHUNK_BITS) + 2 {
            self.chunks.pop();
        }
        value
    }

    pub(super) fn get(&self, index: usize) -> Option<&T> {
        self.chunks
            .get(index >> CHUNK_BITS)
            .and_then(|chunk| chunk.get(index & SLOT_MASK))
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks.iter().flat_map(|chunk| chunk.iter())
    }

    /// The bytes the chunks reserve, full or not.
    #[cfg(test)]
    pub(super) fn reserved_bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.capacity()).sum::<usize>() * std::mem::size_of::<T>()
    }

    /// How many chunks this vector and `other` hold in common, for tests of sharing.
    #[cfg(test)]
    pub(super) fn shared_with(&self, other: &Chunks<T>) -> usize {
        self.chunks
            .iter()
            .zip(&other.chunks)
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count()
    }
}

impl<T> Index<usize> for Chunks<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        &self.chunks[index >> CHUNK_BITS][index & SLOT_MASK]
    }
}

impl<T: Clone> IndexMut<usize> for Chunks<T> {
    fn index_mut(&mut self, index: usize) -> &mut T {
        &mut Arc::make_mut(&mut self.chunks[index >> CHUNK_BITS])[index & SLOT_MASK]
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
        let mut copy = original.clone();
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
        // Dropping one side leaves the other whole.
        drop(original);
        assert_eq!(copy[3 * CHUNK], 3 * CHUNK);
    }
}
