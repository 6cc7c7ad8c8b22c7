//! The lock table of one project: where `WRITE /A` is decided.
//!
//! Every locked path has a node in a radix trie keyed by the path's trie key (see `path.rs`),
//! and so has every ancestor of a locked path. A node holds the locks taken on its exact path
//! and, as Gray's intention marks, the number of `READ` and `WRITE` locks held strictly beneath
//! it. A request for `mode` on `path` by `token` is then decided by looking at O(depth) nodes:
//!
//! * the locks held on `path` and on each of its ancestors, because they cover `path`;
//! * the marks on `path`'s own node, because they count the locks that `path` would cover.
//!
//! Locks of the requesting token never conflict with the request, so the marks alone do not
//! settle a non-zero count: the token's own locks beneath `path` are subtracted, found in the
//! token's ordered set of locked paths. That costs what the requester itself holds beneath
//! `path`, never what others hold.
//!
//! Time never comes from inside: every method that needs it takes `now` in milliseconds. A lock
//! whose deadline is not after `now` is expired. The mutating methods assume the caller ran
//! [`LockTable::reclaim_expired`] first, as the Redis layer does when it opens a key for
//! writing; the reading methods filter expired locks themselves, because a replica must hide
//! expired locks without reclaiming them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use radix_trie::{SubTrie, Trie, TrieCommon};

use crate::lock::{LockInfo, Mode, Token};
use crate::path::Path;

/// One locked path, or an ancestor of one.
#[derive(Clone, Debug, Default)]
struct Node {
    /// The locks held on this exact path, in canonical order: writers first, then by token.
    /// Canonical order keeps listings, persistence and digests identical on every server, and
    /// lets a reader's check stop at the first `READ`.
    held: Vec<Held>,
    /// The intention marks: how many locks of each mode are held strictly beneath this path,
    /// indexed by `Mode::index`.
    below: [u32; 2],
}

impl Node {
    fn is_unused(&self) -> bool {
        self.held.is_empty() && self.below == [0, 0]
    }

    fn position(&self, mode: Mode, token: &Token) -> Result<usize, usize> {
        self.held
            .binary_search_by(|h| (h.mode, &h.token).cmp(&(mode, token)))
    }
}

#[derive(Clone, Debug)]
struct Held {
    mode: Mode,
    token: Token,
    deadline: u64,
    fence: u64,
}

/// A set of modes held by one token on one path.
type ModeBits = u8;

fn bit(mode: Mode) -> ModeBits {
    1 << mode.index()
}

/// The modes whose locks beneath a path block a request for `mode` there.
fn blocking_count(mode: Mode, counts: [u32; 2]) -> u64 {
    match mode {
        Mode::Write => u64::from(counts[0]) + u64::from(counts[1]),
        Mode::Read => u64::from(counts[Mode::Write.index()]),
    }
}

/// The locks of one project.
#[derive(Clone, Debug)]
pub struct LockTable {
    index: Trie<Vec<u8>, Node>,
    /// For each token, the paths it holds locks on: for releasing or renewing all of them, and
    /// for subtracting a requester's own locks from the intention marks.
    owners: HashMap<Token, BTreeMap<Vec<u8>, ModeBits>>,
    /// Every lock by deadline, so that reclaiming expired locks costs what it reclaims.
    expiry: BTreeSet<(u64, Vec<u8>, Mode, Token)>,
    next_fence: u64,
    len: usize,
    /// Key bytes over all nodes, and key plus token bytes over all locks: what the memory
    /// estimate needs beyond counts, kept up to date so that the estimate costs O(1).
    node_key_bytes: usize,
    lock_bytes: usize,
}

/// Bytes a trie node costs beyond its key: the radix node with its 16 child slots, the key-value
/// box, and the `Node` itself.
const NODE_OVERHEAD: usize = 224 + std::mem::size_of::<Node>();
/// Bytes a lock costs beyond its key and token bytes: its entry in the node, in the owner's
/// ordered map, and in the expiry set (which copy the key and token again, hence the factor 3
/// applied to `lock_bytes`).
const LOCK_OVERHEAD: usize = std::mem::size_of::<Held>() + 48 + 96;

