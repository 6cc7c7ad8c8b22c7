//! [`LockTable`]: a project's locks in one of two forms, as Redis keeps a hash in a listpack
//! while it is small and in a hash table past `hash-max-listpack-entries`.
//!
//! A table starts compact (`compact`: one allocation, decided by a scan bounded by its size
//! limit) and turns into the tree (`Tree`, the rest of `table`) when a change would take it past
//! the compact form's limits (its locks or bytes), or would make it keep what only the tree
//! keeps (a lock stored beside a conflicting one, which the tree records as a cut). It turns
//! back when a change leaves the tree at half the limits or less and holding nothing only the
//! tree keeps, so that a table going up and down around a limit does not convert each time.
//! A conversion copies at most the compact form's limit of locks, so no command pays more than
//! that for it.
//!
//! Both forms keep every rule (conflicts, one lease per token, fences, notes, cuts, lazy expiry)
//! and give the same answers; the property tests run every history in both, and across
//! conversions, against one reference (`core/tests/model.rs`, `waits.rs`), with the compact
//! form's limit as a parameter (0 keeps a table a tree).

use std::borrow::Cow;

use super::compact::{self, Compact};
use super::defrag::{self, Progress, Relocate};
use super::{Acquired, Released, Request, Tree};
use crate::lock::{Freed, LockInfo, Mode, Note, Token};
use crate::path::Path;

/// The locks of one project, in whichever form fits them (see the top of this file).
#[derive(Clone, Debug)]
pub struct LockTable {
    form: Form,
}

#[derive(Clone, Debug)]
enum Form {
    Compact(Compact),
    Tree(Box<Tree>),
}

// The table is what a project key costs before it holds anything: two words.
const _: () = assert!(std::mem::size_of::<LockTable>() == 16);

impl Default for LockTable {
    fn default() -> Self {
        LockTable::new()
    }
}

impl LockTable {
    /// An empty table, compact.
    pub fn new() -> LockTable {
        LockTable::with_limits(super::owners::SMALL, compact::DEFAULT_LOCKS)
    }

    /// A table whose owners become big past `small` locks (at least 2) instead of 64, so that
    /// tests with a few paths exercise big owners too.
    #[doc(hidden)]
    pub fn with_small_owners_up_to(small: usize) -> LockTable {
        LockTable::with_limits(small, compact::DEFAULT_LOCKS)
    }

    /// A table whose owners become big past `small` locks (at least 2, at most 255), whose
    /// compact form holds up to `compact` locks (at most 127), and that is always a tree when
    /// `compact` is 0: what the property tests run every history with.
    #[doc(hidden)]
    pub fn with_limits(small: usize, compact: usize) -> LockTable {
        let form = if compact == 0 {
            Form::Tree(Box::new(Tree::with_limits(small, 0)))
        } else {
            Form::Compact(Compact::new(compact, small))
        };
        LockTable { form }
    }

    /// Moves the table's allocations through `to` for the server's active defragmentation,
    /// from `cursor` (0 starts) until done or `to` says stop (see `defrag`): a compact table's
    /// one allocation, or the tree's, then its storage a bounded piece at a time.
    pub fn defrag<R: Relocate + ?Sized>(&mut self, to: &mut R, cursor: u64) -> Progress {
        match &mut self.form {
            Form::Compact(compact) => {
                defrag::compact(compact, to);
                Progress::Done
            }
            Form::Tree(tree) => {
                if cursor == 0 {
                    defrag::tree_top(tree, to);
                }
                defrag::tree(tree, to, cursor)
            }
        }
    }

    /// Whether the table is in the compact form, for tests and benchmarks.
    #[doc(hidden)]
    pub fn is_compact(&self) -> bool {
        matches!(self.form, Form::Compact(_))
    }

    /// Takes the form a change left: the tree a compact table grew into, or the compact form a
    /// tree shrank into (looked at only when [`Tree::may_compact`] says it may be).
    fn settle(&mut self, grown: Option<Box<Tree>>) {
        if let Some(tree) = grown {
            self.form = Form::Tree(tree);
        }
        if let Form::Tree(tree) = &self.form {
            if tree.may_compact() {
                if let Some(compact) = Compact::from_tree(tree) {
                    // The tree keeps the arenas of the most locks it ever held, which would take
                    // as long to free here as that many once took to grant: it goes to the
                    // embedder's lazy free (`lazyfree`).
                    if let Form::Tree(tree) =
                        std::mem::replace(&mut self.form, Form::Compact(compact))
                    {
                        let effort = tree.free_effort();
                        crate::lazyfree::give_up(tree, effort);
                    }
                }
            }
        }
    }

