//! Key names ordered by a deadline, each found again by the handle its insertion returned: the
//! storage of the expiry schedule, one per database, without Redis.
//!
//! Level 0: imports nothing of the crate. Used by `schedule`.
//!
//! Every project key has an entry (its earliest deadline), so at ten million keys nothing here
//! may grow or shrink in one step, as Redis's own dict rehashes a bucket at a time, and an
//! entry must cost little beside what the key costs the server:
//!
//! - **No map from names.** The project keeps its entry's handle ([`Project::tag`]), so an
//!   entry is found, moved and removed by its handle, and the name is stored once, here. The
//!   server hands the module the value whenever it leaves its key (`keytype`'s `unlink`), so
//!   the entry goes with the key.
//! - **An arena that never moves** (the engine's `Chunks`): growing allocates one chunk of
//!   2,048 entries at most. An entry is 32 bytes: the deadline, the links of its deadline's list,
//!   and the name inline when it has at most 15 bytes; a longer name lives in a second arena of
//!   the same layout with the name boxed (32 bytes and the name's allocation). Free slots are
//!   handed out lowest first (the engine's `FreeSlots`), so the arenas' tails empty as keys go,
//!   and [`Timetable::trim_some`] gives them back a bounded number of slots per call.
//! - **Deadlines in a B-tree** of fixed-size nodes, each mapped to the head of a doubly linked
//!   list of the entries due then: keys filed in the same millisecond (a burst of grants with
//!   one TTL) share one B-tree entry, and filing or removing an entry is a step.
//!
//! An entry can be **parked**: out of every list, so never due, but still the key's (the
//! expiry cycle parks an entry while it visits its key, whose change files it again; see
//! `schedule`).
//!
//! [`Project::tag`]: pathlock_core::Project::tag

use std::collections::BTreeMap;

use pathlock_core::table::{Chunks, FreeSlots};

/// No entry; the end of a list.
const NONE: u32 = u32::MAX;
/// The bit of a handle that says the entry is in the arena of long names.
const LONG: u32 = 1 << 31;
/// The deadline of a parked entry.
pub const PARKED: u64 = u64::MAX;
/// Bytes a name keeps inline.
const SHORT: usize = 15;
/// Free tail slots given back by each removal, so that removals trim as they go and
/// [`Timetable::trim_some`] has little left to do.
const TRIM_PER_REMOVAL: usize = 4;

/// A name of at most [`SHORT`] bytes, inline.
#[derive(Clone, Copy, Default)]
struct Short {
    len: u8,
    bytes: [u8; SHORT],
}

/// A longer name, on the heap.
#[derive(Clone, Default)]
struct Long(Box<[u8]>);

trait Name: Clone + Default {
    fn bytes(&self) -> &[u8];
}

