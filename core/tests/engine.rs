//! Scenario tests of the engine through its public API.

use pathlock_core::{LockTable, Mode, Path, PathLimits, Project, Request, Token, Waiter};

fn p(s: &str) -> Path {
    Path::parse(s.as_bytes(), &PathLimits::default()).expect("valid path")
}

fn t(s: &str) -> Token {
    Token::new(s.as_bytes()).expect("valid token")
}

fn acquire(table: &mut LockTable, now: u64, token: &str, items: &[(Mode, &str)]) -> Option<u64> {
    let items: Vec<(Mode, Path)> = items.iter().map(|(m, s)| (*m, p(s))).collect();
    table.reclaim_expired(now, false);
    let fence = table.acquire(now, &t(token), 1000, &items).fence;
    table.check_integrity().expect("integrity");
    fence
}

use Mode::{Read, Write};

#[test]
fn the_conflict_rule_between_two_owners() {
    // (held, requested, conflicts?)
    let cases = [
        ((Write, "/A/C"), (Write, "/A/C/D"), true),
        ((Write, "/A/C"), (Read, "/A/C/D"), true),
        ((Read, "/A/C"), (Read, "/A/C/D"), false),
        ((Read, "/A/C"), (Write, "/A/C/D"), true),
        ((Write, "/A/C/D"), (Write, "/A"), true),
        ((Write, "/A/C/D"), (Read, "/A"), true),
        ((Read, "/A/C/D"), (Read, "/A"), false),
        ((Read, "/A/C/D"), (Write, "/A"), true),
        ((Write, "/A/C"), (Write, "/A/C"), true),
        ((Read, "/A/C"), (Read, "/A/C"), false),
        ((Write, "/A/C"), (Write, "/A/CD"), false),
        ((Write, "/A/C"), (Write, "/A/D"), false),
        ((Write, "/p/f1"), (Write, "/p/f10"), false),
        ((Write, "/"), (Read, "/x/y"), true),
        ((Read, "/"), (Write, "/x"), true),
        ((Read, "/"), (Read, "/x"), false),
        ((Write, "/x/y/z"), (Write, "/"), true),
    ];
    for ((held_mode, held_path), (mode, path), conflicts) in cases {
        let mut table = LockTable::new();
        assert!(acquire(&mut table, 0, "owner", &[(held_mode, held_path)]).is_some());
        let granted = acquire(&mut table, 0, "other", &[(mode, path)]).is_some();
        assert_eq!(
            granted, !conflicts,
            "{held_mode} {held_path} then {mode} {path}"
        );
    }
}

#[test]
fn the_same_token_never_conflicts_with_itself() {
    let mut table = LockTable::new();
    assert!(acquire(&mut table, 0, "me", &[(Read, "/A")]).is_some());
    assert!(acquire(&mut table, 0, "me", &[(Write, "/A/x")]).is_some());
    assert!(acquire(&mut table, 0, "me", &[(Write, "/A")]).is_some());
    assert_eq!(table.len(), 3);
    // Another owner is still blocked everywhere the first one holds anything.
    assert!(acquire(&mut table, 0, "you", &[(Read, "/A/y")]).is_none());
    assert!(acquire(&mut table, 0, "you", &[(Read, "/")]).is_none());
}

#[test]
fn own_locks_beneath_do_not_hide_another_owners_lock() {
    let mut table = LockTable::new();
    assert!(acquire(&mut table, 0, "me", &[(Write, "/A/x")]).is_some());
    assert!(acquire(&mut table, 0, "you", &[(Write, "/A/y")]).is_some());
    assert!(acquire(&mut table, 0, "me", &[(Write, "/A")]).is_none());
    assert!(acquire(&mut table, 0, "me", &[(Read, "/A")]).is_none());
    table.release_decided(&t("you"), None);
    assert!(acquire(&mut table, 0, "me", &[(Write, "/A")]).is_some());
}

