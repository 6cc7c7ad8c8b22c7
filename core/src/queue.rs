//! The index of a project's wait queue: where each waiting request's items sit in the path tree,
//! and which of them are at the front.
//!
//! Every path that has a waiting item at or below it has a node, keyed by its path key. A node
//! keeps, per mode, the ids of the items on exactly its path (`here`), the ids of the items in its
//! whole subtree (`sub`), and its children ordered by the smallest id in their subtree (`kids`).
//! Ids are arrival order, so the smallest id of a set is its oldest waiter.
//!
//! An item is *at the front* when no item of an earlier waiter conflicts with it (here
//! regardless of owners; [`crate::project`] handles waiters that share a token). Only a waiter
//! whose items are all at the front can be granted: anyone behind an earlier conflicting waiter
//! stays behind it until that one leaves. [`WaitIndex::fronts_near`] finds the waiters with an
//! item at the front that a freed path concerns (a superset of those that can go, which the
//! project checks) by walking down from the root and pruning every subtree whose oldest item is
//! already behind an earlier one above it. A chain of writers on one path is then one look at the oldest, however
//! long the chain, and a thousand writers on distinct files under one folder are a walk over
//! exactly those thousand. [`WaitIndex::any_earlier`] answers whether a request is behind an
//! earlier waiter by looking at the oldest items of the related paths, never at a whole queue.
//!
//! Costs: inserting or removing an item is O(depth × log n). A walk costs O(depth × log n) per
//! node visited; it visits the nodes on the way to the waiters it returns, and a node below is
//! only visited when its subtree holds an item older than every conflicting item above it.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Unbounded};
use std::sync::Arc;

use crate::lock::Mode;
use crate::path::Path;

const WRITE: usize = 0;
const READ: usize = 1;

fn slot(mode: Mode) -> usize {
    match mode {
        Mode::Write => WRITE,
        Mode::Read => READ,
    }
}

/// The oldest id in a subtree, per mode.
type Oldest = [Option<u64>; 2];

#[derive(Debug, Default, Clone)]
struct Node {
    /// The node's own path key, shared with the map that holds the node and with its parent's
    /// `kids`: a hand-over moves a child in its parent's order, which then costs no allocation.
    key: Arc<[u8]>,
    here: [BTreeSet<u64>; 2],
    sub: [BTreeSet<u64>; 2],
    kids: [BTreeSet<(u64, Arc<[u8]>)>; 2],
}

impl Node {
    fn oldest(&self) -> Oldest {
        [
            self.sub[WRITE].first().copied(),
            self.sub[READ].first().copied(),
        ]
    }

    fn oldest_here(&self, mode: usize) -> u64 {
        self.here[mode].first().copied().unwrap_or(u64::MAX)
    }

    fn oldest_sub(&self, mode: usize) -> u64 {
        self.sub[mode].first().copied().unwrap_or(u64::MAX)
    }

    fn is_empty(&self) -> bool {
        self.sub[WRITE].is_empty() && self.sub[READ].is_empty()
    }
}

/// The oldest ids above a node that block the items below it: any earlier write blocks a read,
/// any earlier item blocks a write.
#[derive(Clone, Copy)]
struct Bounds {
    write: u64,
    any: u64,
}

impl Bounds {
    const NONE: Bounds = Bounds {
        write: u64::MAX,
        any: u64::MAX,
    };

    /// The bounds for what lies below `node`, which is itself below `self`.
    fn below(self, node: &Node) -> Bounds {
        let write = self.write.min(node.oldest_here(WRITE));
        Bounds {
            write,
            any: self.any.min(write).min(node.oldest_here(READ)),
        }
    }
}

/// The waiting items of one project, indexed by path.
#[derive(Debug, Default, Clone)]
pub struct WaitIndex {
    /// Ordered rather than hashed: a hash table that doubles stalls the command that makes it
    /// grow.
    nodes: BTreeMap<Arc<[u8]>, Node>,
}

