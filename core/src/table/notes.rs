//! Notes: what an application keeps with a lock for a person to read, beside the tree.
//!
//! Most locks have none, so a note is not a field of the node (which is one cache line) but an
//! entry of a side map keyed by the lock itself: its node and its owner tagged with its mode,
//! the pair that names one lock. The entry goes when the lock goes (`take_lock`), so a node or
//! owner id given again never finds an old note. The map is a `LinearTable`, whose segments sit
//! behind `Arc`s, so a `COPY` shares it as it shares the rest of the table, a step per segment.
//! A table without notes pays one emptiness check per removed lock and per described lock.

use super::ids::{NodeId, Tagged};
use super::rehash::LinearTable;
use crate::lock::Note;

/// Ids are dense and assigned by the table, never by a client; a 64-bit finaliser spreads the
/// pair over both the segment bits (the upper half) and hashbrown's bits (the lower ones).
fn hash(node: NodeId, owner: Tagged) -> u64 {
    let mut z = (u64::from(node) << 32 | u64::from(owner.0)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn rehash(entry: &(NodeId, Tagged, Note)) -> u64 {
    hash(entry.0, entry.1)
}

/// Bytes a note costs beyond its text: its entry, its share of the table's control bytes, and
/// the shared allocation's counts.
const NOTE_OVERHEAD: usize = std::mem::size_of::<(NodeId, Tagged, Note)>() + 1 + 16;

#[derive(Clone, Debug, Default)]
pub(super) struct Notes {
    entries: LinearTable<(NodeId, Tagged, Note)>,
    /// The estimate of what the entries cost, for `memory_estimate`: each note's text is
    /// counted once per lock it is kept with, although the locks of one grant share it, so the
    /// estimate depends only on what the table holds and goes back exactly when a lock goes.
    bytes: usize,
}

impl Notes {
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn get(&self, node: NodeId, owner: Tagged) -> Option<&Note> {
        if self.entries.is_empty() {
            return None;
        }
        self.entries
            .find(hash(node, owner), |e| e.0 == node && e.1 == owner)
            .map(|e| &e.2)
    }

    /// Keeps `note` with the lock, in place of any note it had.
    pub(super) fn set(&mut self, node: NodeId, owner: Tagged, note: &Note) {
        let hash = hash(node, owner);
        if let Some(entry) = self.entries.find_mut(hash, |e| e.0 == node && e.1 == owner) {
            self.bytes = self.bytes - entry.2.len() + note.len();
            entry.2 = note.clone();
            return;
        }
        self.bytes += NOTE_OVERHEAD + note.len();
        self.entries
            .insert_unique(hash, (node, owner, note.clone()), rehash);
    }

    /// Forgets the lock's note, if it has one.
    pub(super) fn remove(&mut self, node: NodeId, owner: Tagged) {
        if self.entries.is_empty() {
            return;
        }
        let removed =
            self.entries
                .remove(hash(node, owner), |e| e.0 == node && e.1 == owner, rehash);
        if let Some((_, _, note)) = removed {
            self.bytes -= NOTE_OVERHEAD + note.len();
        }
    }

    /// Every note with its lock, in no particular order, for the integrity check.
    pub(super) fn iter(&self) -> impl Iterator<Item = (NodeId, Tagged, &Note)> + '_ {
        self.entries.iter().map(|e| (e.0, e.1, &e.2))
    }

    /// What `bytes` should be, recomputed, for the integrity check.
    pub(super) fn recount(&self) -> usize {
        self.iter()
            .map(|(_, _, note)| NOTE_OVERHEAD + note.len())
            .sum()
    }
}