#[test]
fn a_request_is_all_or_nothing_and_fences_count_calls() {
    let mut table = LockTable::new();
    assert_eq!(acquire(&mut table, 0, "a", &[(Write, "/B/x")]), Some(1));
    // Moving /A into /B conflicts on /B/x: nothing of the request is granted.
    assert_eq!(
        acquire(&mut table, 0, "b", &[(Write, "/A"), (Write, "/B")]),
        None
    );
    assert_eq!(table.len(), 1);
    assert_eq!(table.next_fence(), 2);
    assert_eq!(
        acquire(&mut table, 0, "b", &[(Write, "/A"), (Write, "/C")]),
        Some(2)
    );
    assert_eq!(table.len(), 3);
}

#[test]
fn reacquiring_refreshes_without_counting_twice() {
    let mut table = LockTable::new();
    let token = t("me");
    assert_eq!(
        table.acquire(0, &token, 100, &[(Write, p("/A"))]).fence,
        Some(1)
    );
    assert_eq!(
        table.acquire(50, &token, 100, &[(Write, p("/A"))]).fence,
        Some(2)
    );
    assert_eq!(table.len(), 1);
    let locks = table.locks(120, &Path::root());
    assert_eq!(locks.len(), 1);
    assert_eq!((locks[0].deadline, locks[0].fence), (150, 2));
    assert_eq!(table.release_decided(&token, Some(&[p("/A")])), 1);
    assert_eq!(table.node_count(), 0);
}

#[test]
fn release_frees_every_mode_at_a_path_and_only_the_owners() {
    let mut table = LockTable::new();
    assert!(acquire(
        &mut table,
        0,
        "me",
        &[(Read, "/A"), (Write, "/A"), (Write, "/B")]
    )
    .is_some());
    assert_eq!(table.release_decided(&t("you"), None), 0);
    assert_eq!(table.release_decided(&t("me"), Some(&[p("/A")])), 2);
    assert_eq!(table.release_decided(&t("me"), Some(&[p("/A")])), 0);
    assert_eq!(table.release_decided(&t("me"), None), 1);
    assert_eq!(table.node_count(), 0);
    table.check_integrity().expect("integrity");
}

/// A project's release (which first reclaims the token's own lapsed leases, in one owner
/// look-up) must end as the table's plain release leaves it once every lapsed lease is gone: the
/// same locks, counts, memory estimate and sound internals, and the token free to lock again.
/// The tokens cover each shape of owner and path: one lock, one of many files in a folder, two
/// locks, a path two readers share, a lapsed lease, and a token that holds nothing.
#[test]
fn a_projects_release_ends_as_the_tables_plain_release_does() {
    let now = 10;
    let setup = |project: &mut Project| {
        let mut take = |token: &str, ttl: u64, items: &[(Mode, &str)]| {
            let items: Vec<(Mode, Path)> = items.iter().map(|(m, s)| (*m, p(s))).collect();
            assert!(project.acquire(0, &t(token), ttl, &items).is_some());
        };
        // One lock each, one of them under a folder of many files.
        take("only", 1000, &[(Write, "/dir/a")]);
        for i in 0..40 {
            take(&format!("file{i}"), 1000, &[(Write, &format!("/dir/f{i}"))]);
        }
        // Two locks; a path two readers share; a lease already lapsed.
        take("two", 1000, &[(Write, "/x"), (Read, "/y/z")]);
        take("reader1", 1000, &[(Read, "/shared")]);
        take("reader2", 1000, &[(Read, "/shared")]);
        take("lapsed", 5, &[(Write, "/old")]);
    };
    let tokens = ["only", "file7", "two", "reader1", "lapsed", "nobody"];
    for token in tokens {
        let mut project = Project::new();
        setup(&mut project);
        let mut general = project.locks().clone();
        general.reclaim_expired(now, false);
        let expected = general.release_decided(&t(token), None);
        let (released, grants) = project.release(now, &t(token), None);
        assert_eq!(released, expected, "{token}");
        assert!(grants.is_empty());
        // The lapsed lease of `lapsed` is reclaimed by its own release; the general table
        // reclaimed every lapsed lease first, so the rest is compared once those are gone too.
        project.locks_mut().reclaim_expired(now, false);
        let table = project.locks();
        table.check_integrity().expect("integrity");
        assert_eq!(table.len(), general.len(), "{token}");
        assert_eq!(table.node_count(), general.node_count(), "{token}");
        assert_eq!(
            table.locks(now, &p("/")),
            general.locks(now, &p("/")),
            "{token}"
        );
        // The token can lock again, and what it held is free to others.
        let fresh = [(Write, p("/fresh"))];
        assert!(project.acquire(now, &t(token), 1000, &fresh).is_some());
        let freed = project.acquire(now, &t("next"), 1000, &[(Write, p("/dir/a"))]);
        assert_eq!(freed.is_some(), token == "only", "{token}");
        project.locks().check_integrity().expect("integrity");
    }
}

