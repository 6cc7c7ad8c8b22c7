//! The integrity check: every derived structure recomputed from the locks themselves. Apart from
//! the structures it checks, so that reading them does not mean reading it.

use std::collections::{BTreeMap, BTreeSet};

use super::ids::{NodeId, OwnerId, Tagged, BIG, NONE, ROOT, SPILLED};
use super::tree::first_segment;
use super::Tree;
use crate::lock::{Mode, PackedToken};

impl Tree {
    /// Recomputes every derived structure from the locks themselves and reports the first
    /// disagreement: intention marks, `latest` bounds, big owners' marks and sets, owners'
    /// lists, the expiry index, the graveyard, the counts, the canonical order, the tree's links,
    /// the inline and spilled forms, the free slots, the absence of nodes that nothing needs, and
    /// that every note belongs to a lock.
    pub fn check_integrity(&self) -> Result<(), String> {
        let mut owned: BTreeMap<OwnerId, BTreeSet<Tagged>> = BTreeMap::new();
        let mut parents: Vec<(NodeId, NodeId)> = Vec::new();
        let (mut live, mut segment_bytes, mut segment_heap, mut inner) = (0, 0, 0, 0);
        let mut order = Vec::new();
        let mut forks = BTreeSet::new();
        let mut stack = vec![ROOT];
        while let Some(id) = stack.pop() {
            order.push(id);
            let node = &self.nodes[id as usize];
            if self.free_nodes.contains(id) {
                return Err(format!("node {id} is in the tree and free"));
            }
            if id != ROOT {
                live += 1;
                segment_bytes += node.segment.len();
                segment_heap += node.segment.heap_allocation();
                if node.is_unused() {
                    return Err(format!("unused node {id}"));
                }
                // One or more segments, none of them empty (see `Node`).
                if node.segment.split(|&b| b == 0).any(<[u8]>::is_empty) {
                    return Err(format!("node {id} has an empty segment"));
                }
            }
            let table = self.table_of(id);
            if node.child != NONE && table != NONE {
                return Err(format!("node {id} has both an only child and a table"));
            }
            if table != NONE && self.tables[table as usize].is_empty() {
                return Err(format!("node {id} keeps an empty table"));
            }
            if node.fork != NONE && node.child == NONE && table == NONE {
                return Err(format!("node {id} has a fork without children"));
            }
            // Without a fork, the marks are read from the only child's locks: it must be a
            // leaf.
            if node.fork == NONE
                && (table != NONE
                    || (node.child != NONE && {
                        let child = &self.nodes[node.child as usize];
                        child.child != NONE || child.fork != NONE
                    }))
            {
                return Err(format!(
                    "node {id} has no fork but children beneath its children"
                ));
            }
            if node.fork != NONE
                && (self.free_forks.contains(node.fork) || !forks.insert(node.fork))
            {
                return Err(format!("node {id}'s fork is free or another node's"));
            }
            if table != NONE {
                inner += self.tables[table as usize].heap_bytes();
            }
            inner += self.crowd(id).map_or(0, |crowd| crowd.readers.heap_bytes());
            let spilled = node.lock.owner.0 == SPILLED;
            if spilled != self.crowded.contains_key(id) || (spilled && self.holder_count(id) < 2) {
                return Err(format!("the locks of node {id} are spilled wrongly"));
            }
            self.check_crowd(id)?;
            for child in self.children(id) {
                let c = &self.nodes[child as usize];
                if c.parent != id || self.child(id, first_segment(&c.segment)) != Some(child) {
                    return Err(format!("node {child} is not linked to its parent {id}"));
                }
                parents.push((child, id));
                stack.push(child);
            }
            let holders = self.canonical_holders(id);
            let keys: Vec<(Mode, &PackedToken, bool)> = holders
                .iter()
                .map(|h| {
                    let owner = self.owner(h.owner());
                    (h.mode(), &owner.token, self.is_buried(h.owner()))
                })
                .collect();
            // Ascending by mode, then token; a buried owner may share its token with the owner
            // that took its place.
            let ordered = keys.windows(2).all(|w| {
                let by = w[0].0.cmp(&w[1].0).then_with(|| w[0].1.cmp_text(w[1].1));
                by.is_lt() || (by.is_eq() && (w[0].2 || w[1].2))
            });
            if !ordered {
                return Err(format!("locks at node {id} are not in canonical order"));
            }
            for held in self.holders(id) {
                let fence = held.fence;
                if fence == 0 || fence >= self.next_fence {
                    return Err(format!("fence {fence} is not below the counter"));
                }
                if !owned
                    .entry(held.owner())
                    .or_default()
                    .insert(Tagged::new(id, held.mode()))
                {
                    return Err(format!("an owner holds one mode twice at node {id}"));
                }
            }
        }
        if live != self.live_nodes
            || segment_bytes != self.segment_bytes
            || segment_heap != self.segment_heap
        {
            return Err("the node counts disagree with the tree".into());
        }
        inner += self
            .bigs
            .keys()
            .filter_map(|owner| self.bigs.get(owner))
            .map(|big| big.locks.heap_bytes())
            .sum::<usize>();
        if inner != self.inner_bytes {
            return Err(format!(
                "the inner tables take {inner} bytes, not {}",
                self.inner_bytes
            ));
        }
        if self.free_nodes.len() + live + 1 != self.nodes.len() {
            return Err("free node slots disagree with the tree".into());
        }
        if self.free_forks.len() + forks.len() != self.forks.len() {
            return Err("free fork slots disagree with the tree".into());
        }
        self.check_marks(&order)?;
        if self.crowded.keys().any(|node| {
            self.nodes
                .get(node as usize)
                .is_none_or(|n| n.lock.owner.0 != SPILLED)
        }) {
            return Err("a spilled lock list belongs to no node".into());
        }
        for (node, owner, note) in self.notes.locks() {
            let held = self
                .nodes
                .get(node as usize)
                .is_some_and(|n| !n.is_unused())
                && self.holder(node, owner).is_some();
            if !held || self.notes.is_owners(owner.id(), note) {
                return Err(format!(
                    "a note at node {node} belongs to no lock, or is its owner's"
                ));
            }
        }
        for (owner, _) in self.notes.owners() {
            if self.owners.get(owner as usize).is_none_or(Option::is_none) {
                return Err(format!("owner {owner}'s note belongs to no owner"));
            }
        }
        self.notes.recount()?;
        self.check_owners(owned)
    }

