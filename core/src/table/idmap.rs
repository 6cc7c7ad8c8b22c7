//! A map from a node or owner id to what spilled out of its slot, growing a step at a time.

use super::rehash::LinearTable;

/// Ids are dense and assigned by the table itself, so a multiplication spreads them well and no
/// client can choose them to collide.
pub(super) fn hash(id: u32) -> u64 {
    spread(u64::from(id))
}

/// A multiplication by the golden ratio's fraction, its high bits folded into the low ones: the
/// hash of an id, and of the numbers the hash tables' own tests store.
pub(super) fn spread(value: u64) -> u64 {
    let product = value.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    product ^ (product >> 29)
}

#[derive(Clone, Debug)]
pub(super) struct IdMap<V> {
    entries: LinearTable<(u32, V)>,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap {
            entries: LinearTable::default(),
        }
    }
}

impl<V: Clone> IdMap<V> {
    pub(super) fn get(&self, id: u32) -> Option<&V> {
        self.entries
            .find(hash(id), |entry| entry.0 == id)
            .map(|entry| &entry.1)
    }

    pub(super) fn get_mut(&mut self, id: u32) -> Option<&mut V> {
        self.entries
            .find_mut(hash(id), |entry| entry.0 == id)
            .map(|entry| &mut entry.1)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn contains_key(&self, id: u32) -> bool {
        self.get(id).is_some()
    }

    /// Inserts the value of an id that has none.
    pub(super) fn insert_new(&mut self, id: u32, value: V) {
        self.entries
            .insert_unique(hash(id), (id, value), |entry: &(u32, V)| hash(entry.0));
    }

    pub(super) fn remove(&mut self, id: u32) -> Option<V> {
        self.entries
            .remove(
                hash(id),
                |entry| entry.0 == id,
                |entry: &(u32, V)| hash(entry.0),
            )
            .map(|entry| entry.1)
    }

    /// The bytes the map takes on the heap (see `LinearTable::heap_bytes`).
    pub(super) fn heap_bytes(&self) -> usize {
        self.entries.heap_bytes()
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.iter().map(|entry| entry.0)
    }
}

impl<V> IdMap<V> {
    /// For `defrag`, which moves the table's storage.
    pub(super) fn entries_mut(&mut self) -> &mut LinearTable<(u32, V)> {
        &mut self.entries
    }
}