#[test]
fn expired_locks_block_nobody_and_are_reclaimed_in_deadline_order() {
    let mut table = LockTable::new();
    let a = t("a");
    let b = t("b");
    table.acquire(0, &a, 30, &[(Write, p("/x/1"))]);
    table.acquire(0, &b, 10, &[(Write, p("/x/2"))]);
    assert!(table.locks(10, &Path::root()).iter().all(|l| l.token == a));
    let reclaimed = table.reclaim_expired(30, false);
    assert_eq!(reclaimed.tokens, vec![b, a]);
    assert_eq!(table.node_count(), 0);
    assert_eq!(acquire(&mut table, 30, "c", &[(Write, "/")]), Some(3));
}

#[test]
fn renew_moves_every_deadline_of_the_token() {
    let mut table = LockTable::new();
    let me = t("me");
    table.acquire(0, &me, 10, &[(Read, p("/A")), (Write, p("/A/b"))]);
    table.acquire(0, &t("you"), 10, &[(Read, p("/C"))]);
    assert_eq!(table.renew_decided(&me, 500), 2);
    assert_eq!(table.renew_decided(&t("nobody"), 500), 0);
    assert_eq!(table.reclaim_expired(100, false).locks, 1);
    assert_eq!(table.len(), 2);
    table.check_integrity().expect("integrity");
}

#[test]
fn listings_are_in_tree_order_and_scoped() {
    let mut table = LockTable::new();
    for (i, path) in ["/p/f1 copy", "/p/f1/x", "/p", "/p/f1", "/q", "/p/f10"]
        .iter()
        .enumerate()
    {
        table.acquire(0, &t(&format!("t{i}")), 100, &[(Read, p(path))]);
    }
    let shown: Vec<String> = table
        .locks(0, &Path::root())
        .iter()
        .map(|l| l.path.to_string())
        .collect();
    assert_eq!(
        shown,
        ["/p", "/p/f1", "/p/f1/x", "/p/f1 copy", "/p/f10", "/q"]
    );
    let under: Vec<String> = table
        .locks(0, &p("/p/f1"))
        .iter()
        .map(|l| l.path.to_string())
        .collect();
    assert_eq!(under, ["/p/f1", "/p/f1/x"]);
    assert!(table.locks(0, &p("/p/f")).is_empty());
}

#[test]
fn blockers_name_exactly_the_conflicting_locks() {
    let mut table = LockTable::new();
    let names = |found: Vec<pathlock_core::LockInfo>| -> Vec<String> {
        found
            .iter()
            .map(|l| format!("{} {}", l.mode, l.path))
            .collect()
    };
    table.acquire(0, &t("mover"), 100, &[(Write, p("/A/C"))]);
    table.acquire(0, &t("reader"), 100, &[(Read, p("/A/D/x"))]);
    let found = table.blockers(0, Some(&t("me")), &[(Write, p("/A"))]);
    assert_eq!(names(found), ["WRITE /A/C", "READ /A/D/x"]);
    let found = table.blockers(0, Some(&t("me")), &[(Read, p("/A"))]);
    assert_eq!(names(found), ["WRITE /A/C"]);
    let found = table.blockers(0, None, &[(Read, p("/A/C/z")), (Write, p("/A/C"))]);
    assert_eq!(names(found), ["WRITE /A/C"]);
    assert!(table
        .blockers(0, Some(&t("mover")), &[(Read, p("/A/C/z"))])
        .is_empty());
    assert!(table.blockers(0, None, &[(Read, p("/B"))]).is_empty());
    table.release_decided(&t("mover"), None);
    table.acquire(0, &t("root"), 100, &[(Read, p("/"))]);
    let found = table.blockers(0, Some(&t("me")), &[(Write, p("/A"))]);
    assert_eq!(names(found), ["READ /", "READ /A/D/x"]);
    // Expired locks are not blockers.
    assert!(table
        .blockers(100, Some(&t("me")), &[(Write, p("/A"))])
        .is_empty());
}

