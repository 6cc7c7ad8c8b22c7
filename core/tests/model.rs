//! Model-based property tests: random sequences of acquire (with and without a note), release,
//! renew, check, an owner's listing and clock advances run against the engine and against a
//! naive reference that keeps a flat list of locks and scans all of them, comparing every
//! answer, the locks' notes included.
//!
//! The paths come from a small alphabet chosen to collide: ancestors, siblings that share a
//! byte prefix (`/a/b` and `/a/bc`, `/a` and `/ab`), the root, and bytes that sort around the
//! separator.

use std::collections::BTreeSet;

mod reference;

use pathlock_core::persist::{decode, encode, ByteSink, ByteSource};
use pathlock_core::{
    Lapsed, LockInfo, LockTable, Mode, Note, Path, PathLimits, Project, Request, Token,
};
use proptest::prelude::*;
use reference::{cases, conflicts, segments, Reference};

const PATHS: &[&str] = &[
    "/", "/a", "/a/b", "/a/bc", "/ab", "/a/b/c", "/a/bc/d", "/b", "/a-", "/a/b c", "/a/b/c/d",
];
/// Short tokens, canonical UUIDs (which the engine stores as 16 bytes) and a UUID in capitals
/// (which it must not), so that mixed orderings and comparisons are exercised.
const TOKENS: &[&str] = &[
    "t0",
    "t1",
    "123e4567-e89b-42d3-a456-426614174000",
    "00000000-0000-4000-8000-000000000000",
    "123E4567-E89B-42D3-A456-426614174000",
    "z",
    // One byte longer than a table keeps inline: kept aside, as the uppercase UUID is.
    "owner-of-twenty-byte",
];

/// Notes as clients send them: text, bytes that are not UTF-8 or are control characters, and
/// the empty note, which takes a lock's note away.
const NOTES: &[&[u8]] = &[
    b"alice: move /a to /b",
    b"",
    b"\x00\x01\r\n",
    "\u{100} bob".as_bytes(),
    b"x",
];

fn note(i: Option<usize>) -> Option<Note> {
    i.map(|i| Note::from(NOTES[i]))
}

fn path(i: usize) -> Path {
    Path::parse(PATHS[i].as_bytes(), &PathLimits::default()).expect("valid path")
}

fn token(i: usize) -> Token {
    Token::new(TOKENS[i].as_bytes()).expect("valid token")
}

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        token: usize,
        ttl: u64,
        items: Vec<(Mode, usize)>,
        note: Option<usize>,
    },
    Release {
        token: usize,
        paths: Option<Vec<usize>>,
    },
    Renew {
        token: usize,
        ttl: u64,
    },
    Check {
        token: Option<usize>,
        items: Vec<(Mode, usize)>,
    },
    /// `LOCKS key under TOKEN token`.
    LocksOf {
        token: usize,
        under: usize,
    },
    Advance(u64),
    /// Background work: freeing buried owners' locks and the arenas' tails, which changes no
    /// answer.
    Background(usize),
}

/// The limits a table runs a history with: the most locks a small owner holds (2 and 3 make
/// most owners here big, and small again; 64, the default, keeps them small) and the most the
/// compact form holds (0 keeps the table a tree; 1 to 4 make it turn into a tree and back within
/// a history; 8 is the default).
fn limits() -> impl Strategy<Value = (usize, usize)> {
    (
        prop_oneof![Just(2usize), Just(3), Just(64)],
        prop_oneof![Just(0usize), Just(1), Just(2), Just(4), Just(8)],
    )
}

fn table((small, compact): (usize, usize)) -> LockTable {
    LockTable::with_limits(small, compact)
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Read), Just(Mode::Write)]
}

fn items() -> impl Strategy<Value = Vec<(Mode, usize)>> {
    prop::collection::vec((mode(), 0..PATHS.len()), 1..4)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..TOKENS.len(), 1..60u64, items(), prop::option::of(0..NOTES.len()))
            .prop_map(|(token, ttl, items, note)| Op::Acquire { token, ttl, items, note }),
        2 => (0..TOKENS.len(), prop::option::of(prop::collection::vec(0..PATHS.len(), 0..3)))
            .prop_map(|(token, paths)| Op::Release { token, paths }),
        1 => (0..TOKENS.len(), 1..60u64).prop_map(|(token, ttl)| Op::Renew { token, ttl }),
        1 => (prop::option::of(0..TOKENS.len()), items())
            .prop_map(|(token, items)| Op::Check { token, items }),
        1 => (0..TOKENS.len(), 0..PATHS.len())
            .prop_map(|(token, under)| Op::LocksOf { token, under }),
        2 => (0..30u64).prop_map(Op::Advance),
        1 => (1..6usize).prop_map(Op::Background),
    ]
}

