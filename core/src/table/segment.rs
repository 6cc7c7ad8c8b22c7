//! One segment of a [`LinearTable`](super::rehash::LinearTable): an open-addressing hash table
//! whose capacity is chosen for its entries, not rounded up to a power of two.
//!
//! hashbrown keeps a power of two of buckets filled to at most seven eighths, so a table that
//! has just grown is less than half full: at 1,000 entries of four bytes it takes 2,048 buckets
//! and 10,256 bytes (12,288 from jemalloc), 12.3 bytes an entry. The segments of the owners'
//! index and of the children's tables sit at about that size, two per lock, so half their
//! memory was empty buckets, which a fork copies (the page tables) and the server's RSS counts.
//! This table takes any capacity: a single group of up to 16 slots, filled up to the last, or a
//! multiple of 16 filled to at most seven eighths, sized for what it holds when it is built, and
//! widened to fill the allocator's size class. At 1,000 entries it takes 1,216 slots, 6,144
//! bytes, 6.1 an entry.
//!
//! The layout is hashbrown's in small: one allocation holding a control byte per slot (empty,
//! deleted, or the hash's top seven bits) and then the slots. A lookup compares a group of 16
//! control bytes at once and reads an entry only where its seven bits match, so it rarely reads
//! a key that is not the one sought (the entries are ids whose keys live elsewhere, a cache miss
//! each). An entry's group is chosen by the hash's lower 32 bits scaled to the number of groups
//! (`(bits * groups) >> 32`), which needs no power of two; a full group sends the probe to the
//! next one. A removal leaves a tombstone only when its group is full, as only then can a probe
//! have passed it; tombstones go when the segment is next rebuilt.
//!
//! The table holds no hasher: re-hashing an entry reads its key, so every operation that may
//! rebuild the segment takes the hash function, and [`Segment::will_rebuild`] lets the caller
//! prefetch the keys first.

use std::alloc::Layout;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::alloc::allocation;

/// Control bytes compared at once.
const GROUP: usize = 16;
/// A slot that never held an entry since the segment was built: a probe stops at its group.
const EMPTY: u8 = 0xFF;
/// A slot whose entry was removed from a full group: a probe goes on past it.
const DELETED: u8 = 0x80;
/// What a group read past the end of a segment of fewer than 16 slots holds: matches nothing.
const PAST_END: u8 = 0xFE;

pub(super) struct Segment<T> {
    /// The control bytes (`capacity` of them), then the slots from `slots_offset`; dangling
    /// when the capacity is 0.
    ctrl: NonNull<u8>,
    capacity: u32,
    len: u32,
    /// Empty slots that may still take an entry before the segment must be rebuilt: what keeps
    /// a probe's groups from all being full.
    growth_left: u32,
    marker: PhantomData<T>,
}

// SAFETY: the segment owns its entries as a `Vec<T>` would; the raw pointer is only its buffer.
unsafe impl<T: Send> Send for Segment<T> {}
// SAFETY: as above; shared access hands out only `&T`.
unsafe impl<T: Sync> Sync for Segment<T> {}

/// Where the slots start after `capacity` control bytes.
fn slots_offset<T>(capacity: usize) -> usize {
    capacity.next_multiple_of(std::mem::align_of::<T>())
}

/// The bytes a segment of `capacity` asks the allocator for.
pub(super) fn bytes<T>(capacity: usize) -> usize {
    if capacity == 0 {
        0
    } else {
        slots_offset::<T>(capacity) + capacity * std::mem::size_of::<T>()
    }
}

fn layout<T>(capacity: usize) -> Layout {
    // A segment holds at most a few thousand entries (the linear table splits past that), so
    // its size is far from overflowing.
    Layout::from_size_align(bytes::<T>(capacity), std::mem::align_of::<T>())
        .expect("a segment's layout")
}

/// The entries a segment of `capacity` holds before it must grow: all its slots while they are
/// one group (a probe reads that group alone), seven eighths of them beyond.
fn max_load(capacity: usize) -> usize {
    if capacity <= GROUP {
        capacity
    } else {
        capacity - capacity / 8
    }
}