#[test]
fn many_readers_on_one_path_do_not_block_each_other() {
    let mut table = LockTable::new();
    for i in 0..1000 {
        let token = t(&format!("r{i}"));
        assert!(table
            .acquire(0, &token, 10, &[(Read, p("/shared"))])
            .fence
            .is_some());
    }
    assert!(acquire(&mut table, 0, "w", &[(Write, "/shared/x")]).is_none());
    assert!(acquire(&mut table, 0, "r", &[(Read, "/shared/x")]).is_some());
}

#[test]
fn grant_applies_a_decided_grant_and_keeps_fences_ahead() {
    let mut table = LockTable::new();
    table.grant(&t("a"), 500, 41, &[(Write, p("/A"))]);
    assert_eq!(table.next_fence(), 42);
    table.grant(&t("b"), 500, 7, &[(Write, p("/B"))]);
    assert_eq!(table.next_fence(), 42);
    assert_eq!(
        table.acquire(0, &t("c"), 1, &[(Write, p("/C"))]).fence,
        Some(42)
    );
    table.check_integrity().expect("integrity");
}

#[test]
fn a_project_grown_through_many_segment_splits_and_emptied_stays_whole() {
    // Tens of thousands of files in one folder, each by its own token, and some readers shared
    // by many tokens: the children's table, the owner index and the side maps all split their
    // segments many times, and the engine must find every entry throughout.
    let mut table = LockTable::new();
    let files = 40_000;
    for i in 0..files {
        let token = t(&format!("owner-{i}"));
        let items = [
            (Write, p(&format!("/big/f{i}"))),
            (Read, p(&format!("/shared/s{}", i % 7))),
        ];
        assert!(table
            .acquire(0, &token, 1000 + (i % 5) as u64, &items)
            .fence
            .is_some());
    }
    table.check_integrity().expect("integrity after growth");
    assert_eq!(table.len(), 2 * files);
    assert!(table.is_blocked(0, &t("someone"), Write, &p("/big")));
    assert!(!table.is_blocked(0, &t("someone"), Write, &p("/big/other")));
    // Release every other owner by path, then reclaim the rest as they expire.
    for i in (0..files).step_by(2) {
        let token = t(&format!("owner-{i}"));
        let freed = table.release_decided(&token, Some(&[p(&format!("/big/f{i}"))]));
        assert_eq!(freed, 1);
    }
    table.check_integrity().expect("integrity after release");
    for i in (1..files).step_by(2) {
        assert!(table.is_blocked(0, &t("someone"), Write, &p(&format!("/big/f{i}"))));
    }
    let mut reclaimed = 0;
    for now in 1000..1005 {
        reclaimed += table.reclaim_expired(now, false).locks;
        table.check_integrity().expect("integrity while reclaiming");
    }
    assert_eq!(reclaimed, 2 * files - files / 2);
    assert!(table.is_empty());
    assert_eq!(table.node_count(), 0);
}

