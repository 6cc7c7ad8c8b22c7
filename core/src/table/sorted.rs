//! An ordered map kept in short sorted runs that copies of it share: the expiry index.
//!
//! A `BTreeMap` is copied node by node, so `COPY` of a project whose owners have a million
//! distinct deadlines would copy a million entries in one call. Here the entries sit in sorted
//! runs of at most `RUN` entries, each behind an `Arc`, and the runs in order in one vector: a
//! clone copies one pointer per run, and the first write to a run that another copy still
//! holds copies that run alone (`Arc::make_mut`), `RUN` entries at most.
//!
//! A key is found by a binary search over the runs by their last key, then one within the run.
//! A full run splits in two; a run left with few entries joins its neighbour when both fit in
//! one, and an empty run goes. Inserting or removing a run moves one pointer per run, tens of
//! thousands at the largest sizes, far below what a copy of the entries would cost. Deadlines
//! mostly arrive in increasing order and leave from the earliest, so a run is a ring buffer
//! that takes entries at either end without moving the others, and the first and last runs are
//! tried before any search.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::alloc::allocation;

/// The most entries a run holds. 16-byte entries make a run 4 KB, a page.
const RUN: usize = 256;

#[derive(Clone, Debug)]
pub(super) struct SortedRuns<K, V> {
    /// Never holds an empty run.
    runs: Vec<Arc<VecDeque<(K, V)>>>,
}

impl<K, V> Default for SortedRuns<K, V> {
    fn default() -> Self {
        SortedRuns { runs: Vec::new() }
    }
}

impl<K: Ord + Copy, V: Copy> SortedRuns<K, V> {
    /// The run where `key` is or would go: the first whose last key is not below it, or the
    /// last run for a key above every other. `None` when the map is empty.
    fn run_of(&self, key: &K) -> Option<usize> {
        let below = |run: &Arc<VecDeque<(K, V)>>| run.back().is_some_and(|(last, _)| last < key);
        let n = self.runs.len();
        if n == 0 {
            return None;
        }
        if !below(&self.runs[0]) {
            return Some(0);
        }
        if n == 1 || below(&self.runs[n - 2]) {
            return Some(n - 1);
        }
        Some(self.runs.partition_point(below).min(n - 1))
    }

    /// The map of `entries`, whose keys are strictly increasing, in runs three quarters full,
    /// so that the insertions after it split few of them.
    pub(super) fn from_sorted(entries: impl IntoIterator<Item = (K, V)>) -> SortedRuns<K, V> {
        let mut runs = Vec::new();
        let mut run = VecDeque::with_capacity(RUN);
        for entry in entries {
            if run.len() == RUN * 3 / 4 {
                runs.push(Arc::new(std::mem::replace(
                    &mut run,
                    VecDeque::with_capacity(RUN),
                )));
            }
            run.push_back(entry);
        }
        if !run.is_empty() {
            runs.push(Arc::new(run));
        }
        SortedRuns { runs }
    }

    /// The bytes the runs take on the heap, as the allocator rounds them, for the memory
    /// estimate: a read of each run's capacity, one per hundred entries or more.
    pub(super) fn heap_bytes(&self) -> usize {
        let shared = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<VecDeque<(K, V)>>();
        self.runs
            .iter()
            .map(|run| {
                allocation(shared) + allocation(run.capacity() * std::mem::size_of::<(K, V)>())
            })
            .sum::<usize>()
            + allocation(self.runs.capacity() * std::mem::size_of::<usize>())
    }

    pub(super) fn first_key_value(&self) -> Option<(&K, &V)> {
        let (key, value) = self.runs.first()?.front()?;
        Some((key, value))
    }

    /// Inserts or replaces the value of `key`, and returns the value it replaced.
    pub(super) fn insert(&mut self, key: K, value: V) -> Option<V> {
        // Deadlines mostly come in increasing order: a key at or past the end goes straight to
        // the last run.
        if let Some(run) = self.runs.last_mut() {
            match run.back().map(|(last, _)| last.cmp(&key)) {
                Some(std::cmp::Ordering::Less) if run.len() < RUN => {
                    Arc::make_mut(run).push_back((key, value));
                    return None;
                }
                Some(std::cmp::Ordering::Equal) => {
                    let last = Arc::make_mut(run).back_mut()?;
                    return Some(std::mem::replace(&mut last.1, value));
                }
                _ => {}
            }
        }
        let Some(at) = self.run_of(&key) else {
            self.runs.push(Arc::new(VecDeque::from([(key, value)])));
            return None;
        };
        let run = Arc::make_mut(&mut self.runs[at]);
        match run.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(i) => Some(std::mem::replace(&mut run[i].1, value)),
            Err(i) => {
                run.insert(i, (key, value));
                if run.len() > RUN {
                    let upper = run.split_off(run.len() / 2);
                    self.runs.insert(at + 1, Arc::new(upper));
                }
                None
            }
        }
    }

    /// Removes `key`, and returns its value.
    pub(super) fn remove(&mut self, key: &K) -> Option<V> {
        let at = self.run_of(key)?;
        // Looked up before `make_mut`, so that a miss copies nothing.
        let i = self.runs[at].binary_search_by(|(k, _)| k.cmp(key)).ok()?;
        let run = Arc::make_mut(&mut self.runs[at]);
        let (_, value) = run.remove(i)?;
        let left = run.len();
        if left == 0 {
            self.runs.remove(at);
        } else if left < RUN / 4 {
            self.join_with_next(at);
            if at > 0 {
                self.join_with_next(at - 1);
            }
        }
        Some(value)
    }

    /// Joins the run at `at` with the next one when both fit in one run, so that a mass
    /// removal does not leave a long vector of nearly empty runs.
    fn join_with_next(&mut self, at: usize) {
        if at + 1 >= self.runs.len() || self.runs[at].len() + self.runs[at + 1].len() > RUN {
            return;
        }
        let next = self.runs.remove(at + 1);
        Arc::make_mut(&mut self.runs[at]).extend(next.iter().copied());
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.runs
            .iter()
            .flat_map(|run| run.iter().map(|(k, v)| (k, v)))
    }
}

