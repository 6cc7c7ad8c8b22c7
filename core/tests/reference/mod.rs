//! The naive reference the engine's property tests compare against: every lock in one list,
//! every question answered by scanning it, and the ancestor relation computed on segments
//! rather than on the engine's keys or tree.

#![allow(dead_code)]

use std::collections::BTreeSet;

use pathlock_core::{LockInfo, Mode, Note, Path, Token};

pub fn segments(path: &Path) -> Vec<Vec<u8>> {
    path.segments().collect()
}

pub fn related(a: &Path, b: &Path) -> bool {
    let (a, b) = (segments(a), segments(b));
    a.starts_with(&b) || b.starts_with(&a)
}

/// Whether `held` blocks `mode` on `path` for `token` (for nobody in particular when `None`).
pub fn conflicts(held: &LockInfo, token: Option<&Token>, mode: Mode, path: &Path) -> bool {
    Some(&held.token) != token
        && (held.mode == Mode::Write || mode == Mode::Write)
        && related(&held.path, path)
}

/// Whether two requests would conflict if they had different owners.
pub fn items_conflict(a: &[(Mode, Path)], b: &[(Mode, Path)]) -> bool {
    a.iter().any(|(ma, pa)| {
        b.iter()
            .any(|(mb, pb)| (*ma == Mode::Write || *mb == Mode::Write) && related(pa, pb))
    })
}

#[derive(Clone, Debug)]
pub struct Reference {
    pub locks: Vec<LockInfo>,
    pub next_fence: u64,
}

impl Default for Reference {
    fn default() -> Self {
        Reference::new()
    }
}

impl Reference {
    pub fn new() -> Reference {
        Reference {
            locks: Vec::new(),
            next_fence: 1,
        }
    }

    pub fn reclaim(&mut self, now: u64) -> BTreeSet<LockInfo> {
        let (expired, live) = self.locks.drain(..).partition(|l| l.deadline <= now);
        self.locks = live;
        expired.into_iter().collect()
    }

    pub fn blocked(&self, token: &Token, items: &[(Mode, Path)]) -> bool {
        items.iter().any(|(mode, path)| {
            self.locks
                .iter()
                .any(|held| conflicts(held, Some(token), *mode, path))
        })
    }

    /// Records a grant with the next fence, refreshing what the token already holds.
    pub fn grant(&mut self, now: u64, token: &Token, ttl: u64, items: &[(Mode, Path)]) -> u64 {
        self.grant_noted(now, token, ttl, items, None)
    }

    /// A grant with a note: `Some` replaces the note of every lock granted (an empty one
    /// leaves none), `None` keeps the note of a lock the token already held.
    pub fn grant_noted(
        &mut self,
        now: u64,
        token: &Token,
        ttl: u64,
        items: &[(Mode, Path)],
        note: Option<&Note>,
    ) -> u64 {
        let fence = self.next_fence;
        self.next_fence += 1;
        self.record(token, now + ttl, fence, items, note);
        fence
    }

    /// Records a grant decided elsewhere, at its deadline and fence. A token's locks are one
    /// lease: the grant moves every one of them to the later of their deadline and `deadline`.
    pub fn record(
        &mut self,
        token: &Token,
        deadline: u64,
        fence: u64,
        items: &[(Mode, Path)],
        note: Option<&Note>,
    ) {
        self.next_fence = self.next_fence.max(fence + 1);
        let deadline = self
            .locks
            .iter()
            .filter(|l| l.token == *token)
            .map(|l| l.deadline)
            .fold(deadline, u64::max);
        for lock in self.locks.iter_mut().filter(|l| l.token == *token) {
            lock.deadline = deadline;
        }
        for (mode, path) in items {
            let same = |l: &LockInfo| l.token == *token && l.mode == *mode && l.path == *path;
            let old = self
                .locks
                .iter()
                .find(|l| same(l))
                .and_then(|l| l.note.clone());
            self.locks.retain(|l| !same(l));
            let note = match note {
                Some(note) => Some(note.clone()).filter(|n| !n.is_empty()),
                None => old,
            };
            self.locks.push(LockInfo {
                path: path.clone(),
                mode: *mode,
                token: token.clone(),
                deadline,
                fence,
                note,
            });
        }
    }

    /// The live locks of `token` at or beneath `under`, in tree order.
    pub fn locks_of(&self, now: u64, under: &Path, token: &Token) -> Vec<LockInfo> {
        let under = segments(under);
        self.live(now)
            .into_iter()
            .filter(|l| l.token == *token && segments(&l.path).starts_with(&under))
            .collect()
    }

    pub fn acquire(
        &mut self,
        now: u64,
        token: &Token,
        ttl: u64,
        items: &[(Mode, Path)],
    ) -> Option<u64> {
        self.acquire_noted(now, token, ttl, items, None)
    }

    pub fn acquire_noted(
        &mut self,
        now: u64,
        token: &Token,
        ttl: u64,
        items: &[(Mode, Path)],
        note: Option<&Note>,
    ) -> Option<u64> {
        if self.blocked(token, items) {
            return None;
        }
        Some(self.grant_noted(now, token, ttl, items, note))
    }

    pub fn release(&mut self, token: &Token, paths: Option<&[Path]>) -> usize {
        let before = self.locks.len();
        self.locks
            .retain(|l| l.token != *token || paths.is_some_and(|paths| !paths.contains(&l.path)));
        before - self.locks.len()
    }

    pub fn renew(&mut self, token: &Token, deadline: u64) -> usize {
        let mut renewed = 0;
        for lock in self.locks.iter_mut().filter(|l| l.token == *token) {
            lock.deadline = deadline;
            renewed += 1;
        }
        renewed
    }

    pub fn live(&self, now: u64) -> BTreeSet<LockInfo> {
        self.locks
            .iter()
            .filter(|l| l.deadline > now)
            .cloned()
            .collect()
    }

    pub fn blockers(
        &self,
        now: u64,
        token: Option<&Token>,
        items: &[(Mode, Path)],
    ) -> BTreeSet<LockInfo> {
        self.live(now)
            .into_iter()
            .filter(|held| items.iter().any(|(m, p)| conflicts(held, token, *m, p)))
            .collect()
    }
}

/// The cases each property runs: `PROPTEST_CASES` when it is set, for a longer campaign, and
/// `default` otherwise. proptest reads that variable only into a config whose `cases` is left
/// at proptest's own default, so a config that names its count must read it itself.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}