#[test]
fn expiry_in_bounded_steps_reclaims_what_one_call_would_and_replicas_follow_by_token() {
    // Owners with one lock, owners with several (some not yet due), and readers sharing paths.
    let mut master = LockTable::new();
    for i in 0..500u64 {
        let token = t(&format!("o{i}"));
        let mut items = vec![(Write, p(&format!("/f/{i}")))];
        if i % 3 == 0 {
            items.push((Read, p(&format!("/shared/{}", i % 4))));
        }
        master.acquire(0, &token, 10 + i % 20, &items);
        if i % 5 == 0 {
            // A later lock of the same owner moves its whole lease later.
            master.acquire(0, &token, 100, &[(Write, p(&format!("/late/{i}")))]);
        }
    }
    let mut replica = master.clone();
    let mut whole = master.clone();
    let expected = whole.reclaim_expired(25, true);
    let mut reclaimed = Vec::new();
    let mut locks = 0;
    loop {
        let step = master.reclaim_some_expired(25, 7, true);
        assert!(step.tokens.len() <= 7);
        master.check_integrity().expect("master integrity");
        if step.tokens.is_empty() {
            assert_eq!(step.locks, 0);
            break;
        }
        // The replica applies the step by the tokens it names.
        let applied: usize = step
            .tokens
            .iter()
            .map(|token| replica.reclaim_expired_of(25, token, false).locks)
            .sum();
        assert_eq!(applied, step.locks);
        replica.check_integrity().expect("replica integrity");
        reclaimed.extend(step.probes);
        locks += step.locks;
    }
    let sorted = |mut v: Vec<(Mode, Path)>| {
        v.sort();
        v
    };
    assert_eq!(locks, expected.locks);
    assert_eq!(sorted(reclaimed), sorted(expected.probes));
    assert!(master.iter().eq(whole.iter()));
    assert!(replica.iter().eq(master.iter()));
    assert!(master.iter().all(|lock| lock.deadline > 25));
    // A token with nothing due is left as it is.
    assert!(master.reclaim_expired_of(25, &t("o5"), false).is_empty());
    master.check_integrity().expect("integrity");
}

/// A command on a project where a million locks just expired reclaims what it needs and a fixed
/// few more, not the million: the work is counted in locks reclaimed, which is what costs.
#[test]
fn a_command_after_a_mass_expiry_reclaims_only_what_it_needs() {
    const LOCKS: usize = 1_000_000;
    let path = |i: usize| p(&format!("/p{}/d{}/f{i}", i % 1000, i / 1000 % 1000));
    let owner = |i: usize| t(&format!("owner-{i}"));
    let mut table = LockTable::new();
    for i in 0..LOCKS {
        table.acquire(0, &owner(i), 1000, &[(Write, path(i))]);
    }
    let mut project = Project::from_locks(table);
    let now = 1000;
    let mut commands = 0;
    // A command as the Redis layer runs it: two owners besides what it needs, then the change.
    let mut run = |project: &mut Project, change: &dyn Fn(&mut Project) -> bool, needs: usize| {
        let before = project.locks().len();
        project.reclaim_lazily(now, None, 2);
        assert!(change(project));
        let lapsed = project.take_lapsed();
        assert!(lapsed.owners.len() <= 2 + needs, "{:?}", lapsed.owners);
        assert!(before - project.locks().len() <= 2 + needs + 1);
        commands += 1;
    };
    // A new path elsewhere; a path an expired lease held; the whole folder of one expired lease
    // (a READ over what lies beneath /p7/d0, a thousand lapsed writers); the expired lease's
    // owner renewing and releasing it.
    run(
        &mut project,
        &|pr| {
            pr.acquire(now, &t("new"), 10, &[(Write, p("/elsewhere"))])
                .is_some()
        },
        0,
    );
    run(
        &mut project,
        &|pr| {
            pr.acquire(now, &t("taker"), 10, &[(Write, path(77))])
                .is_some()
        },
        1,
    );
    run(
        &mut project,
        &|pr| pr.renew(now, &owner(5), now + 10).0 == 0,
        1,
    );
    run(
        &mut project,
        &|pr| pr.release(now, &owner(6), None).0 == 0,
        1,
    );
    run(
        &mut project,
        &|pr| {
            pr.acquire(now, &t("reader"), 10, &[(Read, p("/p7"))])
                .is_some()
        },
        1000,
    );
    assert_eq!(commands, 5);
    // The listing and checks see none of what lingers, and a live lock still blocks.
    assert_eq!(project.locks().locks(now, &Path::root()).len(), 3);
    assert!(project
        .locks()
        .blockers(now, None, &[(Write, p("/p9"))])
        .is_empty());
    assert!(project
        .acquire(now, &t("other"), 10, &[(Write, path(77))])
        .is_none());
    assert!(project.take_lapsed().is_empty());
    assert!(project.locks().len() > LOCKS - 1100);
}