fn resolve(items: &[(Mode, usize)]) -> Vec<(Mode, Path)> {
    items.iter().map(|&(m, i)| (m, path(i))).collect()
}

/// No two live locks of different owners conflict.
fn assert_no_conflicting_grants(live: &[LockInfo]) {
    for a in live {
        for b in live {
            assert!(
                !conflicts(a, Some(&b.token), b.mode, &b.path),
                "{a:?} and {b:?} are held at once"
            );
        }
    }
}

/// One side of a comparison: a table, the reference it must agree with, and their clock.
#[derive(Clone)]
struct Twin {
    table: LockTable,
    limits: (usize, usize),
    model: Reference,
    now: u64,
    last_fence: u64,
}

impl Twin {
    fn new(limits: (usize, usize)) -> Twin {
        Twin {
            table: table(limits),
            limits,
            model: Reference::new(),
            now: 1_000,
            last_fence: 0,
        }
    }

    /// Applies `op` to both the table and the reference and compares every answer, then the
    /// table's integrity and its live locks.
    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let Twin {
            table,
            model,
            now,
            last_fence,
            ..
        } = self;
        // The Redis layer reclaims before every change; do the same to both sides.
        let reclaimed = table.reclaim_expired(*now, true);
        let expected = model.reclaim(*now);
        let tokens: BTreeSet<Token> = expected.iter().map(|l| l.token.clone()).collect();
        prop_assert_eq!(
            reclaimed.tokens.iter().cloned().collect::<BTreeSet<_>>(),
            tokens
        );
        prop_assert_eq!(reclaimed.locks, expected.len());
        match op {
            Op::Acquire {
                token: t,
                ttl,
                items,
                note: n,
            } => {
                let items = resolve(items);
                let before: Vec<LockInfo> = table.iter().collect();
                let note = note(*n);
                let tok = token(*t);
                let request = Request {
                    token: &tok,
                    generated: false,
                    ttl: *ttl,
                    items: &items,
                    note: note.as_ref(),
                };
                let acquired = table.acquire_with(*now, &request, true);
                prop_assert!(
                    acquired.lapsed.is_empty(),
                    "everything lapsed was reclaimed"
                );
                let got = acquired.fence;
                prop_assert_eq!(
                    got,
                    model.acquire_noted(*now, &token(*t), *ttl, &items, note.as_ref())
                );
                match got {
                    Some(fence) => {
                        prop_assert!(fence > *last_fence, "fence {} after {}", fence, last_fence);
                        *last_fence = fence;
                    }
                    None => {
                        let after: Vec<LockInfo> = table.iter().collect();
                        prop_assert_eq!(before, after, "a refused request changed the table");
                    }
                }
            }
            Op::Release { token: t, paths } => {
                let paths: Option<Vec<Path>> = paths
                    .as_ref()
                    .map(|ps| ps.iter().map(|&i| path(i)).collect());
                let mut unique = paths.clone();
                if let Some(ps) = unique.as_mut() {
                    ps.sort();
                    ps.dedup();
                }
                let got = table.release(*now, &token(*t), paths.as_deref(), true);
                prop_assert_eq!(got.count, model.release(&token(*t), unique.as_deref()));
                prop_assert_eq!(got.count, got.freed.locks);
            }
            Op::Renew { token: t, ttl } => {
                let (got, _) = table.renew(*now, &token(*t), *now + ttl);
                prop_assert_eq!(got, model.renew(&token(*t), *now + ttl));
            }
            Op::Check { token: t, items } => {
                let items = resolve(items);
                let who = t.map(token);
                let got: BTreeSet<LockInfo> = table
                    .blockers(*now, who.as_ref(), &items)
                    .into_iter()
                    .collect();
                prop_assert_eq!(got, model.blockers(*now, who.as_ref(), &items));
                // Blockers exist exactly when an acquire by that token would be refused.
                if let Some(who) = who {
                    let blocked = items
                        .iter()
                        .any(|(m, p)| table.is_blocked(*now, &who, *m, p));
                    prop_assert_eq!(
                        blocked,
                        !model.blockers(*now, Some(&who), &items).is_empty()
                    );
                }
            }
            Op::LocksOf { token: t, under } => {
                prop_assert_eq!(
                    table.locks_of_token(*now, &path(*under), &token(*t)),
                    model.locks_of(*now, &path(*under), &token(*t))
                );
            }
            Op::Advance(ms) => *now += ms,
            Op::Background(steps) => {
                table.free_some(*steps);
            }
        }
        table.check_integrity().map_err(TestCaseError::fail)?;
        let live: Vec<LockInfo> = table.locks(*now, &Path::root());
        prop_assert_eq!(
            live.iter().cloned().collect::<BTreeSet<_>>(),
            model.live(*now)
        );
        prop_assert!(
            live.windows(2).all(|w| w[0].path <= w[1].path),
            "listing out of tree order"
        );
        assert_no_conflicting_grants(&live);
        Ok(())
    }

    /// A copy that shares the table's storage, as `COPY` makes, with a copy of the reference.
    fn share(&mut self) -> Twin {
        Twin {
            table: self.table.share(),
            ..self.clone()
        }
    }

    /// Releases everything and checks that nothing is left behind.
    fn empty(mut self) -> Result<(), TestCaseError> {
        for t in 0..TOKENS.len() {
            self.table.release_decided(&token(t), None);
        }
        while self.table.free_some(1000) > 0 {}
        prop_assert_eq!(self.table.node_count(), 0);
        prop_assert!(self.table.is_empty());
        // An emptied table is compact again, unless it is kept a tree, and then costs what a new
        // one does; a tree keeps the capacity its first chunks and free-slot maps grew to, a
        // few hundred bytes in these histories, and nothing more.
        let fresh = table(self.limits).memory_estimate();
        prop_assert_eq!(self.table.is_compact(), self.limits.1 > 0);
        if self.table.is_compact() {
            prop_assert_eq!(self.table.memory_estimate(), fresh);
        } else {
            prop_assert!(self.table.memory_estimate() <= fresh + 2048);
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(2000), ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_reference(ops in prop::collection::vec(op(), 1..60), limits in limits()) {
        let mut twin = Twin::new(limits);
        for op in &ops {
            twin.step(op)?;
        }
        twin.empty()?;
    }

    /// A table cloned in the middle of a history (as `COPY` does) and both copies driven on
    /// independently, each against its own copy of the reference: the copies share their
    /// storage until they write, and neither may see the other's writes. The two histories
    /// are interleaved step by step, so that each copy writes to pieces the other still holds.
    #[test]
    fn copies_match_two_references_independently(
        before in prop::collection::vec(op(), 0..40),
        left in prop::collection::vec(op(), 1..40),
        right in prop::collection::vec(op(), 1..40),
        limits in limits(),
    ) {
        let mut original = Twin::new(limits);
        for op in &before {
            original.step(op)?;
        }
        let mut copy = original.share();
        prop_assert!(copy.table.iter().eq(original.table.iter()));
        for i in 0..left.len().max(right.len()) {
            if let Some(op) = left.get(i) {
                original.step(op)?;
            }
            if let Some(op) = right.get(i) {
                copy.step(op)?;
            }
        }
        original.empty()?;
        copy.empty()?;
    }

    #[test]
    fn lazy_expiry_leaves_lapsed_leases_free_and_replicas_follow(
        ops in prop::collection::vec(op(), 1..80),
        others in prop::collection::vec(0..3usize, 80),
        limits in limits(),
        replica_limits in limits(),
    ) {
        // Expired locks linger here: only what a command needs is reclaimed (its own token, the
        // lapsed leases in its way, and 0 to 2 more owners), never everything that is due. The
        // reference forgets expired locks at once, so every answer must match one that holds
        // only live locks. A replica applies the effects the Redis layer would replicate and
        // must end with the same stored locks, expired ones included.
        // The replica keeps its big owners, and its compact form, by its own limits: how an
        // owner or a table is kept is the server's own business, and both reach the same locks.
        let mut project = Project::from_locks(table(limits));
        let mut replica = table(replica_limits);
        let mut model = Reference::new();
        let mut now = 1_000u64;
        let mut last_fence = 0;
        let apply = |replica: &mut LockTable, lapsed: &Lapsed| {
            for (at, token) in &lapsed.owners {
                replica.reclaim_expired_of(*at, token, false);
            }
        };
        for (op, others) in ops.iter().zip(&others) {
            model.reclaim(now);
            let stored = project.locks().len();
            project.reclaim_lazily(now, None, *others);
            let lapsed = project.take_lapsed();
            prop_assert!(lapsed.owners.len() <= *others);
            prop_assert_eq!(project.locks().len() + lapsed.locks, stored);
            apply(&mut replica, &lapsed);
            match op {
                Op::Acquire { token: t, ttl, items, note: n } => {
                    let items = resolve(items);
                    let note = note(*n);
                    let tok = token(*t);
                    let request = Request {
                        token: &tok,
                        generated: false,
                        ttl: *ttl,
                        items: &items,
                        note: note.as_ref(),
                    };
                    let got = project.acquire_request(now, &request);
                    prop_assert_eq!(
                        got,
                        model.acquire_noted(now, &token(*t), *ttl, &items, note.as_ref())
                    );
                    apply(&mut replica, &project.take_lapsed());
                    if let Some(fence) = got {
                        prop_assert!(fence > last_fence, "fence {} after {}", fence, last_fence);
                        last_fence = fence;
                        // The GRANT effect carries the note as it was given, or none.
                        replica.grant_noted(&token(*t), now + ttl, fence, &items, note.as_ref());
                    }
                }
                Op::Release { token: t, paths } => {
                    let paths: Option<Vec<Path>> =
                        paths.as_ref().map(|ps| ps.iter().map(|&i| path(i)).collect());
                    let mut unique = paths.clone();
                    if let Some(ps) = unique.as_mut() {
                        ps.sort();
                        ps.dedup();
                    }
                    let (freed, _) = project.release(now, &token(*t), paths.as_deref());
                    // The reference releases live locks only, so the counts agreeing means that
                    // no lapsed lease was released.
                    prop_assert_eq!(freed, model.release(&token(*t), unique.as_deref()));
                    apply(&mut replica, &project.take_lapsed());
                    replica.release_decided(&token(*t), paths.as_deref());
                }
                Op::Renew { token: t, ttl } => {
                    let (got, _) = project.renew(now, &token(*t), now + ttl);
                    prop_assert_eq!(got, model.renew(&token(*t), now + ttl));
                    apply(&mut replica, &project.take_lapsed());
                    replica.renew_decided(&token(*t), now + ttl);
                }
                Op::Check { token: t, items } => {
                    let items = resolve(items);
                    let who = t.map(token);
                    let got: BTreeSet<LockInfo> =
                        project.locks().blockers(now, who.as_ref(), &items).into_iter().collect();
                    prop_assert_eq!(got, model.blockers(now, who.as_ref(), &items));
                }
                Op::LocksOf { token: t, under } => {
                    // Lapsed locks linger here: the listing must hide them all the same.
                    prop_assert_eq!(
                        project.locks().locks_of_token(now, &path(*under), &token(*t)),
                        model.locks_of(now, &path(*under), &token(*t))
                    );
                }
                Op::Advance(ms) => now += ms,
                Op::Background(steps) => {
                    // Each server frees in the background at its own pace.
                    project.locks_mut().free_some(*steps);
                    replica.free_some(steps / 2);
                }
            }
            project.locks().check_integrity().map_err(TestCaseError::fail)?;
            replica.check_integrity().map_err(TestCaseError::fail)?;
            let live: Vec<LockInfo> = project.locks().locks(now, &Path::root());
            prop_assert_eq!(live.iter().cloned().collect::<BTreeSet<_>>(), model.live(now));
            assert_no_conflicting_grants(&live);
            prop_assert!(replica.iter().eq(project.locks().iter()), "the replica differs");
            // What a payload carries leaves no live lock out, holds no two conflicting locks
            // (decoding refuses those), and loads back to itself.
            let persisted: BTreeSet<LockInfo> = project.locks().iter().collect();
            prop_assert!(live.iter().all(|l| persisted.contains(l)), "a live lock was cut");
            let mut sink = ByteSink::default();
            encode(project.locks(), &mut sink);
            let again = decode(&mut ByteSource::new(&sink.bytes), u64::MAX)
                .map_err(|e| TestCaseError::fail(format!("its own payload refused: {e}")))?;
            prop_assert!(again.iter().eq(project.locks().iter()), "the payload differs");
            again.check_integrity().map_err(TestCaseError::fail)?;
            prop_assert_eq!(replica.next_fence(), project.locks().next_fence());
        }
    }

    #[test]
    fn bounded_expiry_steps_match_one_reclamation_and_replicas_follow(
        ops in prop::collection::vec(op(), 1..40),
        per_step in 1..4usize,
        later in 0..80u64,
        limits in limits(),
    ) {
        // Build a table with the same random history as above, then reclaim what is due at a
        // later time in steps of a few owners, with a replica applying each step by its tokens.
        let mut table = table(limits);
        let mut now = 1_000u64;
        for op in &ops {
            table.reclaim_expired(now, false);
            match op {
                Op::Acquire { token: t, ttl, items, note: n } => {
                    let note = note(*n);
                    let (tok, items) = (token(*t), resolve(items));
                    let request = Request {
                        token: &tok,
                        generated: false,
                        ttl: *ttl,
                        items: &items,
                        note: note.as_ref(),
                    };
                    table.acquire_with(now, &request, true);
                }
                Op::Release { token: t, paths } => {
                    let paths: Option<Vec<Path>> =
                        paths.as_ref().map(|ps| ps.iter().map(|&i| path(i)).collect());
                    table.release(now, &token(*t), paths.as_deref(), false);
                }
                Op::Renew { token: t, ttl } => {
                    table.renew(now, &token(*t), now + ttl);
                }
                Op::Check { .. } | Op::LocksOf { .. } => {}
                Op::Advance(ms) => now += ms,
                Op::Background(steps) => {
                    table.free_some(*steps);
                }
            }
        }
        let at = now + later;
        let mut whole = table.clone();
        let expected = whole.reclaim_expired(at, true);
        let mut replica = table.clone();
        let mut reclaimed = BTreeSet::new();
        let mut locks = 0;
        loop {
            let step = table.reclaim_some_expired(at, per_step, true);
            prop_assert!(step.tokens.len() <= per_step);
            table.check_integrity().map_err(TestCaseError::fail)?;
            if step.tokens.is_empty() {
                prop_assert_eq!(step.locks, 0);
                break;
            }
            let applied: usize = step
                .tokens
                .iter()
                .map(|t| replica.reclaim_expired_of(at, t, false).locks)
                .sum();
            prop_assert_eq!(applied, step.locks);
            replica.check_integrity().map_err(TestCaseError::fail)?;
            reclaimed.extend(step.probes);
            locks += step.locks;
        }
        prop_assert_eq!(locks, expected.locks);
        prop_assert_eq!(reclaimed, expected.probes.into_iter().collect::<BTreeSet<_>>());
        prop_assert!(table.iter().eq(whole.iter()));
        prop_assert!(replica.iter().eq(table.iter()));
    }

    #[test]
    fn listing_a_subtree_matches_the_reference(
        held in prop::collection::vec((0..TOKENS.len(), mode(), 0..PATHS.len()), 0..20),
        under in 0..PATHS.len(),
    ) {
        let mut table = LockTable::new();
        for (t, m, p) in &held {
            table.grant(&token(*t), 100, 1, &[(*m, path(*p))]);
        }
        let got: Vec<LockInfo> = table.locks(0, &path(under));
        let under_segments = segments(&path(under));
        let expected: BTreeSet<LockInfo> = table
            .stored()
            .into_iter()
            .filter(|l| segments(&l.path).starts_with(&under_segments))
            .collect();
        prop_assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), expected);
    }

    /// An owner's listing, from a table where one owner may hold many locks and a subtree few
    /// (or the other way round), so that both of its ways (the owner's list, or the subtree)
    /// are taken; either must give the scan's locks in tree order.
    #[test]
    fn an_owners_listing_matches_a_scan_whichever_way_it_reads(
        held in prop::collection::vec((0..3usize, mode(), 0..PATHS.len(), 0..3u64), 0..40),
    ) {
        let mut table = LockTable::new();
        for (i, (t, m, p, ttl)) in held.iter().enumerate() {
            // Conflicts are not decided here (a replica's grants), so every lock is stored; a
            // deadline of 0 is expired at every time the listing is asked at.
            let note = (i % 2 == 0).then(|| Note::from(format!("n{i}").as_bytes()));
            table.grant_noted(&token(*t), *ttl * 100, i as u64 + 1, &[(*m, path(*p))], note.as_ref());
        }
        for t in 0..3 {
            for under in 0..PATHS.len() {
                let under_segments = segments(&path(under));
                let expected: Vec<LockInfo> = table
                    .stored()
                    .into_iter()
                    .filter(|l| {
                        l.token == token(t)
                            && l.deadline > 50
                            && segments(&l.path).starts_with(&under_segments)
                    })
                    .collect();
                prop_assert_eq!(table.locks_of_token(50, &path(under), &token(t)), expected);
            }
        }
    }

    #[test]
    fn parsing_is_idempotent_and_round_trips(raw in prop::collection::vec(
        prop_oneof![Just(b'/'), Just(b'.'), Just(b'a'), Just(0u8), Just(1u8), Just(b'-'), any::<u8>()],
        0..40,
    )) {
        let limits = PathLimits::default();
        if let Ok(parsed) = Path::parse(&raw, &limits) {
            let shown = parsed.to_bytes();
            prop_assert_eq!(Path::parse(&shown, &limits), Ok(parsed.clone()));
            prop_assert_eq!(Path::from_key(parsed.key().to_vec()), Some(parsed));
        }
    }
}
