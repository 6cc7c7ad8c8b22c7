//! A hash table that grows a segment at a time (linear hashing), so that no insertion rehashes
//! more than one small segment.
//!
//! hashbrown grows a table by rehashing every entry into a new allocation twice the size: at
//! four million owners that one insertion takes a third of a second, during which Redis serves
//! nobody; even done a step at a time, allocating and clearing the new table's control bytes
//! takes milliseconds at ten million. Here the entries are spread over segments, each a small
//! hash table sized to its entries (`Segment`), chosen by the hash's upper bits. When the table
//! holds more than `SEGMENT_LOAD` entries per segment on average, one segment splits: the
//! entries whose next hash bit is set move to a new segment at the end, as in Litwin's linear
//! hashing. The segment to split goes round in order, so every segment splits once per doubling
//! and the segments stay within about twice the average. The longest insertion therefore moves
//! one segment's entries, a few thousand at most, whatever the size. Removals shrink the table the same way:
//! below a quarter of that load the last split is undone, one segment per removal, so a mass
//! release gives the memory back without one call freeing thousands of segments. A last segment
//! that empties is merged at once, whatever the load, since that moves nothing: a table emptied
//! through `any` empties its segments from the last.
//!
//! The table holds no hasher; the caller passes the hash of each entry, because the entries are
//! ids whose keys (segments, tokens) live elsewhere.
//!
//! Growing or splitting a segment re-hashes each entry it moves, and for an id that reads the
//! key's node or owner, a cache miss per entry at a million locks. Keeping 32 bits of the hash
//! beside each id would spare those reads, but it was measured at 158 bytes per lock at
//! 1,000,000 (140.6 without), past the 150 the project allows, so the tables keep ids alone.
//! Instead, before a segment is re-hashed, every key it will read is prefetched
//! (`Rehasher::prefetch`): the misses then overlap, some ten at a time, instead of each waiting
//! for the one before it.
//!
//! Segments are shared between copies of a table: a clone copies one pointer per segment, and
//! the first write to a segment that another copy still holds copies that segment alone, a few
//! thousand entries at most. Unlike the arenas' chunks, which go behind an `Arc` only when first
//! shared, segments always sit behind one: the children's tables live inside the node arena's
//! chunks, and copying such a chunk must cost a pointer per segment, not the segments' entries.
//! Their reference count is touched once per write to a table, against the arena's every access.

use std::sync::Arc;

use super::defrag::{move_vec, rebuild_unique, Relocate};
use super::segment::{self, Segment};
use crate::alloc::allocation;

/// The average entries per segment above which a segment splits.
const SEGMENT_LOAD: usize = 1024;
/// The average below which the last split is undone: far enough below `SEGMENT_LOAD` that a
/// table going up and down around one size does not split and merge the same segment each time.
const MERGE_LOAD: usize = SEGMENT_LOAD / 4;

#[derive(Clone, Debug)]
pub(super) struct LinearTable<T> {
    /// `2^level + split` segments; empty until the first insertion.
    segments: Vec<Arc<Segment<T>>>,
    level: u32,
    /// The next segment to split, below `2^level`. The segments before it, and those from
    /// `2^level` on, use one more bit of the hash.
    split: u32,
    len: u32,
    /// The bytes the segments' slots and control bytes take, by their capacities, kept as they
    /// change so that the memory estimate reads it in one step (`heap_bytes`). In the padding
    /// after the counts, so the table is no larger for it; no table reaches 4 GB.
    slots: u32,
}

impl<T> Default for LinearTable<T> {
    fn default() -> Self {
        LinearTable {
            segments: Vec::new(),
            level: 0,
            split: 0,
            len: 0,
            slots: 0,
        }
    }
}

/// The bytes a segment's slots and control bytes take, as the allocator rounds them: what
/// the segment allocated for them, in one block.
fn slot_bytes<T>(segment: &Segment<T>) -> u32 {
    slot_bytes_at::<T>(segment.capacity())
}

/// The same for a segment of `capacity` slots: an insertion or removal that leaves the capacity
/// as it was, nearly all of them, need not ask again.
fn slot_bytes_at<T>(capacity: usize) -> u32 {
    allocation(segment::bytes::<T>(capacity)) as u32
}

/// How a table finds the hash of an entry it holds, to re-hash it when a segment grows, splits
/// or merges. Any `Fn(&T) -> u64` is one; a key that lives elsewhere in memory also says how to
/// start loading it, so that a re-hash of many entries waits for memory about once.
pub(super) trait Rehasher<T> {
    fn hash(&self, value: &T) -> u64;