impl WaitIndex {
    pub const fn new() -> WaitIndex {
        WaitIndex {
            nodes: BTreeMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The number of nodes, for tests: an empty index has none left behind.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Adds waiter `id`'s item. A waiter's items must be distinct (see [`distinct`]).
    pub fn insert(&mut self, id: u64, mode: Mode, path: &Path) {
        self.update(id, mode, path, true);
    }

    /// Removes what [`WaitIndex::insert`] added.
    pub fn remove(&mut self, id: u64, mode: Mode, path: &Path) {
        self.update(id, mode, path, false);
    }

    /// Adds or removes one item, deepest node first, so that each parent learns its child's new
    /// oldest ids in the same pass.
    fn update(&mut self, id: u64, mode: Mode, path: &Path, add: bool) {
        let key = path.key();
        let m = slot(mode);
        let mut child: Option<(Arc<[u8]>, Oldest, Oldest)> = None;
        for end in path.prefix_ends().rev() {
            let prefix = &key[..end];
            if add && !self.nodes.contains_key(prefix) {
                let key: Arc<[u8]> = Arc::from(prefix);
                let node = Node {
                    key: key.clone(),
                    ..Node::default()
                };
                self.nodes.insert(key, node);
            }
            let Some(node) = self.nodes.get_mut(prefix) else {
                // Nothing to remove here, nor above: an absent node has no subtree items.
                return;
            };
            if let Some((child_key, before, after)) = child.take() {
                for mode in [WRITE, READ] {
                    if before[mode] == after[mode] {
                        continue;
                    }
                    if let Some(old) = before[mode] {
                        node.kids[mode].remove(&(old, child_key.clone()));
                    }
                    if let Some(new) = after[mode] {
                        node.kids[mode].insert((new, child_key.clone()));
                    }
                }
            }
            let before = node.oldest();
            if end == key.len() {
                if add {
                    node.here[m].insert(id);
                } else {
                    node.here[m].remove(&id);
                }
            }
            if add {
                node.sub[m].insert(id);
            } else {
                node.sub[m].remove(&id);
            }
            let after = node.oldest();
            let node_key = node.key.clone();
            if node.is_empty() {
                self.nodes.remove(prefix);
            }
            child = Some((node_key, before, after));
        }
    }

    /// The ids of the waiters with an item at or beneath `path`, oldest first, each once: the
    /// node of `path` keeps every id of its subtree, per mode.
    pub fn ids_under(&self, path: &Path) -> Vec<u64> {
        let Some(node) = self.nodes.get(path.key()) else {
            return Vec::new();
        };
        let mut ids: Vec<u64> = node.sub[WRITE]
            .iter()
            .chain(&node.sub[READ])
            .copied()
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Whether an item older than `before`, for which `counts` says yes, conflicts with `mode`
    /// on `path`. Items are looked at oldest first and the answer is the first yes, so the cost
    /// is O(depth) plus the items `counts` turns down (the requester's own, in practice none).
    pub fn any_earlier(
        &self,
        mode: Mode,
        path: &Path,
        before: u64,
        mut counts: impl FnMut(u64) -> bool,
    ) -> bool {
        let key = path.key();
        let modes: &[usize] = match mode {
            Mode::Write => &[WRITE, READ],
            Mode::Read => &[WRITE],
        };
        for end in path.prefix_ends() {
            let Some(node) = self.nodes.get(&key[..end]) else {
                return false;
            };
            // Above the path only the items on the ancestor itself are related; at the path,
            // its whole subtree is.
            let sets = if end == key.len() {
                &node.sub
            } else {
                &node.here
            };
            for &m in modes {
                if sets[m].range(..before).any(|&id| counts(id)) {
                    return true;
                }
            }
        }
        false
    }

    /// Appends to `out` the waiters with an id above `after` and an item at the front (no earlier
    /// item conflicts with it, whoever owns it) that `mode` on `path` conflicts with. Among them
    /// are all the waiters that freeing such a lock, or such a waiter leaving, can let through.
    /// Appends a waiter once per such item; the caller dedups.
    pub fn fronts_near(&self, mode: Mode, path: &Path, after: u64, out: &mut Vec<u64>) {
        // A read lock or a reading waiter only ever held up writers.
        let reads_too = mode == Mode::Write;
        let key = path.key();
        let mut bounds = Bounds::NONE;
        let mut last = None;
        for end in path.prefix_ends() {
            let Some(node) = self.nodes.get(&key[..end]) else {
                return;
            };
            take_fronts(node, bounds, reads_too, after, out);
            bounds = bounds.below(node);
            last = Some(node);
        }
        if let Some(node) = last {
            self.descend(node, bounds, reads_too, after, out);
        }
    }

    /// Visits the children of `node` whose subtree holds an item older than the bounds above
    /// them, oldest first, stopping at the first child that holds none.
    fn descend(
        &self,
        node: &Node,
        bounds: Bounds,
        reads_too: bool,
        after: u64,
        out: &mut Vec<u64>,
    ) {
        let visit = |child_key: &Arc<[u8]>, out: &mut Vec<u64>| {
            if let Some(child) = self.nodes.get(&**child_key) {
                take_fronts(child, bounds, reads_too, after, out);
                self.descend(child, bounds.below(child), reads_too, after, out);
            }
        };
        if reads_too {
            for (oldest, child_key) in &node.kids[READ] {
                if *oldest > bounds.write {
                    break;
                }
                visit(child_key, out);
            }
        }
        for (oldest, child_key) in &node.kids[WRITE] {
            if *oldest > bounds.any {
                break;
            }
            let seen = reads_too
                && self
                    .nodes
                    .get(&**child_key)
                    .and_then(|child| child.sub[READ].first())
                    .is_some_and(|&read| read <= bounds.write);
            if !seen {
                visit(child_key, out);
            }
        }
    }
}

/// The items on `node`'s own path that are at the front, given the bounds from above: readers
/// older than any write above, on the path or below it; the oldest writer, if it is older than
/// anything above, on the path or below it. Comparisons let an id equal to the bound through:
/// that is the waiter's own item on a related path, which never holds it up.
fn take_fronts(node: &Node, bounds: Bounds, reads_too: bool, after: u64, out: &mut Vec<u64>) {
    let write_bound = bounds.write.min(node.oldest_sub(WRITE));
    if reads_too && after < write_bound {
        out.extend(
            node.here[READ]
                .range((Excluded(after), Unbounded))
                .take_while(|&&id| id <= write_bound),
        );
    }
    if let Some(&writer) = node.here[WRITE].first() {
        let any_bound = bounds.any.min(node.oldest_sub(READ));
        if writer > after && writer <= any_bound && writer == node.oldest_sub(WRITE) {
            out.push(writer);
        }
    }
}

/// Calls `each` for a request's items without repeats, which is how the index holds them. A
/// request names at most a few dozen items, so looking back over the earlier ones costs less
/// than sorting a copy (and allocates nothing).
pub fn distinct<'a>(items: &'a [(Mode, Path)], mut each: impl FnMut(Mode, &'a Path)) {
    for (i, (mode, path)) in items.iter().enumerate() {
        if !items[..i].iter().any(|(m, p)| m == mode && p == path) {
            each(*mode, path);
        }
    }
}