/// The capacity after `capacity`: one more slot up to a group, a group more beyond.
fn next_capacity(capacity: usize) -> usize {
    if capacity < GROUP {
        capacity + 1
    } else {
        capacity + GROUP
    }
}

/// The least capacity that holds `entries`, widened while the allocation stays in the same
/// size class of the allocator: those slots cost nothing more.
pub(super) fn capacity_for<T>(entries: usize) -> usize {
    if entries == 0 {
        return 0;
    }
    let mut capacity = if entries <= GROUP {
        entries
    } else {
        (entries + entries / 7 + 1).next_multiple_of(GROUP)
    };
    while max_load(capacity) < entries {
        capacity += GROUP;
    }
    let class = allocation(bytes::<T>(capacity));
    // A size class is at most a quarter larger than the request, so this takes a few steps.
    while bytes::<T>(next_capacity(capacity)) <= class {
        capacity = next_capacity(capacity);
    }
    capacity
}

/// The capacity to rebuild a segment of `entries` at when it grows or shrinks: room for twice
/// what it holds, so that each entry is re-hashed about once over the segment's growth, as
/// with hashbrown's doubling. Growing by less re-hashes more, and that shows: by a quarter an
/// `ACQUIRE` took 5% more instructions than with hashbrown (`bench/instructions.py`), by half
/// 1.7% more, by twice (with a split's halves given room for the whole) 0.9% fewer. What a
/// segment saves is in being sized for its entries when it is built (a load, a split, a merge)
/// and in filling its allocator's size class, not in growing by small steps: a project filled
/// by insertions took 97.0 bytes a further lock growing by twice and 95.5 growing by half
/// (Redis 7.0, 300,000 locks; 105.0 with hashbrown).
fn roomy_capacity<T>(entries: usize) -> usize {
    capacity_for::<T>(2 * entries + 1)
}

/// A group of control bytes, with the slots in it that match a test as a bit mask.
struct Group([u8; GROUP]);

impl Group {
    /// The slots that hold an entry: those whose control byte has its high bit clear.
    #[inline]
    fn full(&self) -> u32 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `matching`.
        unsafe {
            use std::arch::x86_64::{_mm_loadu_si128, _mm_movemask_epi8};
            let group = _mm_loadu_si128(self.0.as_ptr().cast());
            !(_mm_movemask_epi8(group) as u32) & 0xffff
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let mut mask = 0;
            for (i, &b) in self.0.iter().enumerate() {
                if b < DELETED {
                    mask |= 1 << i;
                }
            }
            mask
        }
    }

    #[inline]
    fn matching(&self, byte: u8) -> u32 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of x86-64; the load reads the 16 bytes of the array, unaligned.
        unsafe {
            use std::arch::x86_64::{
                _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
            };
            let group = _mm_loadu_si128(self.0.as_ptr().cast());
            _mm_movemask_epi8(_mm_cmpeq_epi8(group, _mm_set1_epi8(byte as i8))) as u32 & 0xffff
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let mut mask = 0;
            for (i, &b) in self.0.iter().enumerate() {
                if b == byte {
                    mask |= 1 << i;
                }
            }
            mask
        }
    }
}

/// The slots that match in a mask, lowest first.
fn bits(mut mask: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if mask == 0 {
            return None;
        }
        let bit = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        Some(bit)
    })
}

/// The seven bits of the hash kept in an entry's control byte.
fn tag(hash: u64) -> u8 {
    (hash >> 57) as u8
}

impl<T> Segment<T> {
    pub(super) const fn new() -> Self {
        Segment {
            ctrl: NonNull::dangling(),
            capacity: 0,
            len: 0,
            growth_left: 0,
            marker: PhantomData,
        }
    }

