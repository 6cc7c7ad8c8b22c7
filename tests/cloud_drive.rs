//! The cloud-drive operations of the table in `docs/clients.md`, each mapped to its lock request,
//! run pairwise by two users against a real server and checked against the conflict rule of
//! `docs/commands.md`.

use crate::common::*;

/// (operation, its lock request), as the table in `docs/clients.md` maps them.
const OPERATIONS: &[(&str, &[&str])] = &[
    ("upload /A/C/D/new.txt", &["WRITE", "/A/C/D/new.txt"]),
    ("create folder /A/D/N", &["WRITE", "/A/D/N"]),
    ("download /A/a.txt", &["READ", "/A/a.txt"]),
    ("download /A/C/c.txt", &["READ", "/A/C/c.txt"]),
    (
        "rename /A/a.txt to /A/b.txt",
        &["WRITE", "/A/a.txt", "WRITE", "/A/b.txt"],
    ),
    (
        "rename folder /A/D to /A/E",
        &["WRITE", "/A/D", "WRITE", "/A/E"],
    ),
    (
        "move folder /A/C into /B",
        &["WRITE", "/A/C", "WRITE", "/B/C"],
    ),
    (
        "copy folder /A/C into /B",
        &["READ", "/A/C", "WRITE", "/B/C"],
    ),
    (
        "copy /A/C/c.txt into /B",
        &["READ", "/A/C/c.txt", "WRITE", "/B/c.txt"],
    ),
    ("delete /A/C/c.txt", &["WRITE", "/A/C/c.txt"]),
    ("delete folder /A", &["WRITE", "/A"]),
    ("upload /B/new.txt", &["WRITE", "/B/new.txt"]),
    ("upload /A/CD/x.txt", &["WRITE", "/A/CD/x.txt"]),
];

fn segments(path: &str) -> Vec<&str> {
    path.split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect()
}

/// The conflict rule of `docs/commands.md` (the model), stated directly: different owners, one path equal to or an
/// ancestor of the other, at least one WRITE.
fn rule_conflicts(first: &[&str], second: &[&str]) -> bool {
    first.chunks(2).any(|a| {
        second.chunks(2).any(|b| {
            let (pa, pb) = (segments(a[1]), segments(b[1]));
            (a[0] == "WRITE" || b[0] == "WRITE") && (pa.starts_with(&pb) || pb.starts_with(&pa))
        })
    })
}

#[test]
fn every_pair_of_operations_follows_the_conflict_rule() {
    let server = Server::start();
    let mut con = server.conn();
    let mut conflicts = 0;
    for (i, (first_name, first)) in OPERATIONS.iter().enumerate() {
        for (j, (second_name, second)) in OPERATIONS.iter().enumerate() {
            let key = format!("proj:{i}:{j}");
            assert!(
                take(&mut con, &key, "alice", first),
                "{first_name} on a fresh project"
            );
            let granted = take(&mut con, &key, "bob", second);
            let expected = !rule_conflicts(first, second);
            assert_eq!(
                granted, expected,
                "alice: {first_name}, then bob: {second_name}"
            );
            conflicts += usize::from(!granted);
            // The same user never conflicts with itself.
            let own = format!("{key}:own");
            assert!(take(&mut con, &own, "alice", first));
            assert!(
                take(&mut con, &own, "alice", second),
                "{first_name} then own {second_name}"
            );
        }
    }
    // The table mixes both outcomes, so the test cannot pass by always granting or refusing.
    assert!(conflicts > 20 && conflicts < OPERATIONS.len() * OPERATIONS.len() - 20);
}

#[test]
fn moving_a_folder_blocks_its_subtree_and_ancestors_but_nothing_beside_it() {
    let server = Server::start();
    let mut con = server.conn();
    let key = "proj:42";
    assert!(take(
        &mut con,
        key,
        "mover",
        &["TTL", "60000", "WRITE", "/A/C", "WRITE", "/B/C"]
    ));
    // Nobody may upload into /A/C/D, delete /A, or copy /A/C...
    assert!(!take(&mut con, key, "u1", &["WRITE", "/A/C/D/new.txt"]));
    assert!(!take(&mut con, key, "u2", &["WRITE", "/A"]));
    assert!(!take(
        &mut con,
        key,
        "u3",
        &["READ", "/A/C", "WRITE", "/X/C"]
    ));
    // ...but others work freely in /A/D, /B and /A/CD.
    assert!(take(&mut con, key, "u4", &["WRITE", "/A/D/file.txt"]));
    assert!(take(&mut con, key, "u5", &["WRITE", "/B/other.txt"]));
    assert!(take(&mut con, key, "u6", &["WRITE", "/A/CD"]));
    // When the move is done, the subtree is free again.
    assert_eq!(release(&mut con, key, "mover", &[]), 2);
    assert!(take(&mut con, key, "u1", &["WRITE", "/A/C/D/new.txt"]));
}

#[test]
fn readers_share_a_file_and_a_writer_waits_for_all_of_them() {
    let server = Server::start();
    let mut con = server.conn();
    for reader in ["r1", "r2", "r3"] {
        assert!(take(&mut con, "p", reader, &["READ", "/docs/report.pdf"]));
    }
    assert!(!take(
        &mut con,
        "p",
        "editor",
        &["WRITE", "/docs/report.pdf"]
    ));
    assert!(!take(&mut con, "p", "editor", &["WRITE", "/docs"]));
    for reader in ["r1", "r2"] {
        release(&mut con, "p", reader, &[]);
        assert!(!take(
            &mut con,
            "p",
            "editor",
            &["WRITE", "/docs/report.pdf"]
        ));
    }
    release(&mut con, "p", "r3", &[]);
    assert!(take(
        &mut con,
        "p",
        "editor",
        &["WRITE", "/docs/report.pdf"]
    ));
}
