//! Notes: what an application keeps with a lock for a person to read, beside the tree, kept
//! once per owner rather than once per lock.
//!
//! The locks of one owner nearly always carry one note: the one their grants came with, as a
//! client taking a folder's files for one operation names that operation on each `ACQUIRE`.
//! So an owner keeps a note of its own (`owners`: the note of the grant that created it), which
//! each of its locks carries unless it says otherwise, and only a lock whose note differs from
//! its owner's has an entry (`locks`: its note, or none when the owner has one and the lock
//! not), keyed by the lock itself, its node and its owner tagged with its mode. A million locks
//! of one owner, taken by a thousand `ACQUIRE`s that each bring the same 256 bytes, then cost
//! one note, not a million.
//!
//! Every text is kept once per table (`texts`, by content, with how many owners and locks hold
//! it), so that the locks of one grant, and owners that brought the same words, share one
//! allocation, and the estimate counts each text once. An entry goes when its lock or owner
//! goes (`take_lock`, `free_owner_slot`), so a node or owner id given again never finds an old
//! note. The maps are `LinearTable`s, whose segments sit behind `Arc`s, so a `COPY` shares them
//! as it shares the rest of the table, a step per segment. A table without notes pays one
//! emptiness check per removed lock and per described lock.

use std::hash::BuildHasher;

use hashbrown::DefaultHashBuilder;

use super::idmap::IdMap;
use super::ids::{NodeId, OwnerId, Tagged};
use super::rehash::LinearTable;
use crate::alloc::allocation;
use crate::lock::Note;