    /// An empty segment of exactly `capacity` slots.
    fn with_exact_capacity(capacity: usize) -> Self {
        if capacity == 0 {
            return Segment::new();
        }
        let layout = layout::<T>(capacity);
        // SAFETY: the layout's size is not zero (a capacity of at least one slot, each with its
        // control byte).
        let at = unsafe { std::alloc::alloc(layout) };
        let Some(ctrl) = NonNull::new(at) else {
            std::alloc::handle_alloc_error(layout);
        };
        // SAFETY: the allocation starts with `capacity` control bytes.
        unsafe { std::ptr::write_bytes(ctrl.as_ptr(), EMPTY, capacity) };
        Segment {
            ctrl,
            capacity: capacity as u32,
            len: 0,
            growth_left: max_load(capacity) as u32,
            marker: PhantomData,
        }
    }

    /// An empty segment that holds `entries` without growing.
    pub(super) fn with_capacity(entries: usize) -> Self {
        Segment::with_exact_capacity(capacity_for::<T>(entries))
    }

    pub(super) fn len(&self) -> usize {
        self.len as usize
    }

    /// Its slots, which with the type's size say what it allocated ([`bytes`]).
    pub(super) fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Whether inserting one more entry may rebuild the segment, re-hashing all it holds.
    pub(super) fn will_rebuild(&self) -> bool {
        self.growth_left == 0
    }

    fn groups(&self) -> usize {
        (self.capacity as usize).div_ceil(GROUP)
    }

    fn ctrl(&self, i: usize) -> u8 {
        debug_assert!(i < self.capacity as usize);
        // SAFETY: `i` is below the capacity, so within the control bytes.
        unsafe { *self.ctrl.as_ptr().add(i) }
    }

    fn set_ctrl(&mut self, i: usize, byte: u8) {
        debug_assert!(i < self.capacity as usize);
        // SAFETY: as in `ctrl`.
        unsafe { *self.ctrl.as_ptr().add(i) = byte };
    }

    fn slot(&self, i: usize) -> *mut T {
        debug_assert!(i < self.capacity as usize);
        // SAFETY: the slots start at `slots_offset` within the allocation and there are
        // `capacity` of them.
        unsafe {
            self.ctrl
                .as_ptr()
                .add(slots_offset::<T>(self.capacity as usize))
                .cast::<T>()
                .add(i)
        }
    }