#[test]
fn a_waiter_held_up_only_by_lapsed_leases_is_granted_when_the_live_one_goes() {
    let mut project = Project::new();
    let (live, lapsing, waiting) = (t("live"), t("lapsing"), t("waiting"));
    assert!(project
        .acquire(0, &live, 100, &[(Write, p("/a/x"))])
        .is_some());
    assert!(project
        .acquire(0, &lapsing, 10, &[(Write, p("/a/y"))])
        .is_some());
    assert!(project
        .acquire(5, &waiting, 50, &[(Write, p("/a"))])
        .is_none());
    project.enqueue(
        1,
        Waiter {
            token: waiting.clone(),
            ttl: 50,
            items: vec![(Write, p("/a"))].into(),
            note: None,
        },
    );
    // At 20 the lease on /a/y lapsed but nobody reclaimed it; releasing /a/x lets the waiter in
    // and reclaims /a/y on the way, for the caller to replicate.
    let (freed, grants) = project.release(20, &live, None);
    assert_eq!(freed, 1);
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].token, waiting);
    let lapsed = project.take_lapsed();
    assert_eq!(lapsed.owners, vec![(20, lapsing)]);
    assert_eq!(lapsed.locks, 1);
    assert_eq!(project.waiting(), 0);
    assert_eq!(project.locks().len(), 1);
    project.locks().check_integrity().expect("integrity");
}

/// Listing, conflicts beneath a path and persistence walk the tree without recursing, so a path
/// as deep as any configuration allows is listed on a thread with a small stack.
#[test]
fn the_deepest_path_allowed_is_walked_on_a_small_stack() {
    let deep = "/d".repeat(PathLimits::CEILING.max_depth);
    let path = Path::parse(deep.as_bytes(), &PathLimits::CEILING).expect("the deepest path");
    let listed = std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(move || {
            let mut table = LockTable::new();
            let token = Token::new(b"deep").expect("a token");
            table.grant(&token, 100, 1, &[(Mode::Write, path)]);
            let other = Token::new(b"other").expect("a token");
            let blockers = table.blockers(0, Some(&other), &[(Mode::Read, Path::root())]);
            (
                table.locks(0, &Path::root()).len(),
                blockers.len(),
                table.iter().count(),
            )
        })
        .expect("a thread")
        .join()
        .expect("no stack overflow");
    assert_eq!(listed, (1, 1, 1));
}

/// The history `a_large_copy_and_its_original_change_independently` gives the table it copies:
/// more nodes and owners than one storage chunk holds, a folder of thousands of children (a
/// children's table of several segments), owners of several locks, paths shared by many
/// readers, and thousands of distinct deadlines.
fn large_history(table: &mut LockTable) {
    for i in 0..24_000u64 {
        let token = t(&format!("owner-{}", i % 7_000));
        let items = [
            (Write, p(&format!("/d{}/f{i}", i % 5_000))),
            (Read, p(&format!("/shared/s{}", i % 11))),
        ];
        assert!(table.acquire(i, &token, 50_000 + i, &items).fence.is_some());
    }
}

/// What each side does after the copy: releases by token and by path, new grants in new and
/// existing folders, renewals, and a mass expiry, so that both sides write to pieces the other
/// still holds.
fn left_changes(table: &mut LockTable) {
    for i in 0..1_500 {
        table.release_decided(&t(&format!("owner-{i}")), None);
    }
    for i in 0..3_000u64 {
        let items = [(Write, p(&format!("/d{}/new{i}", i % 6_000)))];
        assert!(table
            .acquire(30_000, &t(&format!("left-{i}")), 100_000, &items)
            .fence
            .is_some());
    }
    table.renew_decided(&t("owner-6999"), 1_000_000);
    table.reclaim_expired(60_000, false);
}