impl Default for LockTable {
    fn default() -> Self {
        LockTable::new()
    }
}

impl LockTable {
    pub fn new() -> LockTable {
        LockTable {
            index: Trie::new(),
            owners: HashMap::new(),
            expiry: BTreeSet::new(),
            next_fence: 1,
            len: 0,
            node_key_bytes: 0,
            lock_bytes: 0,
        }
    }

    /// The number of locks stored, including expired ones not yet reclaimed.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// An estimate of the heap bytes the table uses, for `MEMORY USAGE`. It depends only on what
    /// the table holds, so a released lock takes its bytes back exactly.
    pub fn memory_estimate(&self) -> usize {
        std::mem::size_of::<LockTable>()
            + self.index.len() * NODE_OVERHEAD
            + self.node_key_bytes
            + self.len * LOCK_OVERHEAD
            + 3 * self.lock_bytes
            + self.owners.len() * 64
    }

    /// How much work freeing the table is, in allocations, for Redis's lazy-free decision.
    pub fn free_effort(&self) -> usize {
        self.index.len() + 3 * self.len
    }

    /// The fence the next successful acquire will take.
    pub fn next_fence(&self) -> u64 {
        self.next_fence
    }

    /// Raises the fence counter to at least `next`; it never goes down, so a fence is never
    /// reused.
    pub fn raise_next_fence(&mut self, next: u64) {
        self.next_fence = self.next_fence.max(next);
    }

    /// The earliest deadline of any stored lock.
    pub fn next_deadline(&self) -> Option<u64> {
        self.expiry.first().map(|entry| entry.0)
    }

    /// Grants every `(mode, path)` to `token` for `ttl` milliseconds, all or nothing. Returns
    /// the fence of the grant, or `None` when any of them is blocked by another owner's lock.
    pub fn acquire(
        &mut self,
        now: u64,
        token: &Token,
        ttl: u64,
        items: &[(Mode, Path)],
    ) -> Option<u64> {
        if items
            .iter()
            .any(|(mode, path)| self.is_blocked(token, *mode, path))
        {
            return None;
        }
        let fence = self.next_fence;
        self.grant(token, now.saturating_add(ttl), fence, items);
        Some(fence)
    }

    /// Records a grant that was already decided: by `acquire`, or by a master whose effect a
    /// replica or an AOF replay applies. Re-granting a `(path, mode)` the token holds refreshes
    /// its deadline and fence. Returns how many new locks it added.
    pub fn grant(
        &mut self,
        token: &Token,
        deadline: u64,
        fence: u64,
        items: &[(Mode, Path)],
    ) -> usize {
        self.raise_next_fence(fence.saturating_add(1));
        items
            .iter()
            .filter(|(mode, path)| self.insert(path, token, *mode, deadline, fence))
            .count()
    }

    /// Frees `token`'s locks at `paths` (every mode held there), or all of its locks when
    /// `paths` is `None`. Returns the locks freed.
    pub fn release(&mut self, token: &Token, paths: Option<&[Path]>) -> Vec<LockInfo> {
        let targets: Vec<(Path, Mode)> = match paths {
            Some(paths) => paths
                .iter()
                .flat_map(|path| Mode::ALL.map(|mode| (path.clone(), mode)))
                .collect(),
            None => self
                .owners
                .get(token)
                .into_iter()
                .flatten()
                .flat_map(|(key, &bits)| {
                    Mode::ALL
                        .into_iter()
                        .filter(move |&mode| bits & bit(mode) != 0)
                        .map(move |mode| (Path::from_trusted_key(key.clone()), mode))
                })
                .collect(),
        };
        targets
            .into_iter()
            .filter_map(|(path, mode)| self.remove(&path, token, mode))
            .collect()
    }