    /// A crowd's own structures: writers in canonical order, each reader where its owner puts
    /// it, the bound above every small holder's lease, the big holders listed once each.
    fn check_crowd(&self, id: NodeId) -> Result<(), String> {
        let Some(crowd) = self.crowd(id) else {
            return Ok(());
        };
        let writers_ordered = crowd.writers.windows(2).all(|w| {
            self.owner(w[0].owner())
                .token
                .cmp_text(&self.owner(w[1].owner()).token)
                .is_le()
        });
        if !writers_ordered || crowd.writers.iter().any(|h| h.mode() != Mode::Write) {
            return Err(format!(
                "the writers of the crowd at node {id} are out of order"
            ));
        }
        let mut bigs = Vec::new();
        for held in self.holders(id) {
            if !self
                .holder(id, held.owner)
                .is_some_and(|found| std::ptr::eq(found, held))
            {
                return Err(format!(
                    "a lock of the crowd at node {id} is not found by owner"
                ));
            }
            if self.is_big(held.owner()) {
                bigs.push(held.owner);
            } else if self.owner(held.owner()).deadline > crowd.latest {
                return Err(format!(
                    "the crowd at node {id} has a lease above its bound"
                ));
            }
        }
        let mut listed = crowd.bigs.clone();
        bigs.sort_unstable();
        listed.sort_unstable();
        if bigs != listed {
            return Err(format!(
                "the crowd at node {id} lists big holders {listed:?}, expected {bigs:?}"
            ));
        }
        Ok(())
    }

    /// The marks, the `latest` bounds and the big owners' marks, recomputed bottom up (children
    /// come after their parents in `order`).
    fn check_marks(&self, order: &[NodeId]) -> Result<(), String> {
        let mut below: BTreeMap<NodeId, [u32; 2]> = BTreeMap::new();
        let mut latest: BTreeMap<NodeId, u64> = BTreeMap::new();
        let mut bigs: BTreeMap<NodeId, BTreeMap<OwnerId, [u32; 2]>> = BTreeMap::new();
        for &id in order.iter().rev() {
            let node = &self.nodes[id as usize];
            let counts = below.remove(&id).unwrap_or([0, 0]);
            if counts != self.below(id) {
                return Err(format!(
                    "marks at node {id} are {:?}, expected {counts:?}",
                    self.below(id)
                ));
            }
            let bound = latest.remove(&id).unwrap_or(0);
            if self.latest(id) < bound {
                return Err(format!(
                    "latest at node {id} is {}, below a lease of {bound} beneath",
                    self.latest(id)
                ));
            }
            let marks = bigs.remove(&id).unwrap_or_default();
            let stored: BTreeMap<OwnerId, [u32; 2]> = self
                .big_marks_at(id)
                .iter()
                .map(|mark| (mark.owner, mark.below))
                .collect();
            if marks != stored
                || !self
                    .big_marks_at(id)
                    .windows(2)
                    .all(|w| w[0].owner < w[1].owner)
            {
                return Err(format!(
                    "big marks at node {id} are {stored:?}, expected {marks:?}"
                ));
            }
            if id == ROOT {
                continue;
            }
            let parent = node.parent;
            let mut up = counts;
            let mut bound = bound;
            let mut up_bigs = marks;
            for held in self.holders(id) {
                up[held.mode().index()] += 1;
                let owner = held.owner();
                if self.is_big(owner) {
                    up_bigs.entry(owner).or_insert([0, 0])[held.mode().index()] += 1;
                } else {
                    bound = bound.max(self.owner(owner).deadline);
                }
            }
            let p = below.entry(parent).or_insert([0, 0]);
            p[0] += up[0];
            p[1] += up[1];
            let l = latest.entry(parent).or_insert(0);
            *l = (*l).max(bound);
            let b = bigs.entry(parent).or_default();
            for (owner, counts) in up_bigs {
                let e = b.entry(owner).or_insert([0, 0]);
                e[0] += counts[0];
                e[1] += counts[1];
            }
        }
        let count: usize = self
            .big_marks
            .keys()
            .map(|n| self.big_marks_at(n).len())
            .sum();
        if count != self.big_mark_count || (self.bigs.is_empty() && !self.big_marks.is_empty()) {
            return Err("the count of big marks disagrees with them".into());
        }
        Ok(())
    }