fn right_changes(table: &mut LockTable) {
    table.reclaim_expired(55_000, false);
    for i in (2_000..7_000).step_by(3) {
        table.release_decided(
            &t(&format!("owner-{i}")),
            Some(&[p(&format!("/d{}/f{i}", i % 5_000))]),
        );
    }
    for i in 0..2_000u64 {
        let items = [(Read, p(&format!("/shared/s{}", i % 13)))];
        assert!(table
            .acquire(56_000, &t(&format!("right-{i}")), 5, &items)
            .fence
            .is_some());
    }
    table.renew_decided(&t("owner-6000"), 2_000_000);
}

#[test]
fn a_large_copy_and_its_original_change_independently() {
    let mut original = LockTable::new();
    large_history(&mut original);
    let mut copy = original.share();
    assert!(copy.iter().eq(original.iter()));
    left_changes(&mut original);
    right_changes(&mut copy);
    // Each side must be what the same history gives a table that was never copied.
    for (side, changes) in [
        (&original, left_changes as fn(&mut LockTable)),
        (&copy, right_changes),
    ] {
        let mut alone = LockTable::new();
        large_history(&mut alone);
        changes(&mut alone);
        side.check_integrity().expect("integrity of a copy");
        assert!(side.iter().eq(alone.iter()));
        assert_eq!(side.len(), alone.len());
        assert_eq!(side.node_count(), alone.node_count());
        // The estimate counts capacities: a chunk copied for a write is exactly as long as it
        // needs, where one that grew is rounded up, so the two differ by a few chunks' slack.
        let (estimate, expected) = (side.memory_estimate(), alone.memory_estimate());
        assert!(
            estimate.abs_diff(expected) * 100 <= expected,
            "{estimate} against {expected}"
        );
        assert_eq!(side.next_deadline(), alone.next_deadline());
        assert_eq!(side.next_fence(), alone.next_fence());
    }
    assert!(!original.iter().eq(copy.iter()));
    // Either side outlives the other: what they shared stays with the survivor.
    drop(original);
    copy.check_integrity().expect("integrity of the survivor");
    while let Some(deadline) = copy.next_deadline() {
        assert!(!copy.reclaim_expired(deadline, false).is_empty());
    }
    while copy.free_some(1_000) > 0 {}
    assert_eq!(copy.node_count(), 0);
}

#[test]
fn a_generated_token_is_granted_and_found_again_like_any_other() {
    // A request marked `generated` skips the owners' look-up for a token just generated; what
    // it grants must then behave exactly as a grant through `acquire`: it blocks others, its
    // owner is found by RENEW and RELEASE, and a second grant to it joins the same owner.
    let mut project = Project::new();
    assert_eq!(
        project.acquire(0, &t("other"), 1000, &[(Write, p("/A/C"))]),
        Some(1)
    );
    let token = Token::generate();
    let generated = |project: &mut Project, items: &[(Mode, Path)]| {
        project.acquire_request(
            0,
            &Request {
                token: &token,
                generated: true,
                ttl: 1000,
                items,
                note: None,
            },
        )
    };
    assert_eq!(generated(&mut project, &[(Write, p("/A/C/D"))]), None);
    assert_eq!(generated(&mut project, &[(Read, p("/B"))]), Some(2));
    assert!(project
        .acquire(0, &t("third"), 1000, &[(Write, p("/B/x"))])
        .is_none());
    assert_eq!(
        project.acquire(0, &token, 1000, &[(Write, p("/D"))]),
        Some(3)
    );
    assert_eq!(project.renew(0, &token, 5000).0, 2);
    assert_eq!(project.release(0, &token, None).0, 2);
    project.locks().check_integrity().expect("integrity");
    assert_eq!(project.locks().len(), 1);
}