/// Ids are dense and assigned by the table, never by a client; a 64-bit finaliser spreads the
/// pair over both the bits that choose a segment (the upper half) and those a segment places an
/// entry by (the lower ones; see `rehash` and `segment`).
fn hash(node: NodeId, owner: Tagged) -> u64 {
    let mut z = (u64::from(node) << 32 | u64::from(owner.0)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn rehash(entry: &(NodeId, Tagged, Option<Note>)) -> u64 {
    hash(entry.0, entry.1)
}

/// The bytes of a text: its shared allocation (two counts and the bytes), as the allocator
/// rounds it. The tables' own bytes are read from them (`LinearTable::heap_bytes`).
fn text_bytes(note: &Note) -> usize {
    allocation(2 * std::mem::size_of::<usize>() + note.len())
}

fn same(a: &Note, b: &Note) -> bool {
    std::sync::Arc::ptr_eq(a, b) || a[..] == b[..]
}

#[derive(Clone, Debug, Default)]
pub(super) struct Notes {
    /// Each text once, with how many owners' and locks' entries hold it.
    texts: LinearTable<(Note, u32)>,
    /// The note of each owner that has one.
    owners: IdMap<Note>,
    /// The locks whose note is not their owner's: theirs, or `None` when they have none.
    locks: LinearTable<(NodeId, Tagged, Option<Note>)>,
    hasher: DefaultHashBuilder,
    /// What the texts take, kept as they come and go.
    text_bytes: usize,
}

impl Notes {
    /// For `defrag`: moves the lists of segments of the three tables and rebuilds their
    /// segment `i`. The texts themselves are shared (`Arc`) and stay. False when `i` is past the
    /// last segment of all three.
    pub(super) fn defrag_segment<R: super::defrag::Relocate + ?Sized>(
        &mut self,
        i: usize,
        to: &mut R,
    ) -> bool {
        if i == 0 {
            self.texts.defrag_spine(to);
            self.owners.entries_mut().defrag_spine(to);
            self.locks.defrag_spine(to);
        }
        let texts = self.texts.defrag_segment(i, to);
        let owners = self.owners.entries_mut().defrag_segment(i, to);
        let locks = self.locks.defrag_segment(i, to);
        texts || owners || locks
    }

    pub(super) fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// What the notes take on the heap, for `memory_estimate`: the texts, and the three tables
    /// as their capacities are (a read of each table's segments, so only `MEMORY USAGE` asks).
    pub(super) fn bytes(&self) -> usize {
        if self.texts.is_empty() {
            return 0;
        }
        self.text_bytes
            + self.texts.heap_bytes()
            + self.owners.heap_bytes()
            + self.locks.heap_bytes()
    }

    /// The lock's note: its own entry's, or its owner's.
    pub(super) fn get(&self, node: NodeId, owner: Tagged) -> Option<&Note> {
        if self.texts.is_empty() {
            return None;
        }
        if !self.locks.is_empty() {
            let own = self
                .locks
                .find(hash(node, owner), |e| e.0 == node && e.1 == owner);
            if let Some(entry) = own {
                return entry.2.as_ref();
            }
        }
        self.owners.get(owner.id())
    }

    /// Whether any lock has an entry of its own.
    pub(super) fn has_lock_entries(&self) -> bool {
        !self.locks.is_empty()
    }

    /// Whether `owner` has a note of its own.
    pub(super) fn has_owner_note(&self, owner: OwnerId) -> bool {
        !self.owners.is_empty() && self.owners.contains_key(owner)
    }

    /// Whether `note` (`None` for none) is what `owner`'s locks carry unless they say otherwise.
    pub(super) fn is_owners(&self, owner: OwnerId, note: Option<&Note>) -> bool {
        match (self.owners.get(owner), note) {
            (None, None) => true,
            (Some(kept), Some(note)) => same(kept, note),
            _ => false,
        }
    }

    /// The kept copy of `note`'s text, counted once more.
    fn hold(&mut self, note: &Note) -> Note {
        let hash = self.hasher.hash_one(&note[..]);
        if let Some(entry) = self.texts.find_mut(hash, |e| same(&e.0, note)) {
            entry.1 += 1;
            return entry.0.clone();
        }
        self.text_bytes += text_bytes(note);
        let hasher = self.hasher.clone();
        self.texts
            .insert_unique(hash, (note.clone(), 1), move |e: &(Note, u32)| {
                hasher.hash_one(&e.0[..])
            });
        note.clone()
    }

    /// Counts `note`'s text once less, and forgets it when nothing holds it any more.
    fn release(&mut self, note: &Note) {
        let hash = self.hasher.hash_one(&note[..]);
        let Some(entry) = self.texts.find_mut(hash, |e| same(&e.0, note)) else {
            return;
        };
        entry.1 -= 1;
        if entry.1 == 0 {
            let hasher = self.hasher.clone();
            self.texts.remove(
                hash,
                |e| same(&e.0, note),
                move |e: &(Note, u32)| hasher.hash_one(&e.0[..]),
            );
            self.text_bytes -= text_bytes(note);
        }
    }

    /// Gives a new owner its note: what the grant that creates it brought.
    pub(super) fn set_owner(&mut self, owner: OwnerId, note: &Note) {
        let kept = self.hold(note);
        self.owners.insert_new(owner, kept);
    }

    /// Forgets the note of an owner that goes.
    pub(super) fn forget_owner(&mut self, owner: OwnerId) {
        if self.owners.is_empty() {
            return;
        }
        if let Some(note) = self.owners.remove(owner) {
            self.release(&note);
        }
    }

    /// Sets the note the lock carries (`None`: none): an entry of its own when it is not its
    /// owner's, none when it is.
    pub(super) fn set(&mut self, node: NodeId, owner: Tagged, note: Option<&Note>) {
        self.remove(node, owner);
        if self.is_owners(owner.id(), note) {
            return;
        }
        let kept = note.map(|note| self.hold(note));
        self.locks
            .insert_unique(hash(node, owner), (node, owner, kept), rehash);
    }

    /// Forgets the lock's own entry, if it has one (its owner's note is the owner's).
    pub(super) fn remove(&mut self, node: NodeId, owner: Tagged) {
        if self.locks.is_empty() {
            return;
        }
        let removed = self
            .locks
            .remove(hash(node, owner), |e| e.0 == node && e.1 == owner, rehash);
        if let Some((_, _, Some(note))) = removed {
            self.release(&note);
        }
    }

    /// Every lock's own entry, in no particular order, for the integrity check.
    pub(super) fn locks(&self) -> impl Iterator<Item = (NodeId, Tagged, Option<&Note>)> + '_ {
        self.locks.iter().map(|e| (e.0, e.1, e.2.as_ref()))
    }

    /// The owners with a note of their own, for the integrity check.
    pub(super) fn owners(&self) -> impl Iterator<Item = (OwnerId, &Note)> + '_ {
        self.owners
            .keys()
            .filter_map(|owner| self.owners.get(owner).map(|note| (owner, note)))
    }

    /// What the entries say against what they hold, for the integrity check: every text held
    /// as many times as it is counted, none empty, none kept twice, and their bytes recomputed.
    pub(super) fn recount(&self) -> Result<(), String> {
        let held: Vec<&Note> = self
            .owners()
            .map(|(_, note)| note)
            .chain(self.locks.iter().filter_map(|e| e.2.as_ref()))
            .collect();
        let mut bytes = 0;
        for (text, count) in self.texts.iter() {
            let holders = held
                .iter()
                .filter(|note| std::sync::Arc::ptr_eq(note, text))
                .count();
            if text.is_empty() || holders != *count as usize {
                return Err("a note's text is empty or counted wrongly".into());
            }
            let twins = self.texts.iter().filter(|(t, _)| t[..] == text[..]).count();
            if twins != 1 {
                return Err("a note's text is kept twice".into());
            }
            bytes += text_bytes(text);
        }
        if held.len() != self.texts.iter().map(|(_, c)| *c as usize).sum::<usize>() {
            return Err("a note is held outside the texts".into());
        }
        if bytes != self.text_bytes {
            return Err("the notes' byte count disagrees with the notes".into());
        }
        Ok(())
    }
}