    /// The 16 control bytes of group `g`; a segment of fewer slots reads `PAST_END` past them.
    #[inline]
    fn group(&self, g: usize) -> Group {
        let start = g * GROUP;
        if start + GROUP <= self.capacity as usize {
            // SAFETY: the 16 bytes from `start` are control bytes of the segment.
            return Group(unsafe {
                self.ctrl
                    .as_ptr()
                    .add(start)
                    .cast::<[u8; GROUP]>()
                    .read_unaligned()
            });
        }
        let mut group = [PAST_END; GROUP];
        let count = (self.capacity as usize - start).min(GROUP);
        // SAFETY: `start + count` is within the `capacity` control bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ctrl.as_ptr().add(start), group.as_mut_ptr(), count)
        };
        Group(group)
    }

    /// The group where a probe for `hash` starts.
    fn home(&self, hash: u64, groups: usize) -> usize {
        (((hash & 0xffff_ffff) * groups as u64) >> 32) as usize
    }

    fn find_index(&self, hash: u64, mut eq: impl FnMut(&T) -> bool) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let groups = self.groups();
        let tag = tag(hash);
        let mut g = self.home(hash, groups);
        // Seven eighths at most are full, so some group has an empty slot; the count bounds
        // the probe regardless.
        for _ in 0..groups {
            let group = self.group(g);
            for bit in bits(group.matching(tag)) {
                let i = g * GROUP + bit;
                // SAFETY: a slot whose control byte is a tag holds an entry.
                if eq(unsafe { &*self.slot(i) }) {
                    return Some(i);
                }
            }
            if group.matching(EMPTY) != 0 {
                return None;
            }
            g += 1;
            if g == groups {
                g = 0;
            }
        }
        None
    }

    pub(super) fn find(&self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<&T> {
        let i = self.find_index(hash, eq)?;
        // SAFETY: `find_index` answers slots that hold an entry.
        Some(unsafe { &*self.slot(i) })
    }

    pub(super) fn find_mut(&mut self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<&mut T> {
        let i = self.find_index(hash, eq)?;
        // SAFETY: as in `find`, and the segment is borrowed mutably.
        Some(unsafe { &mut *self.slot(i) })
    }

    /// The first slot on the probe of `hash` that takes an entry: empty or deleted.
    fn free_slot(&self, hash: u64) -> Option<usize> {
        let groups = self.groups();
        let mut g = self.home(hash, groups);
        for _ in 0..groups {
            let group = self.group(g);
            let free = group.matching(EMPTY) | group.matching(DELETED);
            if let Some(bit) = bits(free).next() {
                return Some(g * GROUP + bit);
            }
            g += 1;
            if g == groups {
                g = 0;
            }
        }
        None
    }

    /// Inserts an entry known to be absent, rebuilding the segment with room for twice what it
    /// holds when it has no room (without its tombstones).
    pub(super) fn insert_unique(&mut self, hash: u64, value: T, rehash: impl Fn(&T) -> u64) {
        let free = self
            .free_slot(hash)
            .filter(|&i| self.ctrl(i) == DELETED || self.growth_left > 0);
        match free {
            Some(i) => self.put(i, hash, value),
            None => {
                self.rebuild(roomy_capacity::<T>(self.len as usize + 1), &rehash);
                self.insert_in_room(hash, value);
            }
        }
    }

    /// Inserts an entry known to be absent into a segment known to have room for it.
    fn insert_in_room(&mut self, hash: u64, value: T) {
        let i = self
            .free_slot(hash)
            .expect("a segment sized for its entries has a free slot");
        self.put(i, hash, value);
    }

    /// Writes an entry into slot `i`, empty or deleted.
    fn put(&mut self, i: usize, hash: u64, value: T) {
        if self.ctrl(i) == EMPTY {
            self.growth_left -= 1;
        }
        self.set_ctrl(i, tag(hash));
        // SAFETY: the slot was empty or deleted, so holds no entry to overwrite.
        unsafe { self.slot(i).write(value) };
        self.len += 1;
    }

    /// Whether `additional` more entries fit without a rebuild.
    pub(super) fn has_room(&self, additional: usize) -> bool {
        self.growth_left as usize >= additional
    }

    /// Makes room for `additional` more entries at once.
    pub(super) fn reserve(&mut self, additional: usize, rehash: impl Fn(&T) -> u64) {
        if !self.has_room(additional) {
            self.rebuild(capacity_for::<T>(self.len as usize + additional), &rehash);
        }
    }

    /// Removes the entry `eq` picks among those of `hash`. A segment left under an eighth of its
    /// load is rebuilt smaller, so a folder emptied gives its memory back step by step.
    pub(super) fn remove(
        &mut self,
        hash: u64,
        eq: impl FnMut(&T) -> bool,
        rehash: impl Fn(&T) -> u64,
    ) -> Option<T> {
        let i = self.find_index(hash, eq)?;
        let value = self.take(i);
        if self.too_roomy(self.len as usize) {
            self.rebuild(roomy_capacity::<T>(self.len as usize), &rehash);
        }
        Some(value)
    }

    /// Whether a removal rebuilds the segment smaller, re-hashing all it holds.
    pub(super) fn will_shrink_on_removal(&self) -> bool {
        self.too_roomy((self.len as usize).saturating_sub(1))
    }

    /// Whether `entries` leave the segment under an eighth of its load: far enough below what
    /// it is rebuilt at (half) that removals and insertions around one size do not
    /// rebuild it each time, and low enough that the rebuilds of a mass removal re-hash an
    /// entry about a seventh of a time (a quarter cost `RELEASE` 2% more instructions). Past a
    /// group only: a segment of one group is small enough as it is.
    fn too_roomy(&self, entries: usize) -> bool {
        let capacity = self.capacity as usize;
        capacity > GROUP && entries * 8 < max_load(capacity)
    }

    /// Takes the entry out of slot `i`, leaving it empty or, if its group is full (a probe may
    /// have passed it), deleted.
    fn take(&mut self, i: usize) -> T {
        let g = i / GROUP;
        let open = self.groups() == 1 || self.group(g).matching(EMPTY) != 0;
        if open {
            self.set_ctrl(i, EMPTY);
            self.growth_left += 1;
        } else {
            self.set_ctrl(i, DELETED);
        }
        self.len -= 1;
        // SAFETY: the slot held an entry, now marked gone, so it is read out once.
        unsafe { self.slot(i).read() }
    }

    /// Moves every entry into a fresh allocation of `capacity` slots.
    fn rebuild(&mut self, capacity: usize, rehash: &impl Fn(&T) -> u64) {
        let mut fresh = Segment::with_exact_capacity(capacity);
        self.drain(|value| fresh.insert_in_room(rehash(&value), value));
        *self = fresh;
    }

    /// Hands every entry to `each`, leaving the segment empty (its allocation kept).
    pub(super) fn drain(&mut self, mut each: impl FnMut(T)) {
        for g in 0..self.groups() {
            for bit in bits(self.group(g).full()) {
                let i = g * GROUP + bit;
                // Marked empty before it is handed on, so a panic in `each` cannot drop it
                // twice.
                self.set_ctrl(i, EMPTY);
                self.len -= 1;
                // SAFETY: the control byte said the slot held an entry.
                each(unsafe { self.slot(i).read() });
            }
        }
        // SAFETY: the allocation starts with `capacity` control bytes.
        unsafe { std::ptr::write_bytes(self.ctrl.as_ptr(), EMPTY, self.capacity as usize) };
        self.growth_left = max_load(self.capacity as usize) as u32;
    }

    /// The slots that hold an entry, a group at a time.
    fn full_slots(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.groups())
            .flat_map(move |g| bits(self.group(g).full()).map(move |bit| g * GROUP + bit))
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.full_slots()
            // SAFETY: the control byte says the slot holds an entry.
            .map(|i| unsafe { &*self.slot(i) })
    }
}

