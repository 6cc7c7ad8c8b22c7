//! A vector kept in fixed-size chunks, so that growing it never moves what it holds.
//!
//! A `Vec` of ten million nodes doubles by copying 640 MB in one call, which would stall Redis
//! for a large part of a second. Here a push that fills a chunk allocates the next one (4,096
//! elements) and the outer vector of chunk pointers grows by copying one pointer per chunk, so
//! the longest push costs one allocation of a chunk. An index is split into a chunk and a slot.

use std::ops::{Index, IndexMut};

const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;
const SLOT_MASK: usize = CHUNK - 1;

#[derive(Clone, Debug)]
pub(super) struct Chunks<T> {
    chunks: Vec<Vec<T>>,
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

impl<T> Chunks<T> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn push(&mut self, value: T) {
        let chunk = self.len >> CHUNK_BITS;
        if chunk == self.chunks.len() {
            // The first chunk grows as a `Vec` does, by doubling up to a chunk, so that a small
            // project (most are) holds what it uses rather than a whole chunk: a move of at
            // most one chunk is as bounded as allocating one. Later chunks are whole at once.
            self.chunks.push(if chunk == 0 {
                Vec::new()
            } else {
                Vec::with_capacity(CHUNK)
            });
        }
        self.chunks[chunk].push(value);
        self.len += 1;
    }

    pub(super) fn pop(&mut self) -> Option<T> {
        let last = self.len.checked_sub(1)?;
        let value = self.chunks[last >> CHUNK_BITS].pop();
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
        self.chunks.iter().flatten()
    }

    /// The bytes the chunks reserve, full or not.
    #[cfg(test)]
    pub(super) fn reserved_bytes(&self) -> usize {
        self.chunks.iter().map(Vec::capacity).sum::<usize>() * std::mem::size_of::<T>()
    }
}

impl<T> Index<usize> for Chunks<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        &self.chunks[index >> CHUNK_BITS][index & SLOT_MASK]
    }
}

impl<T> IndexMut<usize> for Chunks<T> {
    fn index_mut(&mut self, index: usize) -> &mut T {
        &mut self.chunks[index >> CHUNK_BITS][index & SLOT_MASK]
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
}
