//! The free slots of an arena, handed out lowest first, so that an arena's tail empties when the
//! locks that used it go and can be given back.
//!
//! A stack of free ids hands out the slot freed last, which scatters new entries over the whole
//! arena: after a quarter of a million locks come and go, the arena keeps its full length, a
//! chunk of it for every few live entries, and `used_memory` does not come back. Handing out
//! the lowest free slot instead fills the arena from its start, so the slots at its end are the
//! last taken and the first to fall free together; `Tree::trim_some` then pops them off the
//! end, a bounded number per call, and the arena's chunks go back to the allocator.
//!
//! The set is a bitmap with a summary word per 64 words: finding the lowest free slot looks at
//! the summary from a hint (every summary word below the hint is zero), so it costs a few words
//! whatever the arena's size. Both vectors grow by a word at a time, a copy of 1.25 MB at ten
//! million slots at most.

use crate::alloc::allocation;

#[derive(Clone, Debug, Default)]
pub struct FreeSlots {
    /// One bit per slot, set when the slot is free.
    bits: Vec<u64>,
    /// One bit per word of `bits`, set when that word has a free slot.
    summary: Vec<u64>,
    /// No summary word below this one has a bit set.
    hint: usize,
    len: usize,
}

impl FreeSlots {
    pub fn len(&self) -> usize {
        self.len
    }

    /// The bytes the bitmaps take on the heap, for the memory estimate.
    pub fn heap_bytes(&self) -> usize {
        let words = self.bits.capacity() + self.summary.capacity();
        allocation(words * std::mem::size_of::<u64>())
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, id: u32) -> bool {
        let id = id as usize;
        self.bits
            .get(id / 64)
            .is_some_and(|word| word & (1 << (id % 64)) != 0)
    }

    /// Marks `id` free. It must not be free already.
    pub fn insert(&mut self, id: u32) {
        let id = id as usize;
        let word = id / 64;
        if word >= self.bits.len() {
            self.bits.resize(word + 1, 0);
            self.summary.resize(self.bits.len().div_ceil(64), 0);
        }
        debug_assert!(
            self.bits[word] & (1 << (id % 64)) == 0,
            "slot {id} freed twice"
        );
        self.bits[word] |= 1 << (id % 64);
        self.summary[word / 64] |= 1 << (word % 64);
        self.hint = self.hint.min(word / 64);
        self.len += 1;
    }

    /// Takes `id` out of the set, if it is there.
    pub fn remove(&mut self, id: u32) -> bool {
        if !self.contains(id) {
            return false;
        }
        let id = id as usize;
        let word = id / 64;
        self.bits[word] &= !(1 << (id % 64));
        if self.bits[word] == 0 {
            self.summary[word / 64] &= !(1 << (word % 64));
        }
        self.len -= 1;
        // Trailing empty words go, so that the bitmap shrinks with its arena.
        while self.bits.last() == Some(&0) {
            self.bits.pop();
        }
        self.summary.truncate(self.bits.len().div_ceil(64));
        self.hint = self.hint.min(self.summary.len());
        true
    }

    /// Takes the lowest free slot.
    pub fn pop_lowest(&mut self) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        while self.summary.get(self.hint) == Some(&0) {
            self.hint += 1;
        }
        let summary = *self.summary.get(self.hint)?;
        let word = self.hint * 64 + summary.trailing_zeros() as usize;
        let bit = self.bits[word].trailing_zeros() as usize;
        let id = (word * 64 + bit) as u32;
        self.remove(id);
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn hands_out_the_lowest_free_slot_and_shrinks_with_its_tail() {
        let mut free = FreeSlots::default();
        let mut model = BTreeSet::new();
        let mut x = 7u64;
        for step in 0..50_000u32 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let id = (x >> 44) as u32 % 20_000;
            if step % 3 == 2 {
                assert_eq!(free.pop_lowest(), model.pop_first());
            } else if model.insert(id) {
                free.insert(id);
            }
            assert_eq!(free.len(), model.len());
            assert_eq!(free.contains(id), model.contains(&id));
        }
        while let Some(&last) = model.last() {
            assert!(free.remove(last));
            model.remove(&last);
            assert_eq!(
                free.bits.len(),
                model.last().map_or(0, |&id| id as usize / 64 + 1)
            );
        }
        assert_eq!(free.pop_lowest(), None);
        assert!(free.summary.is_empty());
    }
}
