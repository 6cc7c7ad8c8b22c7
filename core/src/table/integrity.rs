//! The integrity check: every derived structure recomputed from the locks themselves. Apart from
//! the structures it checks, so that reading them does not mean reading it.

use std::collections::{BTreeMap, BTreeSet};

use super::ids::{OwnerId, Tagged, NONE, ROOT, SPILLED};
use super::LockTable;
use crate::lock::{Mode, PackedToken};

impl LockTable {
    /// Recomputes every derived structure from the locks themselves and reports the first
    /// disagreement: intention marks, owners' lists, the expiry index, the counts, the canonical
    /// order, the tree's links, the inline and spilled forms, the absence of nodes that nothing
    /// needs, and that every note belongs to a lock.
    pub fn check_integrity(&self) -> Result<(), String> {
        let mut owned: BTreeMap<OwnerId, BTreeSet<Tagged>> = BTreeMap::new();
        let mut len = 0;
        let mut live = 0;
        let mut segment_bytes = 0;
        let mut stack = vec![ROOT];
        while let Some(id) = stack.pop() {
            let node = &self.nodes[id as usize];
            if id != ROOT {
                live += 1;
                segment_bytes += node.segment.len();
                if node.is_unused() {
                    return Err(format!("unused node {id}"));
                }
            }
            if node.child != NONE && node.table != NONE {
                return Err(format!("node {id} has both an only child and a table"));
            }
            if node.table != NONE && self.tables[node.table as usize].is_empty() {
                return Err(format!("node {id} keeps an empty table"));
            }
            let spilled = node.lock.owner.0 == SPILLED;
            if spilled != self.crowded.contains_key(id) || (spilled && self.held(id).len() < 2) {
                return Err(format!("the locks of node {id} are spilled wrongly"));
            }
            let mut below = [0u32; 2];
            for child in self.children(id) {
                let c = &self.nodes[child as usize];
                if c.parent != id || self.child(id, &c.segment) != Some(child) {
                    return Err(format!("node {child} is not linked to its parent {id}"));
                }
                for mode in Mode::ALL {
                    below[mode.index()] += c.below[mode.index()]
                        + self.held(child).iter().filter(|h| h.mode() == mode).count() as u32;
                }
                stack.push(child);
            }
            if below != node.below {
                return Err(format!(
                    "marks at node {id} are {:?}, expected {below:?}",
                    node.below
                ));
            }
            let order: Vec<(Mode, &PackedToken)> = self
                .held(id)
                .iter()
                .map(|h| (h.mode(), &self.owner(h.owner()).token))
                .collect();
            let ascending = |a: &(Mode, &PackedToken), b: &(Mode, &PackedToken)| {
                a.0.cmp(&b.0).then_with(|| a.1.cmp_text(b.1)).is_lt()
            };
            if !order.windows(2).all(|w| ascending(&w[0], &w[1])) {
                return Err(format!("locks at node {id} are not in canonical order"));
            }
            for held in self.held(id) {
                len += 1;
                let fence = held.fence;
                if fence == 0 || fence >= self.next_fence {
                    return Err(format!("fence {fence} is not below the counter"));
                }
                owned
                    .entry(held.owner())
                    .or_default()
                    .insert(Tagged::new(id, held.mode()));
            }
        }
        if len != self.len || live != self.live_nodes || segment_bytes != self.segment_bytes {
            return Err("the counts disagree with the tree".into());
        }
        if self.crowded.keys().any(|node| {
            self.nodes
                .get(node as usize)
                .is_none_or(|n| n.lock.owner.0 != SPILLED)
        }) {
            return Err("a spilled lock list belongs to no node".into());
        }
        let mut expected = BTreeSet::new();
        let mut token_bytes = 0;
        for (id, slot) in self.owners.iter().enumerate() {
            let Some(owner) = slot else { continue };
            let id = id as OwnerId;
            token_bytes += owner.token.heap_bytes();
            let spilled = owner.lock.0 == SPILLED;
            if spilled != self.owner_locks.contains_key(id)
                || (spilled && self.locks_of(id).len() < 2)
            {
                return Err(format!(
                    "owner {:?}'s locks are spilled wrongly",
                    owner.token
                ));
            }
            let listed: BTreeSet<Tagged> = self.locks_of(id).iter().copied().collect();
            if listed.len() != self.locks_of(id).len()
                || owned.remove(&id).unwrap_or_default() != listed
            {
                return Err(format!(
                    "owner {:?}'s list disagrees with the tree",
                    owner.token
                ));
            }
            if self.find_owner(&owner.token) != Some(id) {
                return Err(format!("owner {:?} is not indexed", owner.token));
            }
            let earliest = listed
                .iter()
                .filter_map(|l| self.held_by(l.id(), id, l.mode()).map(|h| h.deadline))
                .min();
            match earliest {
                Some(earliest) if owner.filed && earliest == owner.earliest => {
                    expected.insert((earliest, id));
                }
                _ => return Err(format!("owner {:?} is filed wrongly", owner.token)),
            }
        }
        if !owned.is_empty() {
            return Err("locks held by owners that do not exist".into());
        }
        let mut filed = BTreeSet::new();
        for (&deadline, &head) in self.expiry.iter() {
            let (mut prev, mut id) = (NONE, head);
            while id != NONE {
                let Some(owner) = self.owners.get(id as usize).and_then(Option::as_ref) else {
                    return Err(format!("the expiry list of {deadline} holds a free owner"));
                };
                if owner.prev != prev || !filed.insert((deadline, id)) {
                    return Err(format!("the expiry list of {deadline} is linked wrongly"));
                }
                (prev, id) = (id, owner.next);
            }
        }
        if expected != filed || token_bytes != self.token_bytes {
            return Err("the expiry index disagrees with the owners".into());
        }
        for (node, owner, note) in self.notes.iter() {
            let held = self
                .nodes
                .get(node as usize)
                .is_some_and(|n| !n.is_unused())
                && self.held(node).iter().any(|h| h.owner == owner);
            if !held || note.is_empty() {
                return Err(format!(
                    "a note at node {node} belongs to no lock, or is empty"
                ));
            }
        }
        if self.notes.recount() != self.notes.bytes() {
            return Err("the notes' byte count disagrees with the notes".into());
        }
        Ok(())
    }
}
