//! Model-based property tests of the wait queue: the engine wakes only waiters related to what
//! was freed; the reference re-scans every waiter in arrival order after every change. Equal
//! answers show that the engine's narrow wake-ups miss nobody, and that it serves waiters first
//! come, first served.

use std::collections::BTreeSet;

mod reference;

use pathlock_core::{Grant, LockInfo, Mode, Path, PathLimits, Project, Token, Waiter};
use proptest::prelude::*;
use reference::{items_conflict, Reference};

const PATHS: &[&str] = &["/", "/a", "/a/b", "/a/bc", "/ab", "/a/b/c", "/b", "/b/c"];
const TOKENS: &[&str] = &["t0", "t1", "t2", "t3", "t4"];

fn path(i: usize) -> Path {
    Path::parse(PATHS[i].as_bytes(), &PathLimits::default()).expect("valid path")
}

fn token(i: usize) -> Token {
    Token::new(TOKENS[i].as_bytes()).expect("valid token")
}

/// The shared reference's locks, plus a queue that is re-scanned in arrival order after every
/// change.
#[derive(Default)]
struct Model {
    held: Reference,
    waiters: Vec<(u64, Waiter)>,
}

impl Model {
    fn blocked_by_locks(&self, token: &Token, items: &[(Mode, Path)]) -> bool {
        self.held.blocked(token, items)
    }

    fn blocked_by_waiters(&self, token: &Token, items: &[(Mode, Path)], before: u64) -> bool {
        self.waiters
            .iter()
            .any(|(id, w)| *id < before && w.token != *token && items_conflict(&w.items, items))
    }

    fn grant(&mut self, now: u64, token: &Token, ttl: u64, items: &[(Mode, Path)]) -> u64 {
        self.held.grant(now, token, ttl, items)
    }

    fn acquire(
        &mut self,
        now: u64,
        token: &Token,
        ttl: u64,
        items: &[(Mode, Path)],
    ) -> Option<u64> {
        if self.blocked_by_locks(token, items) || self.blocked_by_waiters(token, items, u64::MAX) {
            return None;
        }
        Some(self.grant(now, token, ttl, items))
    }