    /// The table a load built as a tree: kept so, or in the compact form when it fits in its
    /// limits (`Compact::from_loaded`), as it would have been before it was saved.
    pub(crate) fn from_tree(tree: Box<Tree>) -> LockTable {
        let form = match Compact::from_loaded(&tree) {
            Some(compact) => Form::Compact(compact),
            None => Form::Tree(tree),
        };
        LockTable { form }
    }

    /// The table as a tree, for the dense encoding's walk (`persist`): the tree itself, or the
    /// compact form's locks made into one, which its limit bounds (8 locks by default). The
    /// payload does not say which form wrote it, so either form loads from it.
    pub(crate) fn as_tree(&self) -> Cow<'_, Tree> {
        match &self.form {
            Form::Compact(compact) => Cow::Owned(compact.to_tree()),
            Form::Tree(tree) => Cow::Borrowed(tree),
        }
    }

    /// A copy that shares the tree's storage ([`Tree::share`]): a step per chunk, not per lock.
    /// A compact table is copied whole, which its size bounds.
    pub fn share(&mut self) -> LockTable {
        let form = match &mut self.form {
            Form::Compact(compact) => Form::Compact(compact.clone()),
            Form::Tree(tree) => Form::Tree(Box::new(tree.share())),
        };
        LockTable { form }
    }

    /// The number of locks stored, lapsed ones not yet reclaimed included, but not those of a
    /// released or reclaimed big owner still being freed (`free_some`).
    pub fn len(&self) -> usize {
        match &self.form {
            Form::Compact(compact) => compact.len(),
            Form::Tree(tree) => tree.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Locks of owners released or reclaimed whole that are still stored, being freed in the
    /// background (`free_some`); they count for nothing.
    pub fn freeing(&self) -> usize {
        match &self.form {
            Form::Compact(_) => 0,
            Form::Tree(tree) => tree.freeing(),
        }
    }

    /// The heap bytes the table uses beyond its own two words, for `MEMORY USAGE`: the compact
    /// form's string as the allocator rounds it, or the tree's estimate. It counts what the
    /// table stores (a node a split left lockless with one child included, as chains are not
    /// joined again), so a released lock takes its bytes back exactly once it is freed.
    pub fn memory_estimate(&self) -> usize {
        match &self.form {
            Form::Compact(compact) => compact.memory(),
            Form::Tree(tree) => tree.memory_estimate(),
        }
    }

    /// How much work freeing the table is, in allocations, for Redis's lazy-free decision.
    pub fn free_effort(&self) -> usize {
        match &self.form {
            Form::Compact(_) => 1,
            Form::Tree(tree) => tree.free_effort(),
        }
    }

    /// The fence the next successful acquire will take.
    pub fn next_fence(&self) -> u64 {
        match &self.form {
            Form::Compact(compact) => compact.next_fence(),
            Form::Tree(tree) => tree.next_fence(),
        }
    }

    /// Raises the fence counter to at least `next`; it never goes down, so a fence is never
    /// reused.
    pub fn raise_next_fence(&mut self, next: u64) {
        let grown = match &mut self.form {
            Form::Compact(compact) => compact.raise_next_fence(next),
            Form::Tree(tree) => {
                tree.raise_next_fence(next);
                None
            }
        };
        self.settle(grown);
    }

    /// Grants every `(mode, path)` to `token` for `ttl` milliseconds at `now`, all or nothing,
    /// unless a live lock of another owner blocks one of them. The token's lease becomes the
    /// later of what it was and `now + ttl`. The token's own lapsed locks are reclaimed first
    /// (a lapsed lease is not revived), and so are the lapsed owners met in the request's way,
    /// a bounded number of them.
    pub fn acquire(
        &mut self,
        now: u64,
        token: &Token,
        ttl: u64,
        items: &[(Mode, Path)],
    ) -> Acquired {
        let request = Request {
            token,
            generated: false,
            ttl,
            items,
            note: None,
        };
        self.acquire_with(now, &request, true)
    }

    /// [`LockTable::acquire`] of a whole [`Request`], leaving the lapsed owners in its way alone
    /// unless `reclaim` is set (a caller that cleared the way first, see
    /// [`LockTable::clear_way`]). The token's own lapsed lease is reclaimed in any case.
    pub fn acquire_with(&mut self, now: u64, request: &Request, reclaim: bool) -> Acquired {
        let (acquired, grown) = match &mut self.form {
            Form::Compact(compact) => compact.acquire_with(now, request, reclaim),
            Form::Tree(tree) => (tree.acquire_with(now, request, reclaim), None),
        };
        self.settle(grown);
        acquired
    }

    /// Reclaims what an acquire of `items` by `token` would meet in its way at `now`, without
    /// deciding it: the token's own lapsed lease and the lapsed owners on and beneath the paths
    /// (a bounded number), described for the waiters they held up.
    pub fn clear_way(&mut self, now: u64, token: &Token, items: &[(Mode, Path)]) -> Freed {
        let (freed, grown) = match &mut self.form {
            Form::Compact(compact) => compact.clear_way(now, token, items),
            Form::Tree(tree) => (tree.clear_way(now, token, items), None),
        };
        self.settle(grown);
        freed
    }

    /// Records a grant that was already decided: by a master whose effect a replica or an AOF
    /// replay applies, or by loading a payload. The token's lease becomes the later of what it
    /// was and `deadline`; re-granting a `(path, mode)` the token holds refreshes its fence.
    /// Returns how many new locks it added.
    pub fn grant(
        &mut self,
        token: &Token,
        deadline: u64,
        fence: u64,
        items: &[(Mode, Path)],
    ) -> usize {
        self.grant_noted(token, deadline, fence, items, None)
    }

    /// [`LockTable::grant`] with a note: `Some` keeps it with every lock the grant takes or
    /// refreshes, in place of the note they had (an empty note takes theirs away); `None` leaves
    /// the notes of refreshed locks as they were, and new locks without one.
    pub fn grant_noted(
        &mut self,
        token: &Token,
        deadline: u64,
        fence: u64,
        items: &[(Mode, Path)],
        note: Option<&Note>,
    ) -> usize {
        // The deadline enters the table here, whichever form holds it: its one pass through
        // `lease` (the forms take it as a lease, never 0).
        let deadline = super::lease(deadline);
        let (added, grown) = match &mut self.form {
            Form::Compact(compact) => compact.grant_noted(token, deadline, fence, items, note),
            Form::Tree(tree) => (tree.grant_noted(token, deadline, fence, items, note), None),
        };
        self.settle(grown);
        added
    }

    /// Frees `token`'s live locks at `paths` (every mode held there), or all of them when `paths`
    /// is `None`: all of a big owner's at once, by burying it. A token whose lease lapsed by
    /// `now` frees nothing and is reclaimed as lapsed. The freed locks are described for the
    /// waiters they held up when `describe` is set.
    pub fn release(
        &mut self,
        now: u64,
        token: &Token,
        paths: Option<&[Path]>,
        describe: bool,
    ) -> Released {
        let (released, grown) = match &mut self.form {
            Form::Compact(compact) => compact.release(now, token, paths, describe),
            Form::Tree(tree) => (tree.release(now, token, paths, describe), None),
        };
        self.settle(grown);
        released
    }

    /// [`LockTable::release`] as a master decided it, for a replica or an AOF replay: no time
    /// involved. Returns how many locks it freed.
    pub fn release_decided(&mut self, token: &Token, paths: Option<&[Path]>) -> usize {
        let (count, grown) = match &mut self.form {
            Form::Compact(compact) => compact.release_decided(token, paths),
            Form::Tree(tree) => (tree.release_decided(token, paths), None),
        };
        self.settle(grown);
        count
    }

    /// Sets the lease of `token`'s locks to `deadline`, unless it lapsed by `now`: then it is
    /// reclaimed (a lapsed lease is not revived) and nothing is renewed. Returns how many locks
    /// it renewed, in one step whatever the owner holds, and what lapsed.
    pub fn renew(&mut self, now: u64, token: &Token, deadline: u64) -> (usize, Freed) {
        // The deadline's one pass through `lease`, as in `grant_noted`.
        let deadline = super::lease(deadline);
        let (renewed, grown) = match &mut self.form {
            Form::Compact(compact) => compact.renew(Some(now), token, deadline),
            Form::Tree(tree) => (tree.renew(now, token, deadline), None),
        };
        self.settle(grown);
        renewed
    }

    /// [`LockTable::renew`] as a master decided it, for a replica or an AOF replay.
    pub fn renew_decided(&mut self, token: &Token, deadline: u64) -> usize {
        // The deadline's one pass through `lease`, as in `grant_noted`.
        let deadline = super::lease(deadline);
        let (renewed, grown) = match &mut self.form {
            Form::Compact(compact) => {
                let ((renewed, _), grown) = compact.renew(None, token, deadline);
                (renewed, grown)
            }
            Form::Tree(tree) => (tree.renew_decided(token, deadline), None),
        };
        self.settle(grown);
        renewed
    }

    /// The number of nodes the locks keep, the root included: the tree's (where a chain of
    /// segments is one node), or for the compact form one per segment of a locked path and its
    /// ancestors. Zero once every lock is gone, which is how tests show that a released lock
    /// leaves nothing behind.
    pub fn node_count(&self) -> usize {
        match &self.form {
            Form::Compact(compact) => compact.node_count(),
            Form::Tree(tree) => tree.node_count(),
        }
    }

    /// Whether a live lock of another owner blocks `token` from taking `mode` on `path` at
    /// `now`, changing nothing: the decision an acquire makes.
    pub fn is_blocked(&self, now: u64, token: &Token, mode: Mode, path: &Path) -> bool {
        match &self.form {
            Form::Compact(compact) => compact.is_blocked(now, token, mode, path),
            Form::Tree(tree) => tree.is_blocked(now, token, mode, path),
        }
    }

    /// The live locks that block the request `items` of `token` (of nobody when `None`), each
    /// once, in tree order.
    pub fn blockers(
        &self,
        now: u64,
        token: Option<&Token>,
        items: &[(Mode, Path)],
    ) -> Vec<LockInfo> {
        match &self.form {
            Form::Compact(compact) => compact.blockers(now, token, items),
            Form::Tree(tree) => tree.blockers(now, token, items),
        }
    }

    /// The live locks on `under` and beneath it, in tree order.
    pub fn locks(&self, now: u64, under: &Path) -> Vec<LockInfo> {
        match &self.form {
            Form::Compact(compact) => compact.locks(now, under, None),
            Form::Tree(tree) => tree.locks(now, under),
        }
    }

    /// The live locks of `token` on `under` and beneath it, in tree order: `LOCKS ... TOKEN`.
    pub fn locks_of_token(&self, now: u64, under: &Path, token: &Token) -> Vec<LockInfo> {
        match &self.form {
            Form::Compact(compact) => compact.locks(now, under, Some(token)),
            Form::Tree(tree) => tree.locks_of_token(now, under, token),
        }
    }

    /// The locks a payload or a digest carries, in tree order: every stored lock, lapsed or
    /// not, but those of owners being freed and those a later grant passed over (see `cuts`).
    /// It reads no clock, so servers that store the same locks list the same ones.
    pub fn iter(&self) -> impl Iterator<Item = LockInfo> + '_ {
        let all = match &self.form {
            Form::Compact(compact) => compact.all(),
            Form::Tree(tree) => tree.iter().collect(),
        };
        all.into_iter()
    }

    /// Every stored lock of an owner not being freed, lapsed, cut or not, in tree order: what
    /// the table holds, for tests that store conflicting locks on purpose (a replica's grants are
    /// not decided), where [`LockTable::iter`] would leave cut ones out.
    #[doc(hidden)]
    pub fn stored(&self) -> Vec<LockInfo> {
        match &self.form {
            Form::Compact(compact) => compact.all(),
            Form::Tree(tree) => tree.stored(),
        }
    }

    /// Calls `visit` with each lock [`LockTable::iter`] lists, without building a list: what
    /// persistence, AOF rewrites and digests walk.
    pub fn for_each_persisted(&self, visit: &mut dyn FnMut(LockInfo)) {
        match &self.form {
            Form::Compact(compact) => compact.all().into_iter().for_each(visit),
            Form::Tree(tree) => tree.for_each_persisted(visit),
        }
    }

    /// The earliest lease of any owner, lapsed or not.
    pub fn next_deadline(&self) -> Option<u64> {
        match &self.form {
            Form::Compact(compact) => compact.next_deadline(),
            Form::Tree(tree) => tree.next_deadline(),
        }
    }

    /// Reclaims every owner whose lease lapsed by `now`, however many. Owners that share a
    /// deadline come in an order that depends on history and may differ between servers, so
    /// callers use the set, not the order.
    pub fn reclaim_expired(&mut self, now: u64, describe: bool) -> Freed {
        let (freed, grown) = match &mut self.form {
            Form::Compact(compact) => compact.reclaim(now, usize::MAX, None, describe),
            Form::Tree(tree) => (tree.reclaim_expired(now, describe), None),
        };
        self.settle(grown);
        freed
    }

    /// Reclaims at most `max_owners` owners whose lease lapsed by `now`, earliest first, so that
    /// a mass expiry can be spread over many calls. The tokens it returns name the work exactly
    /// for a replica ([`LockTable::reclaim_expired_of`]).
    pub fn reclaim_some_expired(&mut self, now: u64, max_owners: usize, describe: bool) -> Freed {
        let (freed, grown) = match &mut self.form {
            Form::Compact(compact) => compact.reclaim(now, max_owners, None, describe),
            Form::Tree(tree) => (tree.reclaim_some_expired(now, max_owners, describe), None),
        };
        self.settle(grown);
        freed
    }

    /// Reclaims `token`'s owner if its lease lapsed by `now`: one owner's share of a master's
    /// `reclaim_some_expired`, as its replicas apply it.
    pub fn reclaim_expired_of(&mut self, now: u64, token: &Token, describe: bool) -> Freed {
        let (freed, grown) = match &mut self.form {
            Form::Compact(compact) => compact.reclaim(now, 1, Some(token), describe),
            Form::Tree(tree) => (tree.reclaim_expired_of(now, token, describe), None),
        };
        self.settle(grown);
        freed
    }

    /// Frees up to `budget` locks of buried owners and gives back the arenas' free tails, the
    /// table's background work. Returns how much was done; zero when nothing is left to do.
    pub fn free_some(&mut self, budget: usize) -> usize {
        let done = match &mut self.form {
            Form::Compact(_) => 0,
            Form::Tree(tree) => tree.free_some(budget),
        };
        self.settle(None);
        done
    }

    /// Whether `free_some` has anything to do.
    pub fn has_background_work(&self) -> bool {
        match &self.form {
            Form::Compact(_) => false,
            Form::Tree(tree) => tree.has_background_work(),
        }
    }

    /// Recomputes every derived structure from the locks themselves and reports the first
    /// disagreement (see `integrity` for the tree, `compact` for the compact form).
    pub fn check_integrity(&self) -> Result<(), String> {
        match &self.form {
            Form::Compact(compact) => compact.check_integrity(),
            Form::Tree(tree) => tree.check_integrity(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PathLimits;

    /// A deadline of 0 (only a forged effect or payload carries one) enters either form as a
    /// lease of 1, through a grant, a renewal decided elsewhere and one decided here, and through
    /// a compact table turning into a tree: never the 0 that marks an unfiled owner, which
    /// `Tree::file` checks in this debug build.
    #[test]
    fn a_deadline_of_0_enters_either_form_as_a_lease_of_1() {
        let path =
            |text: &str| Path::parse(text.as_bytes(), &PathLimits::default()).expect("a path");
        let token = Token::new(b"forged").expect("a token");
        let other = Token::new(b"other").expect("a token");
        for compact in [compact::DEFAULT_LOCKS, 0] {
            let mut table = LockTable::with_limits(4, compact);
            assert_eq!(table.is_compact(), compact != 0);
            assert_eq!(
                table.grant_noted(&token, 0, 1, &[(Mode::Write, path("/a"))], None),
                1
            );
            assert_eq!(table.next_deadline(), Some(1));
            assert_eq!(table.renew_decided(&token, 0), 1);
            // Live at time 0 (a lease of 1 lapses at 1), so renewing keeps it, at 1 again.
            assert_eq!(table.renew(0, &token, 0).0, 1);
            let deadlines: Vec<u64> = table.stored().iter().map(|lock| lock.deadline).collect();
            assert_eq!(deadlines, [1]);
            table.check_integrity().expect("integrity");
            // A conflicting grant decided elsewhere turns a compact table into a tree, which takes
            // the owner's lease as it stands.
            table.grant_noted(&other, 0, 2, &[(Mode::Write, path("/a/b"))], None);
            assert!(!table.is_compact());
            assert!(table.stored().iter().all(|lock| lock.deadline == 1));
            table.check_integrity().expect("integrity");
            let lapsed = table.reclaim_expired(1, false);
            assert_eq!((lapsed.tokens.len(), lapsed.locks), (2, 2));
            assert!(table.stored().is_empty());
        }
    }
}