    /// Moves the deadline of every lock of `token` to `deadline`. Returns how many it moved.
    pub fn renew(&mut self, token: &Token, deadline: u64) -> usize {
        let Some(paths) = self.owners.get(token) else {
            return 0;
        };
        let mut renewed = 0;
        for (key, &bits) in paths {
            let Some(node) = self.index.get_mut(key.as_slice()) else {
                continue;
            };
            for mode in Mode::ALL.into_iter().filter(|&m| bits & bit(m) != 0) {
                let Ok(i) = node.position(mode, token) else {
                    continue;
                };
                let held = &mut node.held[i];
                self.expiry
                    .remove(&(held.deadline, key.clone(), mode, token.clone()));
                held.deadline = deadline;
                self.expiry
                    .insert((deadline, key.clone(), mode, token.clone()));
                renewed += 1;
            }
        }
        renewed
    }

    /// Removes every lock whose deadline is not after `now`, earliest first, and returns them.
    pub fn reclaim_expired(&mut self, now: u64) -> Vec<LockInfo> {
        let mut reclaimed = Vec::new();
        while let Some((deadline, key, mode, token)) = self.expiry.first().cloned() {
            if deadline > now {
                break;
            }
            let path = Path::from_trusted_key(key);
            match self.remove(&path, &token, mode) {
                Some(info) => reclaimed.push(info),
                // Unreachable while the expiry set mirrors the nodes; dropping the entry keeps
                // the loop finite even if it did not.
                None => {
                    self.expiry.pop_first();
                }
            }
        }
        reclaimed
    }

    /// Whether another owner's lock blocks `token` from taking `mode` on `path`. Expired locks
    /// count, so reclaim them first.
    pub fn is_blocked(&self, token: &Token, mode: Mode, path: &Path) -> bool {
        if self
            .covering_blockers(Some(token), mode, path)
            .next()
            .is_some()
        {
            return true;
        }
        let Some(node) = self.index.get(path.key()) else {
            return false;
        };
        let beneath = blocking_count(mode, node.below);
        beneath > 0 && beneath > blocking_count(mode, self.own_beneath(token, path))
    }

    /// The live locks that block the request `items` of `token` (of nobody when `None`), each
    /// once, in tree order.
    pub fn blockers(
        &self,
        now: u64,
        token: Option<&Token>,
        items: &[(Mode, Path)],
    ) -> Vec<LockInfo> {
        let mut found = BTreeSet::new();
        for (mode, path) in items {
            for (key, held) in self.covering_blockers(token, *mode, path) {
                if held.deadline > now {
                    found.insert(info(key, held));
                }
            }
            if let Some(sub) = self.index.get_raw_descendant(path.key()) {
                collect_beneath(&sub, now, token, *mode, path.key(), &mut found);
            }
        }
        found.into_iter().collect()
    }

    /// The live locks on `under` and beneath it, in tree order.
    pub fn locks(&self, now: u64, under: &Path) -> Vec<LockInfo> {
        let Some(sub) = self.index.get_raw_descendant(under.key()) else {
            return Vec::new();
        };
        sub.iter()
            .filter(|(key, _)| key.starts_with(under.key()))
            .flat_map(|(key, node)| {
                node.held
                    .iter()
                    .filter(move |h| h.deadline > now)
                    .map(move |h| info(key, h))
            })
            .collect()
    }