impl<T> Drop for Segment<T> {
    fn drop(&mut self) {
        if self.capacity == 0 {
            return;
        }
        if std::mem::needs_drop::<T>() {
            for i in self.full_slots() {
                // SAFETY: the slot holds an entry, dropped once as the segment goes (the
                // pointer is the allocation's own, not borrowed from `self`).
                unsafe { self.slot(i).drop_in_place() };
            }
        }
        // SAFETY: allocated in `with_exact_capacity` with this layout.
        unsafe { std::alloc::dealloc(self.ctrl.as_ptr(), layout::<T>(self.capacity as usize)) };
    }
}

impl<T: Clone> Clone for Segment<T> {
    /// The same slots in a fresh allocation: the same capacity, each entry where it was.
    fn clone(&self) -> Self {
        let capacity = self.capacity as usize;
        let mut copy: Segment<T> = Segment::with_exact_capacity(capacity);
        for i in 0..capacity {
            let byte = self.ctrl(i);
            if byte < DELETED {
                // SAFETY: the original's slot holds an entry; the copy's is empty, and is
                // marked full only once written, so a panic in `clone` leaves it consistent.
                unsafe { copy.slot(i).write((*self.slot(i)).clone()) };
                copy.len += 1;
            }
            copy.set_ctrl(i, byte);
        }
        copy.growth_left = self.growth_left;
        copy
    }
}

impl<T> Default for Segment<T> {
    fn default() -> Self {
        Segment::new()
    }
}