    /// Every waiter that can go, in arrival order, until none can.
    fn settle(&mut self, now: u64) -> Vec<(u64, u64)> {
        let mut granted = Vec::new();
        loop {
            let next = self.waiters.iter().position(|(id, w)| {
                !self.blocked_by_locks(&w.token, &w.items)
                    && !self.blocked_by_waiters(&w.token, &w.items, *id)
            });
            let Some(i) = next else {
                return granted;
            };
            let (id, w) = self.waiters.remove(i);
            let fence = self.grant(now, &w.token, w.ttl, &w.items);
            granted.push((id, fence));
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        token: usize,
        ttl: u64,
        items: Vec<(Mode, usize)>,
        wait: bool,
    },
    Release {
        token: usize,
        paths: Option<Vec<usize>>,
    },
    Cancel(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let mode = prop_oneof![Just(Mode::Read), Just(Mode::Write)];
    let items = prop::collection::vec((mode, 0..PATHS.len()), 1..3);
    prop_oneof![
        6 => (0..TOKENS.len(), 1..80u64, items, prop::bool::weighted(0.7))
            .prop_map(|(token, ttl, items, wait)| Op::Acquire { token, ttl, items, wait }),
        3 => (0..TOKENS.len(), prop::option::of(prop::collection::vec(0..PATHS.len(), 1..3)))
            .prop_map(|(token, paths)| Op::Release { token, paths }),
        1 => (0..8usize).prop_map(Op::Cancel),
        2 => (0..40u64).prop_map(Op::Advance),
    ]
}

fn granted(grants: &[Grant]) -> Vec<(u64, u64)> {
    grants.iter().map(|g| (g.waiter, g.fence)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn waiters_are_served_like_the_reference(ops in prop::collection::vec(op(), 1..50)) {
        let mut project = Project::new();
        let mut model = Model::default();
        let mut now = 1_000;
        let mut next_id = 1;
        for op in &ops {
            let (_, grants) = project.reclaim_expired(now);
            model.held.locks.retain(|l| l.deadline > now);
            prop_assert_eq!(granted(&grants), model.settle(now), "after expiry");
            match op {
                Op::Acquire { token: t, ttl, items, wait } => {
                    let items: Vec<(Mode, Path)> = items.iter().map(|&(m, i)| (m, path(i))).collect();
                    let got = project.acquire(now, &token(*t), *ttl, &items);
                    prop_assert_eq!(got, model.acquire(now, &token(*t), *ttl, &items));
                    if got.is_none() && *wait {
                        let waiter = Waiter { token: token(*t), ttl: *ttl, items };
                        project.enqueue(next_id, waiter.clone());
                        model.waiters.push((next_id, waiter));
                        next_id += 1;
                    }
                }
                Op::Release { token: t, paths } => {
                    let paths: Option<Vec<Path>> = paths.as_ref().map(|ps| ps.iter().map(|&i| path(i)).collect());
                    let (freed, grants) = project.release(now, &token(*t), paths.as_deref());
                    let before = model.held.locks.len();
                    model.held.locks.retain(|l| {
                        l.token != token(*t) || paths.as_ref().is_some_and(|ps| !ps.contains(&l.path))
                    });
                    prop_assert_eq!(freed.len(), before - model.held.locks.len());
                    prop_assert_eq!(granted(&grants), model.settle(now), "after release");
                }
                Op::Cancel(i) => {
                    if let Some((id, _)) = model.waiters.get(*i).cloned() {
                        let (gone, grants) = project.cancel(now, id);
                        prop_assert!(gone.is_some());
                        model.waiters.remove(*i);
                        prop_assert_eq!(granted(&grants), model.settle(now), "after cancel");
                    }
                }
                Op::Advance(ms) => now += ms,
            }
            prop_assert_eq!(project.waiting(), model.waiters.len());
            let held: BTreeSet<LockInfo> = project.locks().iter().collect();
            prop_assert_eq!(held, model.held.locks.iter().cloned().collect::<BTreeSet<_>>());
            project.locks().check_integrity().map_err(TestCaseError::fail)?;
        }
        // Taking the waiters out leaves them in arrival order and the queue empty.
        let taken: Vec<u64> = project.take_waiters().into_iter().map(|(id, _)| id).collect();
        prop_assert_eq!(taken, model.waiters.iter().map(|(id, _)| *id).collect::<Vec<_>>());
        prop_assert_eq!(project.waiting(), 0);
    }
}

#[test]
fn a_writer_is_not_starved_by_readers_that_arrive_after_it() {
    let mut project = Project::new();
    let a = |s: &str| Path::parse(s.as_bytes(), &PathLimits::default()).expect("path");
    let t = |s: &str| Token::new(s.as_bytes()).expect("token");
    assert!(project
        .acquire(0, &t("r1"), 100, &[(Mode::Read, a("/A"))])
        .is_some());
    assert!(project
        .acquire(0, &t("w"), 100, &[(Mode::Write, a("/A"))])
        .is_none());
    project.enqueue(
        1,
        Waiter {
            token: t("w"),
            ttl: 100,
            items: vec![(Mode::Write, a("/A"))],
        },
    );
    // A reader arriving after the writer would share with r1, but must not overtake the writer.
    assert!(project
        .acquire(0, &t("r2"), 100, &[(Mode::Read, a("/A/x"))])
        .is_none());
    // A request unrelated to the writer is not held up.
    assert!(project
        .acquire(0, &t("r3"), 100, &[(Mode::Write, a("/B"))])
        .is_some());
    let (_, grants) = project.release(0, &t("r1"), None);
    assert_eq!(grants.len(), 1);
    assert_eq!((grants[0].waiter, grants[0].fence), (1, 3));
}