    /// Starts loading what `hash` reads for `value`, without waiting for it.
    fn prefetch(&self, _value: &T) {}
}

impl<T, F: Fn(&T) -> u64> Rehasher<T> for F {
    fn hash(&self, value: &T) -> u64 {
        self(value)
    }
}

/// Asks the processor to start loading the cache line at `at`. It is only a hint: it reads
/// nothing, cannot fault, and does nothing where the architecture has no such instruction.
#[inline]
pub(super) fn prefetch<T>(at: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch does not access memory in a way that can fault or be observed; `at` is
    // a live reference in any case.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((at as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Prefetches the keys of every entry of `segment`, ahead of a re-hash that reads them all.
fn prefetch_all<T>(segment: &Segment<T>, rehasher: &impl Rehasher<T>) {
    for value in segment.iter() {
        rehasher.prefetch(value);
    }
}

/// The hash bits that choose a segment: the upper half, as a segment uses the lower bits to
/// place an entry and the top seven as its tag.
fn segment_bits(hash: u64) -> usize {
    (hash >> 32) as usize & 0x00ff_ffff
}

impl<T: Clone> LinearTable<T> {
    pub(super) fn len(&self) -> usize {
        self.len as usize
    }

    /// Some entry of the table, for a caller that empties it one entry at a time: from the last
    /// segment, which the merges that removals cause would move anyway.
    pub(super) fn any(&self) -> Option<&T> {
        self.segments
            .iter()
            .rev()
            .find_map(|segment| segment.iter().next())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn segment_of(&self, hash: u64) -> usize {
        let bits = segment_bits(hash);
        let at = bits & ((1 << self.level) - 1);
        if at < self.split as usize {
            bits & ((2 << self.level) - 1)
        } else {
            at
        }
    }

    pub(super) fn find(&self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<&T> {
        self.segments.get(self.segment_of(hash))?.find(hash, eq)
    }

    pub(super) fn find_mut(&mut self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<&mut T> {
        let at = self.segment_of(hash);
        Arc::make_mut(self.segments.get_mut(at)?).find_mut(hash, eq)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.segments.iter().flat_map(|segment| segment.iter())
    }

    /// Appends every entry to `out`, room made once for all of them.
    pub(super) fn append_to(&self, out: &mut Vec<T>) {
        out.reserve(self.len());
        for segment in &self.segments {
            out.extend(segment.iter().cloned());
        }
    }

    /// A table of `entries`, each with its hash, built at once: the segments that inserting
    /// them one by one would reach, each sized for what it holds and filled in turn, so that
    /// building it reads and writes memory in order and re-hashes nothing (`rehasher` is there
    /// for form's sake). `same` tells apart two entries of one hash; an entry the same as one
    /// before it is not added but returned.
    pub(super) fn build(
        entries: Vec<(u64, T)>,
        same: impl Fn(&T, &T) -> bool,
        rehasher: impl Rehasher<T>,
    ) -> Result<LinearTable<T>, T> {
        let len = entries.len();
        if len == 0 {
            return Ok(LinearTable::default());
        }
        if len <= SEGMENT_LOAD {
            // One segment: no sorting by segment.
            let mut built = Segment::with_capacity(len);
            for (hash, value) in entries {
                if built.find(hash, |other| same(other, &value)).is_some() {
                    return Err(value);
                }
                built.insert_unique(hash, value, |v| rehasher.hash(v));
            }
            return Ok(LinearTable {
                slots: slot_bytes(&built),
                segments: vec![Arc::new(built)],
                level: 0,
                split: 0,
                len: len as u32,
            });
        }
        let mut level = 0;
        while (1usize << level) * SEGMENT_LOAD < len {
            level += 1;
        }
        let mut table = LinearTable {
            segments: Vec::new(),
            level,
            split: 0,
            len: 0,
            slots: 0,
        };
        // The entries sorted by segment in place (a counting sort that swaps each entry to its
        // segment's next free place), then each segment built in turn.
        let mut entries = entries;
        let mut starts = vec![0usize; (1 << level) + 1];
        for (hash, _) in &entries {
            starts[table.segment_of(*hash) + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut next = starts.clone();
        for segment in 0..1usize << level {
            while next[segment] < starts[segment + 1] {
                let at = table.segment_of(entries[next[segment]].0);
                if at == segment {
                    next[segment] += 1;
                } else {
                    entries.swap(next[segment], next[at]);
                    next[at] += 1;
                }
            }
        }
        let mut sorted = entries.into_iter();
        for segment in 0..1usize << level {
            let count = starts[segment + 1] - starts[segment];
            let mut built = Segment::with_capacity(count);
            for (hash, value) in sorted.by_ref().take(count) {
                if built.find(hash, |other| same(other, &value)).is_some() {
                    return Err(value);
                }
                // Sized for every entry of the segment, so nothing is re-hashed.
                built.insert_unique(hash, value, |v| rehasher.hash(v));
            }
            table.slots += slot_bytes(&built);
            table.segments.push(Arc::new(built));
        }
        table.len = len as u32;
        Ok(table)
    }

    /// Inserts an entry known to be absent.
    pub(super) fn insert_unique(&mut self, hash: u64, value: T, rehasher: impl Rehasher<T>) {
        if self.segments.is_empty() {
            self.segments.push(Arc::new(Segment::new()));
        }
        let at = self.segment_of(hash);
        let segment = Arc::make_mut(&mut self.segments[at]);
        let capacity = segment.capacity();
        if segment.will_rebuild() {
            // This insertion may grow the segment, which re-hashes all it holds.
            prefetch_all(segment, &rehasher);
        }
        segment.insert_unique(hash, value, |v| rehasher.hash(v));
        if segment.capacity() != capacity {
            self.slots = self.slots - slot_bytes_at::<T>(capacity) + slot_bytes(segment);
        }
        self.len += 1;
        if self.len as usize > self.segments.len() * SEGMENT_LOAD {
            self.split_one(&rehasher);
        }
    }

    /// Removes the entry `eq` picks among those of `hash`, and returns it.
    pub(super) fn remove(
        &mut self,
        hash: u64,
        eq: impl FnMut(&T) -> bool,
        rehasher: impl Rehasher<T>,
    ) -> Option<T> {
        let at = self.segment_of(hash);
        let segment = Arc::make_mut(self.segments.get_mut(at)?);
        if segment.will_shrink_on_removal() {
            prefetch_all(segment, &rehasher);
        }
        let capacity = segment.capacity();
        let removed = segment.remove(hash, eq, |v| rehasher.hash(v))?;
        if segment.capacity() != capacity {
            self.slots = self.slots - slot_bytes_at::<T>(capacity) + slot_bytes(segment);
        }
        self.len -= 1;
        if self.len == 0 && self.segments.len() == 1 {
            // An empty table gives its memory back and starts over.
            *self = LinearTable::default();
        } else if self.segments.len() > 1
            && ((self.len as usize) < self.segments.len() * MERGE_LOAD
                || self.segments[self.segments.len() - 1].len() == 0)
        {
            // An empty last segment is merged whatever the load: it moves nothing, and a table
            // emptied through `any`, which takes from the last segment, would otherwise keep
            // every segment it had emptied until three quarters of its entries were gone, and
            // `any` would read past all of them on each call. Freeing a token's 2,000,000
            // locks that way took 0.8 ms a step of 64 locks, rising with the size.
            self.merge_one(&rehasher);
        }
        Some(removed)
    }

    /// The bytes the table takes on the heap, as the allocator rounds them, for the memory
    /// estimates: its segments' slots, their shared allocations and the vector of segments.
    /// The vector is taken at the power of two it grows to: a copy's is exactly as long as it
    /// needs, and a copy made to write to a shared piece must not change what the original
    /// table is counted at.
    pub(super) fn heap_bytes(&self) -> usize {
        if self.segments.is_empty() {
            return 0;
        }
        let shared = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<Segment<T>>();
        let vector = self.segments.len().next_power_of_two().max(4);
        self.slots as usize
            + self.segments.len() * allocation(shared)
            + allocation(vector * std::mem::size_of::<usize>())
    }

    /// Undoes the last split: the last segment's entries go back to the segment they came from.
    fn merge_one(&mut self, rehasher: &impl Rehasher<T>) {
        if self.split == 0 {
            self.level -= 1;
            self.split = 1 << self.level;
        }
        self.split -= 1;
        let Some(last) = self.segments.pop() else {
            return;
        };
        self.slots -= slot_bytes(&last);
        let into = Arc::make_mut(&mut self.segments[self.split as usize]);
        let before = slot_bytes(into);
        prefetch_all(&last, rehasher);
        if !into.has_room(last.len()) {
            prefetch_all(into, rehasher);
        }
        into.reserve(last.len(), |v| rehasher.hash(v));
        // The last segment is taken as it is when no other copy holds it, copied otherwise.
        Arc::unwrap_or_clone(last)
            .drain(|value| into.insert_unique(rehasher.hash(&value), value, |v| rehasher.hash(v)));
        self.slots = self.slots - before + slot_bytes(into);
    }

    /// Splits the next segment in turn: the entries with the next hash bit set move to a new
    /// segment at the end.
    fn split_one(&mut self, rehasher: &impl Rehasher<T>) {
        let from = self.split as usize;
        let bit = 1usize << self.level;
        let source = Arc::make_mut(&mut self.segments[from]);
        prefetch_all(source, rehasher);
        // About half the entries move, and half stay: both halves are rebuilt, each with room
        // for all the entries, as a segment doubles between two of its splits: so it is not
        // rebuilt on the way, and is at its fullest when the table stops growing half-way.
        let share = source.len();
        let mut stay = Segment::with_capacity(share);
        let mut moved = Segment::with_capacity(share);
        source.drain(|value| {
            let hash = rehasher.hash(&value);
            let to = if segment_bits(hash) & bit != 0 {
                &mut moved
            } else {
                &mut stay
            };
            to.insert_unique(hash, value, |v| rehasher.hash(v));
        });
        self.slots = self.slots - slot_bytes(source) + slot_bytes(&stay) + slot_bytes(&moved);
        *source = stay;
        self.segments.push(Arc::new(moved));
        self.split += 1;
        if self.split as usize == bit {
            self.level += 1;
            self.split = 0;
        }
    }
}

impl<T: Clone> LinearTable<T> {
    /// For `defrag`: moves the list of segments.
    pub(super) fn defrag_spine<R: Relocate + ?Sized>(&mut self, to: &mut R) {
        move_vec(&mut self.segments, to);
    }

    /// For `defrag`: rebuilds segment `i` in a fresh allocation (its own and the `Arc`'s), unless
    /// a copy shares it. The clone has the same buckets, so `slots` holds.
    /// False when `i` is past the last segment.
    pub(super) fn defrag_segment<R: Relocate + ?Sized>(&mut self, i: usize, to: &mut R) -> bool {
        let Some(segment) = self.segments.get_mut(i) else {
            return false;
        };
        rebuild_unique(segment, to);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(v: &u64) -> u64 {
        super::super::idmap::spread(*v)
    }

    #[test]
    fn agrees_with_a_set_through_growth_and_removal() {
        let mut table = LinearTable::default();
        let mut model = std::collections::BTreeSet::new();
        for i in 0..200_000u64 {
            // Insert a value, then now and then remove one inserted earlier.
            table.insert_unique(hash(&i), i, hash);
            model.insert(i);
            if i % 3 == 0 {
                let gone = i / 2;
                let removed = table.remove(hash(&gone), |&v| v == gone, hash);
                assert_eq!(removed, model.take(&gone));
            }
        }
        assert!(table.segments.len() > 64);
        assert_eq!(table.len(), model.len());
        let slots = |t: &LinearTable<u64>| t.segments.iter().map(|s| slot_bytes(s)).sum::<u32>();
        assert_eq!(
            table.slots,
            slots(&table),
            "the slots counted as they changed"
        );
        let mut listed: Vec<u64> = table.iter().copied().collect();
        listed.sort_unstable();
        assert!(listed.iter().eq(model.iter()));
        for &i in &model {
            assert_eq!(table.find(hash(&i), |&v| v == i), Some(&i));
            assert!(table.remove(hash(&i), |&v| v == i, hash).is_some());
            // Shrinking keeps the segments at a quarter of their load or more.
            assert!(table.segments.len() <= 1 + table.len() / MERGE_LOAD);
        }
        assert!(table.is_empty());
        assert!(table.segments.is_empty());
        assert_eq!((table.slots, table.heap_bytes()), (0, 0));
    }

    #[test]
    fn a_table_emptied_through_any_keeps_no_empty_segment_behind() {
        // What freeing a buried token does: take some entry, remove it, again. `any` takes from
        // the last segment, so the last segment empties first; it must go then, not once the
        // load falls to `MERGE_LOAD`, or each `any` reads past every segment emptied before.
        let mut table = LinearTable::default();
        for i in 0..200_000u64 {
            table.insert_unique(hash(&i), i, hash);
        }
        let mut model: std::collections::BTreeSet<u64> = (0..200_000).collect();
        let mut removals = 0;
        while let Some(&some) = table.any() {
            assert!(model.remove(&some), "{some} listed once");
            assert_eq!(table.remove(hash(&some), |&v| v == some, hash), Some(some));
            removals += 1;
            if table.segments.len() > 1 {
                let last = &table.segments[table.segments.len() - 1];
                assert!(
                    last.len() > 0,
                    "an empty last segment after {removals} removals"
                );
                // Every segment but the one being emptied stays about as full as it was.
                assert!(table.segments.len() <= 2 + table.len() / (SEGMENT_LOAD / 2));
            }
        }
        assert_eq!(removals, 200_000);
        assert!(model.is_empty() && table.is_empty() && table.segments.is_empty());
    }

    #[test]
    fn copies_share_segments_and_stay_independent() {
        let mut original = LinearTable::default();
        for i in 0..100_000u64 {
            original.insert_unique(hash(&i), i, hash);
        }
        let mut copy = original.clone();
        let shared = |a: &LinearTable<u64>, b: &LinearTable<u64>| {
            a.segments
                .iter()
                .zip(&b.segments)
                .filter(|(x, y)| Arc::ptr_eq(x, y))
                .count()
        };
        assert_eq!(shared(&original, &copy), original.segments.len());
        // One removal and one insertion on the copy unshare at most the segments they touch,
        // plus the one a merge or split moves entries between.
        copy.remove(hash(&7), |&v| v == 7, hash);
        copy.insert_unique(hash(&1_000_000), 1_000_000, hash);
        assert!(shared(&original, &copy) + 4 >= original.segments.len());
        // Grow the copy through splits and shrink the original through merges.
        for i in 100_000..300_000u64 {
            copy.insert_unique(hash(&i), i, hash);
        }
        for i in 0..90_000u64 {
            assert_eq!(original.remove(hash(&i), |&v| v == i, hash), Some(i));
        }
        assert_eq!(original.len(), 10_000);
        assert_eq!(copy.len(), 300_000);
        assert_eq!(copy.find(hash(&7), |&v| v == 7), None);
        assert_eq!(original.find(hash(&7), |&v| v == 7), None);
        assert_eq!(
            original.find(hash(&95_000), |&v| v == 95_000),
            Some(&95_000)
        );
        assert_eq!(copy.find(hash(&5), |&v| v == 5), Some(&5));
        assert_eq!(original.find(hash(&1_000_000), |&v| v == 1_000_000), None);
        let mut listed: Vec<u64> = original.iter().copied().collect();
        listed.sort_unstable();
        assert!(listed.into_iter().eq(90_000..100_000));
    }

    #[test]
    fn a_table_built_at_once_agrees_with_one_built_by_insertions() {
        for n in [0u64, 1, 1_000, 1_025, 5_000, 70_000] {
            let entries: Vec<(u64, u64)> = (0..n).map(|i| (hash(&i), i)).collect();
            let mut built = LinearTable::build(entries, |a, b| a == b, hash).expect("no repeats");
            assert_eq!(built.len(), n as usize);
            for i in 0..n {
                assert_eq!(built.find(hash(&i), |&v| v == i), Some(&i));
            }
            // It grows and shrinks from there as any other.
            for i in n..n + 3_000 {
                built.insert_unique(hash(&i), i, hash);
            }
            for i in 0..n + 3_000 {
                assert_eq!(built.remove(hash(&i), |&v| v == i, hash), Some(i));
            }
            assert!(built.is_empty());
        }
        let repeated = vec![(hash(&1), 1u64), (hash(&2), 2), (hash(&1), 1)];
        assert_eq!(
            LinearTable::build(repeated, |a, b| a == b, hash).err(),
            Some(1)
        );
    }

    #[test]
    fn no_segment_grows_past_a_few_times_the_average() {
        let mut table = LinearTable::default();
        for i in 0..1_000_000u64 {
            table.insert_unique(hash(&i), i, hash);
        }
        let largest = table.segments.iter().map(|s| s.len()).max();
        assert!(
            largest.is_some_and(|n| n <= 3 * SEGMENT_LOAD),
            "{largest:?}"
        );
    }
}