impl Name for Short {
    fn bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl Name for Long {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

#[derive(Clone, Default)]
struct Entry<N> {
    deadline: u64,
    prev: u32,
    next: u32,
    name: N,
}

/// Entries with one kind of name, in slots handed out lowest first.
#[derive(Default)]
struct Arena<N> {
    entries: Chunks<Entry<N>>,
    free: FreeSlots,
}

impl<N: Name> Arena<N> {
    fn add(&mut self, entry: Entry<N>) -> u32 {
        if let Some(slot) = self.free.pop_lowest() {
            self.entries[slot as usize] = entry;
            return slot;
        }
        self.entries.push(entry);
        (self.entries.len() - 1) as u32
    }

    fn holds(&self, slot: u32) -> bool {
        (slot as usize) < self.entries.len() && !self.free.contains(slot)
    }

    /// Frees a slot, dropping its name, and gives back up to `trim` free slots at the tail.
    fn release(&mut self, slot: u32, trim: usize) {
        self.entries[slot as usize] = Entry::default();
        self.free.insert(slot);
        self.trim(trim);
    }

    /// Pops up to `budget` free slots off the tail; returns how many.
    fn trim(&mut self, budget: usize) -> usize {
        let mut trimmed = 0;
        while trimmed < budget && self.has_slack() {
            let last = (self.entries.len() - 1) as u32;
            self.free.remove(last);
            self.entries.pop();
            trimmed += 1;
        }
        trimmed
    }

    fn has_slack(&self) -> bool {
        !self.entries.is_empty() && self.free.contains((self.entries.len() - 1) as u32)
    }
}

/// What one entry costs, for `MEMORY USAGE` (`schedule::bytes_per_key`): its arena slot, and
/// the name's own allocation when it is longer than [`SHORT`]. The deadlines' B-tree is left
/// out: an entry of it is shared by every key filed in the same millisecond (a burst of grants
/// with one TTL files hundreds in each), and the free-slot map is a bit per slot.
pub fn entry_bytes(name_len: usize) -> usize {
    use pathlock_core::alloc::allocation;
    let long = if name_len > SHORT {
        allocation(name_len)
    } else {
        0
    };
    std::mem::size_of::<Entry<Short>>().max(std::mem::size_of::<Entry<Long>>()) + long
}

/// Key names ordered by deadline; see the top of this file.
#[derive(Default)]
pub struct Timetable {
    short: Arena<Short>,
    long: Arena<Long>,
    /// Each deadline with an entry due then, mapped to the head of its list.
    by_deadline: BTreeMap<u64, u32>,
    len: usize,
}

impl Timetable {
    /// Entries, parked ones included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Slots the arenas hold, free ones at their tails included: what `trim_some` brings down
    /// to `len` once keys have gone.
    pub fn slots(&self) -> usize {
        self.short.entries.len() + self.long.entries.len()
    }

    /// Files `name` at `deadline` (or parked, at [`PARKED`]) and returns its handle.
    pub fn insert(&mut self, deadline: u64, name: &[u8]) -> u32 {
        let handle = if name.len() <= SHORT {
            let mut short = Short {
                len: name.len() as u8,
                bytes: [0; SHORT],
            };
            short.bytes[..name.len()].copy_from_slice(name);
            self.short.add(Entry {
                deadline: PARKED,
                prev: NONE,
                next: NONE,
                name: short,
            })
        } else {
            let slot = self.long.add(Entry {
                deadline: PARKED,
                prev: NONE,
                next: NONE,
                name: Long(name.into()),
            });
            slot | LONG
        };
        self.len += 1;
        self.link(handle, deadline);
        handle
    }

    /// The deadline of the entry `handle` names ([`PARKED`] when parked), or `None` when it names
    /// no entry.
    pub fn deadline(&self, handle: u32) -> Option<u64> {
        self.holds(handle).then(|| self.links(handle).0)
    }

    /// The name of the entry `handle` names.
    pub fn name(&self, handle: u32) -> Option<&[u8]> {
        if !self.holds(handle) {
            return None;
        }
        Some(match handle & LONG {
            0 => self.short.entries[handle as usize].name.bytes(),
            _ => self.long.entries[(handle & !LONG) as usize].name.bytes(),
        })
    }

    /// Files the entry at `deadline` instead ([`PARKED`]: parks it). Nothing when `handle`
    /// names no entry.
    pub fn refile(&mut self, handle: u32, deadline: u64) {
        if self.holds(handle) {
            self.unlink(handle);
            self.link(handle, deadline);
        }
    }

    /// Removes the entry; returns whether there was one.
    pub fn remove(&mut self, handle: u32) -> bool {
        if !self.holds(handle) {
            return false;
        }
        self.unlink(handle);
        match handle & LONG {
            0 => self.short.release(handle, TRIM_PER_REMOVAL),
            _ => self.long.release(handle & !LONG, TRIM_PER_REMOVAL),
        }
        self.len -= 1;
        true
    }

    /// The earliest deadline of an entry that is not parked.
    pub fn next_deadline(&self) -> Option<u64> {
        self.by_deadline
            .first_key_value()
            .map(|(&deadline, _)| deadline)
    }

    /// An entry whose deadline is not after `now`, of the earliest deadline, if there is one.
    pub fn first_due(&self, now: u64) -> Option<u32> {
        self.by_deadline
            .first_key_value()
            .filter(|(&deadline, _)| deadline <= now)
            .map(|(_, &head)| head)
    }

    /// Whether free slots sit at an arena's tail, for `trim_some` to give back.
    pub fn has_slack(&self) -> bool {
        self.short.has_slack() || self.long.has_slack()
    }

    /// Gives back up to `budget` free slots at the arenas' tails; returns how many.
    pub fn trim_some(&mut self, budget: usize) -> usize {
        let short = self.short.trim(budget);
        short + self.long.trim(budget - short)
    }

    fn holds(&self, handle: u32) -> bool {
        match handle & LONG {
            0 => self.short.holds(handle),
            _ => self.long.holds(handle & !LONG),
        }
    }

    /// The entry's deadline and links.
    fn links(&self, handle: u32) -> (u64, u32, u32) {
        let (deadline, prev, next) = match handle & LONG {
            0 => {
                let e = &self.short.entries[handle as usize];
                (e.deadline, e.prev, e.next)
            }
            _ => {
                let e = &self.long.entries[(handle & !LONG) as usize];
                (e.deadline, e.prev, e.next)
            }
        };
        (deadline, prev, next)
    }

    fn set_links(&mut self, handle: u32, deadline: u64, prev: u32, next: u32) {
        let set = |deadline_: &mut u64, prev_: &mut u32, next_: &mut u32| {
            *deadline_ = deadline;
            *prev_ = prev;
            *next_ = next;
        };
        match handle & LONG {
            0 => {
                let e = &mut self.short.entries[handle as usize];
                set(&mut e.deadline, &mut e.prev, &mut e.next);
            }
            _ => {
                let e = &mut self.long.entries[(handle & !LONG) as usize];
                set(&mut e.deadline, &mut e.prev, &mut e.next);
            }
        }
    }

    fn set_prev(&mut self, handle: u32, prev: u32) {
        let (deadline, _, next) = self.links(handle);
        self.set_links(handle, deadline, prev, next);
    }

    fn set_next(&mut self, handle: u32, next: u32) {
        let (deadline, prev, _) = self.links(handle);
        self.set_links(handle, deadline, prev, next);
    }

    /// Puts an unlinked entry first in the list of `deadline`, or parks it.
    fn link(&mut self, handle: u32, deadline: u64) {
        if deadline == PARKED {
            self.set_links(handle, PARKED, NONE, NONE);
            return;
        }
        let next = self.by_deadline.insert(deadline, handle).unwrap_or(NONE);
        if next != NONE {
            self.set_prev(next, handle);
        }
        self.set_links(handle, deadline, NONE, next);
    }

    /// Takes an entry out of its deadline's list, if it is in one.
    fn unlink(&mut self, handle: u32) {
        let (deadline, prev, next) = self.links(handle);
        if deadline == PARKED {
            return;
        }
        if prev != NONE {
            self.set_next(prev, next);
        } else if next != NONE {
            self.by_deadline.insert(deadline, next);
        } else {
            self.by_deadline.remove(&deadline);
        }
        if next != NONE {
            self.set_prev(next, prev);
        }
        self.set_links(handle, PARKED, NONE, NONE);
    }
}

/// The system's allocator, noting the largest single allocation (or reallocation) each thread
/// asked for since it last called [`LargestAllocation::take`]: the unit tests' global allocator
/// (see `lib.rs`), with which a test bounds the most one growth step of a structure allocates
/// and copies.
#[cfg(test)]
pub struct LargestAllocation;

#[cfg(test)]
thread_local! {
    static LARGEST: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
impl LargestAllocation {
    fn note(size: usize) {
        // `try_with`: a thread's last allocations can come after its locals are gone.
        let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
    }

    /// The largest allocation this thread asked for since the last call, in bytes.
    pub fn take() -> usize {
        LARGEST.with(|largest| largest.replace(0))
    }
}

// SAFETY: every call goes to the system's allocator unchanged; noting a size allocates nothing.
#[cfg(test)]
unsafe impl std::alloc::GlobalAlloc for LargestAllocation {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        Self::note(layout.size());
        // SAFETY: the caller's layout, passed on.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the pointer came from `System` through `alloc` or `realloc` above.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        Self::note(size);
        // SAFETY: as in `dealloc`, with the caller's new size.
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;

    /// A pseudo-random sequence, so that the tests need no dependency and replay exactly.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % below
        }
    }

    fn name(i: u64) -> Vec<u8> {
        // Short and long names, and names that are equal but for their length.
        match i % 3 {
            0 => format!("proj:{i}").into_bytes(),
            1 => format!("drive:user:{i:032}").into_bytes(),
            _ => vec![b'\0'; (i % 40) as usize],
        }
    }

    /// Holds a timetable to a model: a set of (deadline, handle) beside each handle's name.
    fn check(table: &Timetable, due: &BTreeSet<(u64, u32)>, names: &HashMap<u32, (u64, Vec<u8>)>) {
        assert_eq!(table.len(), names.len());
        for (&handle, (deadline, name)) in names {
            assert_eq!(table.deadline(handle), Some(*deadline));
            assert_eq!(table.name(handle), Some(name.as_slice()));
        }
        assert_eq!(table.next_deadline(), due.first().map(|(d, _)| *d));
        let mut listed = BTreeSet::new();
        for (&deadline, &head) in &table.by_deadline {
            let mut at = head;
            let mut prev = NONE;
            while at != NONE {
                let (d, p, next) = table.links(at);
                assert_eq!((d, p), (deadline, prev), "the list of {deadline}");
                assert!(listed.insert((deadline, at)));
                prev = at;
                at = next;
            }
        }
        assert_eq!(&listed, due);
    }

    #[test]
    fn agrees_with_a_model_through_inserts_refiles_parks_and_removals() {
        let mut table = Timetable::default();
        let mut due = BTreeSet::new();
        let mut names: HashMap<u32, (u64, Vec<u8>)> = HashMap::new();
        let mut rng = Lcg(7);
        for step in 0..40_000u64 {
            let handles: Vec<u32> = names.keys().copied().collect();
            let pick = |rng: &mut Lcg| handles[rng.next(handles.len() as u64) as usize];
            // Deadlines mostly a few apart, so that lists of several entries form.
            let deadline = step / 4 + rng.next(50);
            match rng.next(10) {
                0..=3 => {
                    let n = name(step);
                    let handle = table.insert(deadline, &n);
                    assert!(
                        names.insert(handle, (deadline, n)).is_none(),
                        "a live handle"
                    );
                    due.insert((deadline, handle));
                }
                4 | 5 if !handles.is_empty() => {
                    let handle = pick(&mut rng);
                    let to = if rng.next(4) == 0 { PARKED } else { deadline };
                    table.refile(handle, to);
                    let entry = names.get_mut(&handle).expect("a live handle");
                    due.remove(&(entry.0, handle));
                    entry.0 = to;
                    if to != PARKED {
                        due.insert((to, handle));
                    }
                }
                6 | 7 if !handles.is_empty() => {
                    let handle = pick(&mut rng);
                    assert!(table.remove(handle));
                    assert!(!table.remove(handle), "removed once");
                    let (d, _) = names.remove(&handle).expect("a live handle");
                    due.remove(&(d, handle));
                    assert_eq!(table.deadline(handle), None);
                }
                _ => {
                    // The expiry cycle: the first entry due by now is parked while visited.
                    let now = step / 4;
                    let first = table.first_due(now);
                    let expected = due.first().filter(|(d, _)| *d <= now);
                    assert_eq!(
                        first.map(|h| table.deadline(h)),
                        expected.map(|(d, _)| Some(*d))
                    );
                    if let Some(handle) = first {
                        table.refile(handle, PARKED);
                        let entry = names.get_mut(&handle).expect("a live handle");
                        due.remove(&(entry.0, handle));
                        entry.0 = PARKED;
                    }
                }
            }
            if step % 1_000 == 0 {
                check(&table, &due, &names);
            }
        }
        check(&table, &due, &names);
    }

    #[test]
    fn memory_comes_back_when_keys_go_in_any_order() {
        let mut table = Timetable::default();
        let mut rng = Lcg(11);
        let n = 50_000u64;
        let mut handles: Vec<u32> = (0..n).map(|i| table.insert(i / 8, &name(i))).collect();
        assert_eq!(table.slots(), n as usize);
        // Random order: the tails empty only when their last entries go.
        for i in (1..handles.len()).rev() {
            handles.swap(i, rng.next(i as u64 + 1) as usize);
        }
        for handle in handles {
            assert!(table.remove(handle));
        }
        assert!(table.len() == 0 && table.by_deadline.is_empty());
        // What removals left at the tails goes in bounded calls.
        let mut calls = 0;
        while table.has_slack() {
            assert!(table.trim_some(1_000) <= 1_000);
            calls += 1;
        }
        assert_eq!(table.slots(), 0);
        assert!(calls <= n as usize / 1_000 + 2);
    }

    /// No step of filling or emptying the schedule reallocates its storage whole, as a
    /// `HashMap` doubling at millions of keys did (an ACQUIRE of 825 ms at 1,000,000 projects):
    /// filling allocates a chunk of 2,048 entries (64 KiB) at most, and emptying in any order
    /// grows the free-slot bitmap, a bit per slot, by doubling, so the largest step at `N`
    /// entries is at most `N/4` bytes (500 KB here, 2.5 MB at ten million: a copy of some
    /// 200 us at most), against the `N * 32` bytes of the entries themselves.
    #[test]
    fn no_step_of_growing_or_shrinking_allocates_more_than_a_chunk_or_a_bit_per_entry() {
        const N: u64 = 2_000_000;
        let mut table = Timetable::default();
        // The handles' vector is the test's, allocated before counting.
        let mut handles: Vec<u32> = Vec::with_capacity(N as usize);
        LargestAllocation::take();
        for i in 0..N {
            handles.push(table.insert(i / 1_000, format!("proj:{i}").as_bytes()));
        }
        let filling = LargestAllocation::take();
        assert!(
            filling <= 64 << 10,
            "filling allocated {filling} B in one step"
        );
        let mut rng = Lcg(13);
        for i in (1..handles.len()).rev() {
            handles.swap(i, rng.next(i as u64 + 1) as usize);
        }
        for (i, handle) in handles.iter().enumerate() {
            assert!(table.remove(*handle));
            if i % 64 == 0 {
                table.trim_some(256);
            }
        }
        while table.trim_some(256) > 0 {}
        let emptying = LargestAllocation::take();
        let bound = (N / 4) as usize;
        assert!(
            emptying <= bound,
            "emptying allocated {emptying} B in one step, above {bound} B"
        );
        assert_eq!((table.len(), table.slots()), (0, 0));
    }

    #[test]
    fn an_entry_costs_32_bytes_and_a_short_name_no_allocation() {
        assert_eq!(std::mem::size_of::<Entry<Short>>(), 32);
        assert_eq!(std::mem::size_of::<Entry<Long>>(), 32);
        let mut table = Timetable::default();
        let short = table.insert(5, b"proj:917504");
        let long = table.insert(5, b"a name longer than fifteen bytes");
        assert_eq!(short & LONG, 0);
        assert_eq!(long & LONG, LONG);
        assert_eq!(table.name(short), Some(&b"proj:917504"[..]));
        assert_eq!(table.first_due(4), None);
        assert_eq!(
            table.first_due(5),
            Some(long),
            "the last filed heads its list"
        );
        assert_eq!(table.name(u32::MAX - 1), None, "no such entry");
    }
}