    /// Every stored lock, expired or not, in tree order: the canonical order that persistence
    /// and digests rely on.
    pub fn iter(&self) -> impl Iterator<Item = LockInfo> + '_ {
        self.index
            .iter()
            .flat_map(|(key, node)| node.held.iter().map(move |h| info(key, h)))
    }

    /// The number of trie nodes: locked paths and their ancestors. Zero once every lock is
    /// gone, which is how tests show that a released lock leaves nothing behind.
    pub fn node_count(&self) -> usize {
        self.index.len()
    }

    /// Recomputes every derived structure from the locks themselves and reports the first
    /// disagreement: intention marks, the owners' index, the expiry index, the count, the
    /// canonical order, and the absence of nodes that nothing needs.
    pub fn check_integrity(&self) -> Result<(), String> {
        let mut below: BTreeMap<Vec<u8>, [u32; 2]> = BTreeMap::new();
        let mut owners: BTreeMap<(Token, Vec<u8>), ModeBits> = BTreeMap::new();
        let mut expiry = BTreeSet::new();
        let mut len = 0;
        let mut node_key_bytes = 0;
        let mut lock_bytes = 0;
        for (key, node) in self.index.iter() {
            node_key_bytes += key.len();
            let path = Path::from_key(key.clone()).ok_or("malformed key in the index")?;
            if node.is_unused() {
                return Err(format!("unused node at {path}"));
            }
            if !node
                .held
                .windows(2)
                .all(|w| (w[0].mode, &w[0].token) < (w[1].mode, &w[1].token))
            {
                return Err(format!("locks at {path} are not in canonical order"));
            }
            for held in &node.held {
                len += 1;
                lock_bytes += key.len() + held.token.as_bytes().len();
                if held.fence >= self.next_fence {
                    return Err(format!(
                        "fence {} at {path} is not below the counter",
                        held.fence
                    ));
                }
                for ancestor in path.ancestor_keys() {
                    below.entry(ancestor.to_vec()).or_default()[held.mode.index()] += 1;
                }
                *owners.entry((held.token.clone(), key.clone())).or_default() |= bit(held.mode);
                expiry.insert((held.deadline, key.clone(), held.mode, held.token.clone()));
            }
        }
        for (key, node) in self.index.iter() {
            let expected = below.remove(key).unwrap_or_default();
            if node.below != expected {
                let path = Path::from_trusted_key(key.clone());
                return Err(format!(
                    "marks at {path} are {:?}, expected {expected:?}",
                    node.below
                ));
            }
        }
        if let Some(key) = below.keys().next() {
            let path = Path::from_trusted_key(key.clone());
            return Err(format!("ancestor {path} has no node"));
        }
        let indexed: BTreeMap<(Token, Vec<u8>), ModeBits> = self
            .owners
            .iter()
            .flat_map(|(token, paths)| paths.iter().map(|(k, &b)| ((token.clone(), k.clone()), b)))
            .collect();
        if indexed != owners {
            return Err("the owners' index disagrees with the locks".into());
        }
        if expiry != self.expiry {
            return Err("the expiry index disagrees with the locks".into());
        }
        if len != self.len {
            return Err(format!("{} locks counted, {len} stored", self.len));
        }
        if (node_key_bytes, lock_bytes) != (self.node_key_bytes, self.lock_bytes) {
            return Err("the byte counts disagree with the contents".into());
        }
        Ok(())
    }

    /// Locks on `path` or its ancestors that block `mode` for `token`.
    fn covering_blockers<'a>(
        &'a self,
        token: Option<&'a Token>,
        mode: Mode,
        path: &'a Path,
    ) -> impl Iterator<Item = (&'a [u8], &'a Held)> + 'a {
        path.ancestor_keys()
            .chain(std::iter::once(path.key()))
            .filter_map(move |key| self.index.get(key).map(|node| (key, node)))
            .flat_map(move |(key, node)| {
                node.held
                    .iter()
                    // Writers come first, so a reader looks at the writers alone.
                    .take_while(move |h| h.mode.conflicts_with(mode))
                    .filter(move |h| Some(&h.token) != token)
                    .map(move |h| (key, h))
            })
    }

    /// How many locks of each mode `token` holds strictly beneath `path`.
    fn own_beneath(&self, token: &Token, path: &Path) -> [u32; 2] {
        let mut counts = [0, 0];
        let Some(paths) = self.owners.get(token) else {
            return counts;
        };
        let range = paths.range::<[u8], _>((Bound::Excluded(path.key()), Bound::Unbounded));
        for (_, &bits) in range.take_while(|(key, _)| key.starts_with(path.key())) {
            for mode in Mode::ALL {
                if bits & bit(mode) != 0 {
                    counts[mode.index()] += 1;
                }
            }
        }
        counts
    }

    /// Adds one lock, or refreshes it when the token already holds that mode on that path.
    /// Returns whether the lock is new.
    fn insert(
        &mut self,
        path: &Path,
        token: &Token,
        mode: Mode,
        deadline: u64,
        fence: u64,
    ) -> bool {
        let key = path.key();
        let held = Held {
            mode,
            token: token.clone(),
            deadline,
            fence,
        };
        match self.index.get_mut(key) {
            Some(node) => match node.position(mode, token) {
                Ok(i) => {
                    let old = std::mem::replace(&mut node.held[i], held);
                    self.expiry
                        .remove(&(old.deadline, key.to_vec(), mode, token.clone()));
                    self.expiry
                        .insert((deadline, key.to_vec(), mode, token.clone()));
                    return false;
                }
                Err(i) => node.held.insert(i, held),
            },
            None => {
                self.index.insert(
                    key.to_vec(),
                    Node {
                        held: vec![held],
                        below: [0, 0],
                    },
                );
                self.node_key_bytes += key.len();
            }
        }
        for ancestor in path.ancestor_keys() {
            match self.index.get_mut(ancestor) {
                Some(node) => node.below[mode.index()] += 1,
                None => {
                    let mut node = Node::default();
                    node.below[mode.index()] = 1;
                    self.index.insert(ancestor.to_vec(), node);
                    self.node_key_bytes += ancestor.len();
                }
            }
        }
        self.lock_bytes += key.len() + token.as_bytes().len();
        *self
            .owners
            .entry(token.clone())
            .or_default()
            .entry(key.to_vec())
            .or_insert(0) |= bit(mode);
        self.expiry
            .insert((deadline, key.to_vec(), mode, token.clone()));
        self.len += 1;
        true
    }

    /// Removes one lock and every node that only it needed.
    fn remove(&mut self, path: &Path, token: &Token, mode: Mode) -> Option<LockInfo> {
        let key = path.key();
        let node = self.index.get_mut(key)?;
        let i = node.position(mode, token).ok()?;
        let held = node.held.remove(i);
        if node.is_unused() {
            self.index.remove(key);
            self.node_key_bytes -= key.len();
        }
        for ancestor in path.ancestor_keys() {
            if let Some(node) = self.index.get_mut(ancestor) {
                node.below[mode.index()] -= 1;
                if node.is_unused() {
                    self.index.remove(ancestor);
                    self.node_key_bytes -= ancestor.len();
                }
            }
        }
        self.lock_bytes -= key.len() + token.as_bytes().len();
        if let Some(paths) = self.owners.get_mut(token) {
            if let Some(bits) = paths.get_mut(key) {
                *bits &= !bit(mode);
                if *bits == 0 {
                    paths.remove(key);
                }
            }
            if paths.is_empty() {
                self.owners.remove(token);
            }
        }
        self.expiry
            .remove(&(held.deadline, key.to_vec(), mode, token.clone()));
        self.len -= 1;
        Some(info(key, &held))
    }
}

fn info(key: &[u8], held: &Held) -> LockInfo {
    LockInfo {
        path: Path::from_trusted_key(key.to_vec()),
        mode: held.mode,
        token: held.token.clone(),
        deadline: held.deadline,
        fence: held.fence,
    }
}

/// Collects the live locks strictly beneath `under` that block `mode` for `token`, descending
/// only into subtrees whose intention marks say they hold such a lock.
fn collect_beneath(
    sub: &SubTrie<'_, Vec<u8>, Node>,
    now: u64,
    token: Option<&Token>,
    mode: Mode,
    under: &[u8],
    found: &mut BTreeSet<LockInfo>,
) {
    if let (Some(key), Some(node)) = (sub.key(), sub.value()) {
        if key.len() > under.len() && key.starts_with(under) {
            for held in &node.held {
                if held.mode.conflicts_with(mode)
                    && Some(&held.token) != token
                    && held.deadline > now
                {
                    found.insert(info(key, held));
                }
            }
        }
        if blocking_count(mode, node.below) == 0 {
            return;
        }
    }
    for child in sub.children() {
        collect_beneath(&child, now, token, mode, under, found);
    }
}
