//! LOCKS and CHECK: what a user is shown when a path is busy (the notes, `LOCKS ... TOKEN` and
//! `WAITERS` are in notes.rs and owners.rs).

use std::thread::sleep;
use std::time::Duration;

use crate::common::*;

type Entry = (String, String, String, i64, i64, Option<String>);

fn locks(con: &mut Connection, key: &str, under: Option<&str>) -> Vec<Entry> {
    let mut command = cmd("PATHLOCK.LOCKS");
    command.arg(key);
    if let Some(path) = under {
        command.arg(path);
    }
    command.query(con).expect("LOCKS")
}

fn check(con: &mut Connection, key: &str, args: &[&str]) -> Vec<Entry> {
    cmd("PATHLOCK.CHECK")
        .arg(key)
        .arg(args)
        .query(con)
        .expect("CHECK")
}

fn shape(entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .map(|(p, m, t, _, _, _)| format!("{m} {p} {t}"))
        .collect()
}

#[test]
fn locks_lists_live_locks_in_tree_order_with_ttl_and_fence() {
    let server = Server::start();
    let mut con = server.conn();
    for (token, mode, path) in [
        ("t1", "READ", "/p/f1 copy"),
        ("t2", "READ", "/p/f1/x"),
        ("t3", "READ", "/p"),
        ("t4", "WRITE", "/q"),
        ("t5", "READ", "/p/f10"),
    ] {
        assert!(take(&mut con, "k", token, &["TTL", "60000", mode, path]));
    }
    let all = locks(&mut con, "k", None);
    assert_eq!(
        shape(&all),
        [
            "READ /p t3",
            "READ /p/f1/x t2",
            "READ /p/f1 copy t1",
            "READ /p/f10 t5",
            "WRITE /q t4"
        ]
    );
    // Fences in grant order t1..t5, counted from the key's first.
    let first = all.iter().map(|e| e.4).min().unwrap_or_default();
    let fences: Vec<i64> = all.iter().map(|e| e.4 - first).collect();
    assert_eq!(fences, [2, 1, 0, 4, 3]);
    assert!(all.iter().all(|e| e.3 > 59_000 && e.3 <= 60_000), "{all:?}");
    // A subtree lists its root and descendants only, never the locks above it.
    assert_eq!(
        shape(&locks(&mut con, "k", Some("p//f1/"))),
        ["READ /p/f1/x t2"]
    );
    assert!(locks(&mut con, "k", Some("/p/f")).is_empty());
    assert!(locks(&mut con, "missing", None).is_empty());
}

#[test]
fn expired_locks_are_listed_nowhere() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "k", "brief", &["TTL", "50", "WRITE", "/A"]));
    assert!(take(&mut con, "k", "long", &["TTL", "60000", "READ", "/B"]));
    sleep(Duration::from_millis(120));
    assert_eq!(shape(&locks(&mut con, "k", None)), ["READ /B long"]);
    assert!(check(&mut con, "k", &["WRITE", "/"]).len() == 1);
}

#[test]
fn check_names_the_blockers_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(
        &mut con,
        "k",
        "mover",
        &["WRITE", "/A/C", "WRITE", "/B/C"]
    ));
    assert!(take(&mut con, "k", "reader", &["READ", "/A/D/x"]));
    assert_eq!(
        shape(&check(&mut con, "k", &["WRITE", "/A"])),
        ["WRITE /A/C mover", "READ /A/D/x reader"]
    );
    assert_eq!(
        shape(&check(&mut con, "k", &["READ", "/A"])),
        ["WRITE /A/C mover"]
    );
    assert_eq!(
        shape(&check(&mut con, "k", &["READ", "/A/C/z", "WRITE", "/B"])),
        ["WRITE /A/C mover", "WRITE /B/C mover"]
    );
    // An owner's own locks do not block it.
    assert!(check(&mut con, "k", &["TOKEN", "mover", "WRITE", "/A/C/z"]).is_empty());
    assert_eq!(
        shape(&check(&mut con, "k", &["TOKEN", "mover", "WRITE", "/A"])),
        ["READ /A/D/x reader"]
    );
    assert!(check(&mut con, "k", &["WRITE", "/A/CD"]).is_empty());
    assert!(check(&mut con, "missing", &["WRITE", "/"]).is_empty());
    // CHECK agrees with what ACQUIRE then does, and took nothing itself.
    assert!(take(&mut con, "k", "x", &["WRITE", "/A/CD"]));
    assert!(!take(&mut con, "k", "x", &["READ", "/A"]));
    assert_eq!(locks(&mut con, "k", None).len(), 4);
}

#[test]
fn inspection_errors() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = cmd("SET").arg("s").arg("1").query(&mut con).expect("SET");
    assert_errors(
        &mut con,
        &[
            (&[&b"PATHLOCK.LOCKS"[..], b"s"][..], "WRONGTYPE"),
            (&[b"PATHLOCK.CHECK", b"s", b"READ", b"/"], "WRONGTYPE"),
            (&[b"PATHLOCK.LOCKS", b"k", b"/a/../b"], "ERR invalid path"),
            (
                &[b"PATHLOCK.LOCKS", b"k", b"/a", b"/b"],
                "ERR unknown option '/b' after the path",
            ),
            (
                &[b"PATHLOCK.CHECK", b"k", b"TOKEN", b"t"],
                "ERR no lock requested",
            ),
            (
                &[b"PATHLOCK.CHECK", b"k", b"READ"],
                "ERR wrong number of arguments",
            ),
            (
                &[b"PATHLOCK.CHECK", b"k", b"TOKEN", b"t", b"READ"],
                "ERR missing path after mode",
            ),
            (
                &[b"PATHLOCK.CHECK", b"k", b"TOKEN", b"", b"READ", b"/"],
                "ERR invalid token",
            ),
            (
                &[b"PATHLOCK.CHECK", b"k", b"SHARE", b"/"],
                "ERR invalid mode 'SHARE'",
            ),
        ],
    );
}