    /// Owners: their lists and sets against the locks they hold, the token index, the expiry
    /// index, the graveyard, and the counts.
    fn check_owners(&self, mut owned: BTreeMap<OwnerId, BTreeSet<Tagged>>) -> Result<(), String> {
        let (mut len, mut buried_locks, mut big_locks, mut token_bytes) = (0, 0, 0, 0);
        let mut expected = BTreeSet::new();
        let mut buried = Vec::new();
        let mut owners = 0;
        for (id, slot) in self.owners.iter().enumerate() {
            let id = id as OwnerId;
            let Some(owner) = slot else {
                if !self.free_owners.contains(id) {
                    return Err(format!("owner slot {id} is empty and not free"));
                }
                continue;
            };
            owners += 1;
            if self.free_owners.contains(id) {
                return Err(format!("owner {id} is live and free"));
            }
            token_bytes += owner.token.heap_bytes();
            let held = owned.remove(&id).unwrap_or_default();
            let listed: BTreeSet<Tagged> = self.all_locks(id).into_iter().collect();
            if held.is_empty() || listed != held || listed.len() != self.lock_count(id) {
                return Err(format!(
                    "owner {:?}'s list disagrees with the tree",
                    owner.token
                ));
            }
            let big = owner.lock.0 == BIG;
            if big != self.bigs.contains_key(id)
                || (owner.lock.0 == SPILLED) != self.owner_locks.contains_key(id)
                || (owner.lock.0 == SPILLED && !(2..=self.small).contains(&listed.len()))
            {
                return Err(format!("owner {:?}'s locks are kept wrongly", owner.token));
            }
            if let Some(record) = self.bigs.get(id) {
                big_locks += listed.len();
                if !record.buried && listed.len() <= self.small / 2 {
                    return Err(format!("owner {:?} is big with few locks", owner.token));
                }
                if listed
                    .iter()
                    .any(|lock| !self.is_at_or_beneath(lock.id(), record.lca))
                {
                    return Err(format!("owner {:?}'s lca is below a lock", owner.token));
                }
                if record.buried {
                    buried.push(id);
                    buried_locks += listed.len();
                    if owner.deadline != 0 || self.find_owner(&owner.token) == Some(id) {
                        return Err(format!("buried owner {:?} is still indexed", owner.token));
                    }
                    continue;
                }
            }
            len += listed.len();
            if self.find_owner(&owner.token) != Some(id) {
                return Err(format!("owner {:?} is not indexed", owner.token));
            }
            if owner.deadline == 0 {
                return Err(format!("owner {:?} is not filed", owner.token));
            }
            expected.insert((owner.deadline, id));
        }
        if !owned.is_empty() {
            return Err("locks held by owners that do not exist".into());
        }
        if len != self.len || buried_locks != self.buried_locks || big_locks != self.big_locks {
            return Err(format!(
                "the lock counts disagree: {len}/{} live, {buried_locks}/{} buried, {big_locks}/{} big",
                self.len, self.buried_locks, self.big_locks
            ));
        }
        if owners + self.free_owners.len() != self.owners.len() || token_bytes != self.token_bytes {
            return Err("the owner counts disagree with the owners".into());
        }
        let mut graveyard: Vec<OwnerId> = self.graveyard.iter().copied().collect();
        graveyard.sort_unstable();
        buried.sort_unstable();
        if graveyard != buried {
            return Err(format!(
                "the graveyard holds {graveyard:?}, buried are {buried:?}"
            ));
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
        if expected != filed {
            return Err("the expiry index disagrees with the owners".into());
        }
        if self.tables.len()
            != self.free_tables.len() + self.tables.iter().filter(|t| !t.is_empty()).count()
        {
            return Err("free table slots disagree with the tables".into());
        }
        Ok(())
    }
}
