//! Paths: siblings that share a prefix, bytes that Lua patterns treat specially, CJK and
//! arbitrary bytes, normalisation, and the root. The old Lua script runs on the same server to
//! show which of these it got wrong.

use std::path::PathBuf;

use crate::common::*;

fn acquire_raw(con: &mut Connection, key: &str, token: &[u8], requests: &[&[u8]]) -> bool {
    let reply: Option<(Vec<u8>, i64)> = cmd("PATHLOCK.ACQUIRE")
        .arg(key)
        .arg("TOKEN")
        .arg(token)
        .arg(requests)
        .query(con)
        .expect("ACQUIRE");
    reply.is_some()
}

#[test]
fn siblings_that_share_a_prefix_are_unrelated() {
    let server = Server::start();
    let mut con = server.conn();
    for (first, second) in [
        ("/A/C", "/A/CD"),
        ("/p/f1", "/p/f10"),
        ("/a", "/ab"),
        ("/x", "/x-y"),
    ] {
        assert!(take(&mut con, "p", "one", &["WRITE", first]));
        assert!(
            take(&mut con, "p", "two", &["WRITE", second]),
            "{first} vs {second}"
        );
        assert!(!take(
            &mut con,
            "p",
            "two",
            &["WRITE", &format!("{first}/child")]
        ));
        release(&mut con, "p", "one", &[]);
        release(&mut con, "p", "two", &[]);
    }
}

#[test]
fn every_byte_but_the_separator_is_ordinary() {
    let server = Server::start();
    let mut con = server.conn();
    let names = [
        "/a-b",
        "/100%",
        "/50%",
        "/a.b",
        "/[x]",
        "/*",
        "/with space",
        "/^$()+?",
        "/数据/文件.txt",
        "/emoji 😀",
        "/...",
        "/.hidden",
    ];
    for name in names {
        assert!(take(&mut con, "p", "owner", &["WRITE", name]), "{name}");
        assert!(
            !take(&mut con, "p", "other", &["READ", &format!("{name}/c")]),
            "{name}"
        );
        assert!(
            take(&mut con, "p", "other", &["WRITE", &format!("{name}x")]),
            "{name}"
        );
        assert_eq!(release(&mut con, "p", "owner", &[name]), 1, "{name}");
        release(&mut con, "p", "other", &[]);
    }
}

#[test]
fn arbitrary_bytes_are_binary_safe() {
    let server = Server::start();
    let mut con = server.conn();
    let folder: &[u8] = b"/\x00\xff\x01/\xc3(";
    assert!(acquire_raw(
        &mut con,
        "p",
        b"\x00tok\xff",
        &[b"WRITE", folder]
    ));
    let child = [folder, b"/\x02"].concat();
    assert!(!acquire_raw(&mut con, "p", b"other", &[b"READ", &child]));
    let sibling = [folder, b"\x00"].concat();
    assert!(acquire_raw(&mut con, "p", b"other", &[b"READ", &sibling]));
    let freed: i64 = cmd("PATHLOCK.RELEASE")
        .arg("p")
        .arg(&b"\x00tok\xff"[..])
        .arg(folder)
        .query(&mut con)
        .expect("RELEASE");
    assert_eq!(freed, 1);
    assert!(acquire_raw(&mut con, "p", b"other", &[b"READ", &child]));
}

#[test]
fn equivalent_spellings_name_one_path() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "p", "me", &["WRITE", "/A//C/"]));
    for spelling in ["A/C", "/A/./C", "/A/C/", "//A///C"] {
        assert!(
            !take(&mut con, "p", "you", &["READ", spelling]),
            "{spelling}"
        );
    }
    assert!(!take(&mut con, "p", "you", &["READ", "./A/C/./d"]));
    assert_eq!(release(&mut con, "p", "me", &["A/./C"]), 1);
    assert!(take(&mut con, "p", "you", &["READ", "/A/C"]));
}

#[test]
fn the_root_covers_the_whole_project() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "p", "all", &["WRITE", ""]));
    assert!(!take(&mut con, "p", "x", &["READ", "/any/thing"]));
    assert!(!take(&mut con, "p", "x", &["READ", "/"]));
    assert_eq!(release(&mut con, "p", "all", &["/"]), 1);
    assert!(take(&mut con, "p", "reader", &["READ", "/"]));
    assert!(take(&mut con, "p", "x", &["READ", "/a/b"]), "readers share");
    assert!(
        !take(&mut con, "p", "x", &["WRITE", "/a/b"]),
        "a root READ blocks writers"
    );
    assert!(!take(&mut con, "p", "y", &["WRITE", "."]));
}

/// The users' old scripts, kept in `bench/seed` so that no test reads outside the checkout.
fn seed_dir() -> PathBuf {
    std::env::var_os("PATHLOCK_SEED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/seed"))
}

/// The old script: 1 granted, 0 refused, or the error it raised.
fn lua_acquire(con: &mut Connection, script: &str, path: &str, owner: &str) -> Result<i64, String> {
    cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg(path)
        .arg("cs:lockedHashKey42")
        .arg(owner)
        .arg(60)
        .arg(1_700_000_000_000u64)
        .query(con)
        .map_err(|e| e.to_string())
}

#[test]
fn the_old_script_confuses_what_the_module_gets_right() {
    let script_path = seed_dir().join("getFileLock.lua");
    let script = std::fs::read_to_string(&script_path)
        .unwrap_or_else(|e| panic!("the old script at {}: {e}", script_path.display()));
    let server = Server::start();
    let mut con = server.conn();

    // Siblings: the script takes /A/C for an ancestor of /A/CD.
    assert_eq!(lua_acquire(&mut con, &script, "/A/C", "u1"), Ok(1));
    assert_eq!(
        lua_acquire(&mut con, &script, "/A/CD", "u2"),
        Ok(0),
        "script refuses a sibling"
    );
    assert!(take(&mut con, "p", "u1", &["WRITE", "/A/C"]));
    assert!(
        take(&mut con, "p", "u2", &["WRITE", "/A/CD"]),
        "module grants the sibling"
    );

    // `-` is a Lua pattern quantifier: the script misses that /a-b/c is inside /a-b and hands
    // both to different users at once.
    assert_eq!(lua_acquire(&mut con, &script, "/a-b", "u1"), Ok(1));
    assert_eq!(
        lua_acquire(&mut con, &script, "/a-b/c", "u2"),
        Ok(1),
        "script grants a conflict"
    );
    assert!(take(&mut con, "p", "u1", &["WRITE", "/a-b"]));
    assert!(
        !take(&mut con, "p", "u2", &["WRITE", "/a-b/c"]),
        "module refuses it"
    );

    // A trailing `%` is a malformed Lua pattern: once folder /50% is locked, an upload into it
    // is not refused but crashes the script with an error.
    assert_eq!(lua_acquire(&mut con, &script, "/50%", "u1"), Ok(1));
    let broken = lua_acquire(&mut con, &script, "/50%/f.txt", "u2");
    assert!(
        broken
            .as_ref()
            .is_err_and(|e| e.contains("malformed pattern")),
        "script should fail, got {broken:?}"
    );
    assert!(take(&mut con, "p", "u1", &["WRITE", "/50%"]));
    assert!(
        !take(&mut con, "p", "u2", &["WRITE", "/50%/f.txt"]),
        "module refuses it"
    );
}