impl<K: Copy, V: Copy> SortedRuns<K, V> {
    /// For `defrag`: moves the list of runs.
    pub(super) fn defrag_spine<R: super::defrag::Relocate + ?Sized>(&mut self, to: &mut R) {
        super::defrag::move_vec(&mut self.runs, to);
    }

    /// For `defrag`: rebuilds run `i` in a fresh allocation (a `VecDeque`'s cannot be re-pointed),
    /// unless a copy shares it. False when `i` is past the last run.
    pub(super) fn defrag_run<R: super::defrag::Relocate + ?Sized>(
        &mut self,
        i: usize,
        to: &mut R,
    ) -> bool {
        let Some(run) = self.runs.get_mut(i) else {
            return false;
        };
        if Arc::get_mut(run).is_some() {
            // A copy of the same capacity, so that the run grows as it would have.
            to.rebuild(&mut || {
                let mut fresh = VecDeque::with_capacity(run.capacity());
                fresh.extend(run.iter().copied());
                *run = Arc::new(fresh);
            });
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn check(map: &SortedRuns<u64, u32>, model: &BTreeMap<u64, u32>) {
        assert!(map
            .iter()
            .map(|(&k, &v)| (k, v))
            .eq(model.iter().map(|(&k, &v)| (k, v))));
        assert_eq!(
            map.first_key_value().map(|(&k, &v)| (k, v)),
            model.first_key_value().map(|(&k, &v)| (k, v))
        );
        assert!(map
            .runs
            .iter()
            .all(|run| !run.is_empty() && run.len() <= RUN));
    }

    #[test]
    fn agrees_with_a_btree_map_in_any_order() {
        let mut map = SortedRuns::default();
        let mut model = BTreeMap::new();
        let mut x = 12_345u64;
        for step in 0..60_000u32 {
            // A mix of increasing keys, as deadlines come, and scattered ones.
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let key = if step % 3 == 0 {
                x >> 50
            } else {
                u64::from(step)
            };
            if step % 5 == 4 {
                assert_eq!(map.remove(&key), model.remove(&key));
            } else {
                assert_eq!(map.insert(key, step), model.insert(key, step));
            }
            if step % 997 == 0 {
                check(&map, &model);
            }
        }
        check(&map, &model);
        // Removing from the front, as expiry does, keeps the runs few.
        while let Some((&key, _)) = model.first_key_value() {
            assert_eq!(map.remove(&key), model.remove(&key));
            assert!(map.runs.len() <= 2 + 4 * model.len() / RUN);
        }
        check(&map, &model);
        assert!(map.runs.is_empty());
    }

    #[test]
    fn a_map_built_from_sorted_entries_agrees_with_a_btree_map() {
        let mut model: BTreeMap<u64, u32> = (0..2_000u64).map(|k| (k * 3, k as u32)).collect();
        let mut map = SortedRuns::from_sorted(model.iter().map(|(&k, &v)| (k, v)));
        check(&map, &model);
        for k in 0..3_000u64 {
            if k % 2 == 0 {
                assert_eq!(map.insert(k * 2 + 1, 7), model.insert(k * 2 + 1, 7));
            } else {
                assert_eq!(map.remove(&(k * 3)), model.remove(&(k * 3)));
            }
        }
        check(&map, &model);
        assert!(SortedRuns::<u64, u32>::from_sorted([]).runs.is_empty());
    }

    #[test]
    fn copies_are_independent_and_share_what_neither_wrote() {
        let mut original = SortedRuns::default();
        for k in 0..10_000u64 {
            original.insert(k, 0u32);
        }
        let mut copy = original.clone();
        copy.insert(5, 1);
        copy.remove(&9_000);
        original.insert(20_000, 2);
        assert_eq!(original.iter().count(), 10_001);
        assert_eq!(copy.iter().count(), 9_999);
        assert_eq!(original.iter().find(|(&k, _)| k == 5), Some((&5, &0)));
        assert_eq!(copy.iter().find(|(&k, _)| k == 5), Some((&5, &1)));
        let shared = original
            .runs
            .iter()
            .zip(&copy.runs)
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert!(
            shared + 3 >= original.runs.len(),
            "{shared} of {}",
            original.runs.len()
        );
    }
}