impl<T: fmt::Debug> fmt::Debug for Segment<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn hash(v: &u64) -> u64 {
        super::super::idmap::spread(*v)
    }

    #[test]
    fn capacities_fill_the_size_class_and_stay_near_the_load() {
        for entries in [1usize, 3, 16, 17, 100, 977, 1_000, 2_000, 3_000] {
            let capacity = capacity_for::<u32>(entries);
            assert!(max_load(capacity) >= entries, "{entries}: {capacity}");
            assert!(
                capacity <= GROUP || capacity.is_multiple_of(GROUP),
                "{capacity}"
            );
            assert!(
                allocation(bytes::<u32>(capacity))
                    < allocation(bytes::<u32>(next_capacity(capacity))),
                "{entries}: {capacity} does not fill its class"
            );
        }
        // The case that motivated the table: a thousand ids in 6,144 bytes, not 12,288.
        assert_eq!(allocation(bytes::<u32>(capacity_for::<u32>(1_000))), 6_144);
    }

    /// Inserts and removes at random against a map, checking every entry's presence, the
    /// length, the drops (through `Arc`s' counts) and that removals shrink what insertions
    /// grew.
    #[test]
    fn agrees_with_a_map() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let counted = Arc::new(());
        let mut segment: Segment<(u64, Arc<()>)> = Segment::new();
        let mut model = BTreeMap::new();
        let rehash = |e: &(u64, Arc<()>)| hash(&e.0);
        // Miri runs a smaller version, which still grows past several groups and back.
        let (rounds, keys) = if cfg!(miri) {
            (3_000, 300)
        } else {
            (40_000, 3_000)
        };
        for round in 0..rounds {
            // Grow for the first half, then shrink, always with both kinds of step.
            let insert = next() % 100 < if round < rounds / 2 { 65 } else { 30 };
            let key = next() % keys;
            if insert && !model.contains_key(&key) {
                segment.insert_unique(hash(&key), (key, counted.clone()), rehash);
                model.insert(key, ());
            } else {
                let removed = segment.remove(hash(&key), |e| e.0 == key, rehash);
                assert_eq!(removed.map(|e| e.0), model.remove(&key).map(|()| key));
            }
            assert_eq!(segment.len(), model.len());
            if round % (rounds / 40) == 0 {
                for key in 0..keys {
                    let found = segment.find(hash(&key), |e| e.0 == key).map(|e| e.0);
                    assert_eq!(found, model.get(&key).map(|()| key));
                }
                let mut listed: Vec<u64> = segment.iter().map(|e| e.0).collect();
                listed.sort_unstable();
                assert!(listed.iter().eq(model.keys()));
                let copy = segment.clone();
                assert_eq!(copy.len(), segment.len());
                assert!(copy.iter().map(|e| e.0).eq(segment.iter().map(|e| e.0)));
                drop(copy);
                assert_eq!(Arc::strong_count(&counted), 1 + model.len());
            }
        }
        assert!(segment.capacity() <= roomy_capacity::<(u64, Arc<()>)>(model.len()) * 3);
        let mut drained = 0;
        segment.drain(|_| drained += 1);
        assert_eq!((drained, segment.len()), (model.len(), 0));
        assert_eq!(Arc::strong_count(&counted), 1);
    }

    #[test]
    fn tombstones_are_cleared_by_a_rebuild_at_the_same_size() {
        // Fill a segment to its load, then turn its entries over many times: the deleted slots
        // of full groups must not leave insertions without a free slot.
        let mut segment = Segment::with_capacity(500);
        let capacity = segment.capacity();
        for i in 0..max_load(capacity) as u64 {
            segment.insert_unique(hash(&i), i, hash);
        }
        for i in 0..if cfg!(miri) { 1_000 } else { 20_000u64 } {
            let gone = i;
            let new = i + max_load(capacity) as u64;
            assert_eq!(
                segment.remove(hash(&gone), |&v| v == gone, hash),
                Some(gone)
            );
            segment.insert_unique(hash(&new), new, hash);
            assert_eq!(segment.find(hash(&new), |&v| v == new), Some(&new));
        }
        assert_eq!(segment.len(), max_load(capacity));
        assert!(segment.capacity() <= roomy_capacity::<u64>(segment.len()));
    }
}