/// A path that a crowd of readers holds: each reader is taken and dropped in a step (the crowd
/// keeps its readers by owner), a writer's request sees at once that every reader's lease lapsed
/// (the crowd's bound), a live reader still blocks it, and listings give the crowd in canonical
/// order.
#[test]
fn a_crowd_on_one_path_costs_each_reader_a_step_and_lapses_at_once() {
    let mut table = LockTable::with_small_owners_up_to(2);
    let shared = p("/shared");
    for i in 0..20_000 {
        let granted = table.acquire(0, &t(&format!("r{i:05}")), 100, &[(Read, shared.clone())]);
        assert!(granted.fence.is_some());
    }
    // A big owner (past its limit of 2) among the readers, and one reader renewed later.
    let big = t("big");
    let items = [(Read, shared.clone()), (Write, p("/x")), (Write, p("/y"))];
    assert!(table.acquire(0, &big, 100, &items).fence.is_some());
    assert_eq!(table.renew_decided(&t("r00007"), 500), 1);
    table.check_integrity().expect("integrity with a crowd");
    let listed = table.locks(50, &shared);
    assert_eq!(listed.len(), 20_001);
    assert!(
        listed.windows(2).all(|w| w[0].token < w[1].token),
        "a crowd is listed by token"
    );
    // At 200 every lease but r00007's lapsed: a writer is blocked by it alone.
    let blockers = table.blockers(200, Some(&t("w")), &[(Write, shared.clone())]);
    assert_eq!(blockers.len(), 1);
    assert_eq!(blockers[0].token, t("r00007"));
    assert!(table
        .acquire(200, &t("w"), 100, &[(Write, shared.clone())])
        .fence
        .is_none());
    // At 600 none is live: the writer is granted over the lapsed crowd.
    let granted = table.acquire(600, &t("w"), 100, &[(Write, shared.clone())]);
    assert!(granted.fence.is_some());
    assert!(table.locks(600, &shared).iter().all(|l| l.token == t("w")));
    // Dropping readers one by one empties the crowd back to its writer.
    table.reclaim_expired(600, false);
    while table.free_some(1000) > 0 {}
    table
        .check_integrity()
        .expect("integrity after the crowd went");
    assert_eq!(table.len(), 1);
}

/// Where live and lapsed locks lie together beneath a path in the thousands, the request's
/// search for a live one is bounded: past its budget the request is refused as if blocked, the
/// lapsed owners it met are reclaimed (so a retry goes further), and once the expiry cycle has
/// reclaimed the rest the request is decided at once.
#[test]
fn a_search_among_thousands_of_lapsed_locks_is_bounded_and_the_expiry_cycle_clears_the_way() {
    let mut table = LockTable::new();
    for i in 0..5_000 {
        let granted = table.acquire(
            0,
            &t(&format!("o{i}")),
            10,
            &[(Write, p(&format!("/f/{i}")))],
        );
        assert!(granted.fence.is_some());
    }
    // A long lease beneath /f, released early: the folder's bound stays at its deadline, so
    // the bound alone cannot say that everything beneath has lapsed.
    assert!(table
        .acquire(0, &t("long"), 1_000, &[(Write, p("/f/long"))])
        .fence
        .is_some());
    assert_eq!(table.release_decided(&t("long"), None), 1);
    let first = table.acquire(100, &t("w"), 10, &[(Write, p("/f"))]);
    assert_eq!(first.fence, None, "refused past the search's budget");
    assert!(
        !first.lapsed.tokens.is_empty(),
        "it reclaimed some of what it met"
    );
    table.check_integrity().expect("integrity");
    // The expiry cycle reclaims the rest in steps; then the request is granted.
    while !table
        .reclaim_some_expired(100, 512, false)
        .tokens
        .is_empty()
    {}
    let granted = table.acquire(100, &t("w"), 10, &[(Write, p("/f"))]);
    assert!(granted.fence.is_some());
    table.check_integrity().expect("integrity");
}
