//! Notes (`ACQUIRE ... NOTE note`): kept with the locks a call grants, shown as the sixth element
//! of every `LOCKS` and `CHECK` entry, binary safe, bounded by `pathlock.max-note-bytes`,
//! replaced by a re-acquire that gives one and kept by one that does not, carried by a waiter
//! to its grant, replicated, persisted (RDB, AOF rewrite, old RDBs without notes) and digested.

use std::time::Duration;

use crate::common::*;

/// The notes the tests send: control bytes, a NUL, U+0100, CR/LF, and plain text.
const BINARY: &[u8] = b"move \x00\x01 \xc4\x80 \r\n by Alice";

/// `(path, mode, token, note)` of every entry of a `LOCKS` or `CHECK` reply.
type Noted = (Vec<u8>, String, Vec<u8>, Option<Vec<u8>>);

fn noted(entries: Vec<LockEntry>) -> Vec<Noted> {
    entries
        .into_iter()
        .map(|(path, mode, token, _, _, note)| (path, mode, token, note))
        .collect()
}

fn locks(con: &mut Connection, key: &str, args: &[&[u8]]) -> Vec<Noted> {
    noted(
        cmd("PATHLOCK.LOCKS")
            .arg(key)
            .arg(args)
            .query(con)
            .expect("LOCKS"),
    )
}

fn check(con: &mut Connection, key: &str, args: &[&str]) -> Vec<Noted> {
    noted(
        cmd("PATHLOCK.CHECK")
            .arg(key)
            .arg(args)
            .query(con)
            .expect("CHECK"),
    )
}

/// `ACQUIRE key TOKEN token [NOTE note] requests...`: whether it was granted.
fn take_noted(
    con: &mut Connection,
    key: &str,
    token: &str,
    note: &[u8],
    requests: &[&str],
) -> bool {
    let granted: Option<(String, i64)> = cmd("PATHLOCK.ACQUIRE")
        .arg(&[key, "TOKEN", token, "NOTE"])
        .arg(note)
        .arg(requests)
        .query(con)
        .expect("ACQUIRE NOTE");
    granted.is_some()
}

fn entry(path: &str, mode: &str, token: &str, note: Option<&[u8]>) -> Noted {
    (
        path.as_bytes().to_vec(),
        mode.to_string(),
        token.as_bytes().to_vec(),
        note.map(<[u8]>::to_vec),
    )
}

#[test]
fn a_note_is_kept_with_the_locks_it_came_with_and_shown_by_locks_and_check() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take_noted(
        &mut con,
        "p",
        "alice",
        BINARY,
        &["TTL", "60000", "WRITE", "/A/C", "WRITE", "/B/C"]
    ));
    assert!(take(&mut con, "p", "bob", &["READ", "/D"]));
    assert_eq!(
        locks(&mut con, "p", &[]),
        [
            entry("/A/C", "WRITE", "alice", Some(BINARY)),
            entry("/B/C", "WRITE", "alice", Some(BINARY)),
            entry("/D", "READ", "bob", None),
        ]
    );
    // The reply's sixth element is a bulk string, or nil when there is no note.
    let raw: Vec<Vec<Value>> = cmd("PATHLOCK.LOCKS")
        .arg(&["p", "/"])
        .query(&mut con)
        .expect("LOCKS");
    assert!(raw.iter().all(|e| e.len() == 6), "{raw:?}");
    assert_eq!(raw[0][5], Value::BulkString(BINARY.to_vec()));
    assert_eq!(raw[2][5], Value::Nil);
    // CHECK shows the blockers with their notes: what an application tells its user.
    assert_eq!(
        check(&mut con, "p", &["WRITE", "/A/C/D/new.txt"]),
        [entry("/A/C", "WRITE", "alice", Some(BINARY))]
    );
    assert_eq!(
        check(&mut con, "p", &["WRITE", "/"]),
        [
            entry("/A/C", "WRITE", "alice", Some(BINARY)),
            entry("/B/C", "WRITE", "alice", Some(BINARY)),
            entry("/D", "READ", "bob", None),
        ]
    );
}

#[test]
fn a_reacquire_with_a_note_replaces_it_and_one_without_keeps_it() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take_noted(&mut con, "p", "t", b"first", &["WRITE", "/A"]));
    // Without NOTE: the re-granted lock keeps its note, a new one has none.
    assert!(take(&mut con, "p", "t", &["WRITE", "/A", "WRITE", "/B"]));
    assert_eq!(
        locks(&mut con, "p", &[]),
        [
            entry("/A", "WRITE", "t", Some(b"first")),
            entry("/B", "WRITE", "t", None),
        ]
    );
    // With NOTE: every lock the call grants takes it; the others keep theirs.
    assert!(take_noted(
        &mut con,
        "p",
        "t",
        b"second",
        &["WRITE", "/B", "READ", "/C"]
    ));
    assert_eq!(
        locks(&mut con, "p", &[]),
        [
            entry("/A", "WRITE", "t", Some(b"first")),
            entry("/B", "WRITE", "t", Some(b"second")),
            entry("/C", "READ", "t", Some(b"second")),
        ]
    );
    // An empty note takes the note away.
    assert!(take_noted(&mut con, "p", "t", b"", &["WRITE", "/A"]));
    assert_eq!(
        locks(&mut con, "p", &[b"/A"]),
        [entry("/A", "WRITE", "t", None)]
    );
    // A released lock's note goes with it: taken again without one, it has none.
    assert_eq!(release(&mut con, "p", "t", &["/B"]), 1);
    assert!(take(&mut con, "p", "t", &["WRITE", "/B"]));
    assert_eq!(
        locks(&mut con, "p", &[b"/B"]),
        [entry("/B", "WRITE", "t", None)]
    );
}

#[test]
fn a_note_is_bounded_by_the_config_and_errors_escape_what_the_client_sent() {
    let server = Server::start();
    let mut con = server.conn();
    let at_limit = vec![b'x'; 256];
    assert!(take_noted(&mut con, "p", "t", &at_limit, &["WRITE", "/A"]));
    let over = vec![0xc4u8; 257];
    let error = error_from(
        &mut con,
        &[b"PATHLOCK.ACQUIRE", b"p", b"NOTE", &over, b"WRITE", b"/B"],
    );
    assert_eq!(
        error,
        "ERR NOTE too long: 257 bytes, at most 256 (pathlock.max-note-bytes)"
    );
    let _: () = cmd("CONFIG")
        .arg(&["SET", "pathlock.max-note-bytes", "4"])
        .query(&mut con)
        .expect("CONFIG SET");
    let error = error_from(
        &mut con,
        &[
            b"PATHLOCK.ACQUIRE",
            b"p",
            b"NOTE",
            b"12345",
            b"WRITE",
            b"/B",
        ],
    );
    assert!(
        error.contains("at most 4 (pathlock.max-note-bytes)"),
        "{error}"
    );
    assert!(take_noted(&mut con, "p", "u", b"1234", &["WRITE", "/B"]));
    let limit: Vec<String> = cmd("CONFIG")
        .arg(&["GET", "pathlock.max-note-bytes"])
        .query(&mut con)
        .expect("CONFIG GET");
    assert_eq!(limit, ["pathlock.max-note-bytes", "4"]);
    // Nothing refused was granted.
    assert_eq!(lock_set(&mut con, "p").len(), 2);
    for (args, expected) in [
        (
            &[&b"PATHLOCK.ACQUIRE"[..], b"p", b"NOTE", b"a", b"NOTE", b"b", b"WRITE", b"/C"][..],
            "ERR NOTE given more than once".to_string(),
        ),
        (
            &[b"PATHLOCK.ACQUIRE", b"p", b"NOTE"],
            "ERR wrong number of arguments for 'PATHLOCK.ACQUIRE' command".to_string(),
        ),
        (
            &[b"PATHLOCK.ACQUIRE", b"p", b"TTL", b"100", b"NOTE"],
            "ERR NOTE needs a value".to_string(),
        ),
        (
            &[b"PATHLOCK.ACQUIRE", b"p", b"NOTES\x00\r\n\xc4\x80", b"n", b"WRITE", b"/C"],
            "ERR unknown option or mode 'NOTES\\x00\\r\\n\\xc4\\x80': expected TOKEN, TTL, WAIT, NOTE, READ or WRITE"
                .to_string(),
        ),
    ] {
        let error = error_from(&mut con, args);
        assert!(
            error.eq_ignore_ascii_case(&expected),
            "{args:?}: {error}, expected {expected}"
        );
    }
}

#[test]
fn a_waiter_keeps_its_note_and_its_grant_carries_it_to_the_replica() {
    let (master, _replica, mut con, mut on_replica) = master_and_replica();
    assert!(take_noted(
        &mut con,
        "p",
        "holder",
        b"holding",
        &["WRITE", "/A"]
    ));
    let port = master.port;
    let waiter = std::thread::spawn(move || {
        let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .and_then(|c| c.get_connection())
            .expect("a connection");
        let granted: Option<(String, i64)> = cmd("PATHLOCK.ACQUIRE")
            .arg(&["p", "TOKEN", "waiter", "WAIT", "10000", "NOTE"])
            .arg(BINARY)
            .arg(&["WRITE", "/A/x"])
            .query(&mut con)
            .expect("ACQUIRE WAIT");
        granted
    });
    wait_until(Duration::from_secs(10), "the waiter to queue", || {
        info_number(&mut con, "pathlock", "pathlock_clients_waiting") == 1
    });
    let waiting: Vec<Value> = cmd("PATHLOCK.WAITERS")
        .arg("p")
        .query(&mut con)
        .expect("WAITERS");
    let Some(Value::Array(first)) = waiting.first() else {
        panic!("one waiter expected: {waiting:?}");
    };
    assert_eq!(first[4], Value::BulkString(BINARY.to_vec()));
    assert_eq!(release(&mut con, "p", "holder", &[]), 1);
    let granted = waiter.join().expect("the waiter's thread");
    assert_eq!(granted.map(|g| g.0), Some("waiter".to_string()));
    let expected = [entry("/A/x", "WRITE", "waiter", Some(BINARY))];
    assert_eq!(locks(&mut con, "p", &[]), expected);
    let acked: i64 = cmd("WAIT").arg(1).arg(5000).query(&mut con).expect("WAIT");
    assert_eq!(acked, 1);
    assert_eq!(locks(&mut on_replica, "p", &[]), expected);
    assert_eq!(digest_of(&mut on_replica, "p"), digest_of(&mut con, "p"));
}

#[test]
fn notes_replicate_and_digests_cover_them() {
    let (_master, _replica, mut con, mut on_replica) = master_and_replica();
    assert!(take_noted(
        &mut con,
        "p",
        "a",
        BINARY,
        &["WRITE", "/A", "READ", "/B"]
    ));
    assert!(take_noted(&mut con, "p", "a", b"other", &["READ", "/B"]));
    assert!(take(&mut con, "p", "a", &["WRITE", "/A"]));
    assert!(take_noted(&mut con, "p", "b", b"", &["READ", "/B"]));
    assert!(take(&mut con, "q", "c", &["WRITE", "/A"]));
    let acked: i64 = cmd("WAIT").arg(1).arg(5000).query(&mut con).expect("WAIT");
    assert_eq!(acked, 1);
    let expected = [
        entry("/A", "WRITE", "a", Some(BINARY)),
        entry("/B", "READ", "a", Some(b"other")),
        entry("/B", "READ", "b", None),
    ];
    assert_eq!(locks(&mut con, "p", &[]), expected);
    assert_eq!(locks(&mut on_replica, "p", &[]), expected);
    for key in ["p", "q"] {
        assert_eq!(digest_of(&mut on_replica, key), digest_of(&mut con, key));
    }
    // The digest covers the note: the same value with one note's bytes changed (a DUMP patched
    // in place, restored without its checksum checked) digests differently, and the value
    // restored as it was digests the same.
    let dump: Vec<u8> = cmd("DUMP").arg("p").query(&mut con).expect("DUMP");
    let at = dump
        .windows(5)
        .position(|w| w == b"other")
        .expect("the note in the dump");
    let mut patched = dump.clone();
    patched[at..at + 5].copy_from_slice(b"OTHER");
    let _: () = cmd("DEBUG")
        .arg(&["SET-SKIP-CHECKSUM-VALIDATION", "1"])
        .query(&mut con)
        .expect("DEBUG SET-SKIP-CHECKSUM-VALIDATION");
    for (key, payload) in [("same", &dump), ("patched", &patched)] {
        let _: () = cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(payload)
            .query(&mut con)
            .expect("RESTORE");
    }
    assert_eq!(
        locks(&mut con, "patched", &[b"/B"])[0],
        entry("/B", "READ", "a", Some(b"OTHER"))
    );
    assert_eq!(digest_of(&mut con, "same"), digest_of(&mut con, "p"));
    assert_ne!(digest_of(&mut con, "patched"), digest_of(&mut con, "p"));
    // COPY carries the notes too, and the copy and the original change apart.
    let copied: i64 = cmd("COPY").arg(&["p", "c"]).query(&mut con).expect("COPY");
    assert_eq!(copied, 1);
    assert_eq!(locks(&mut con, "c", &[]), expected);
    assert!(take_noted(&mut con, "c", "a", b"copy's", &["READ", "/B"]));
    assert_eq!(locks(&mut con, "p", &[]), expected);
    assert_eq!(
        locks(&mut con, "c", &[b"/B"])[0],
        entry("/B", "READ", "a", Some(b"copy's"))
    );
}

#[test]
fn notes_survive_rdb_reload_restart_and_aof_rewrite() {
    for preamble in ["yes", "no"] {
        let mut server = Server::start_with(&aof_always(preamble));
        let mut con = server.conn();
        assert!(take_noted(
            &mut con,
            "p",
            "a",
            BINARY,
            &["TTL", "600000", "WRITE", "/A"]
        ));
        assert!(take(&mut con, "p", "b", &["TTL", "600000", "READ", "/B"]));
        assert!(take_noted(
            &mut con,
            "p",
            "c",
            b"c's",
            &["TTL", "600000", "READ", "/B"]
        ));
        let expected = locks(&mut con, "p", &[]);
        assert_eq!(expected.len(), 3);
        let digest = digest_of(&mut con, "p");
        let _: String = cmd("BGREWRITEAOF").query(&mut con).expect("BGREWRITEAOF");
        wait_until(Duration::from_secs(20), "the AOF rewrite", || {
            info_number(&mut con, "persistence", "aof_rewrite_in_progress") == 0
                && info_number(&mut con, "persistence", "aof_rewrite_scheduled") == 0
        });
        // After the rewrite, one more noted grant goes to the AOF as an effect.
        assert!(take_noted(
            &mut con,
            "p",
            "d",
            b"after",
            &["TTL", "600000", "WRITE", "/D"]
        ));
        let expected_after = locks(&mut con, "p", &[]);
        let digest_after = digest_of(&mut con, "p");
        server.crash_and_restart();
        let mut con = server.conn();
        assert_eq!(
            locks(&mut con, "p", &[]),
            expected_after,
            "preamble {preamble}: {}",
            server.log()
        );
        assert_eq!(digest_of(&mut con, "p"), digest_after);
        assert_ne!(digest_after, digest);
        assert_eq!(&expected_after[..2], &expected[..2]);
        // And an RDB: DEBUG RELOAD saves and loads one.
        let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).expect("RELOAD");
        assert_eq!(locks(&mut con, "p", &[]), expected_after);
        assert_eq!(digest_of(&mut con, "p"), digest_after);
    }
}

/// A `DUMP` of a project taken from the module before notes (commit 07de5a7, encoding version
/// 1), on Redis 7.0 (RDB version 10, which every supported server restores): `alice` holds
/// `WRITE /A/C` and `WRITE /B/C`, `bob` holds `READ /A/D` and `READ /x y/\u{100}`, all with a
/// ten-year lease (until 2036-11).
const VERSION_1_DUMP: &str = "0781a5ab61fa5a1c900102810006610fe97a0a4a020405044100430002000505616c6963650281000001eb7d4841bd02810006610fe97a0a4805044100440002010503626f620281000001eb7d4841cc02810006610fe97a0a4905044200430002000505616c6963650281000001eb7d4841bd02810006610fe97a0a48050778207900c4800002010503626f620281000001eb7d4841cc02810006610fe97a0a49000a001e13ae7523712cb4";

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn a_value_of_encoding_version_1_still_loads_without_notes() {
    let payload = unhex(VERSION_1_DUMP);
    let module_id = u64::from_be_bytes(payload[2..10].try_into().expect("8 bytes"));
    assert_eq!(module_id & 0x3ff, 1, "the dump is of encoding version 1");
    let server = Server::start();
    let mut con = server.conn();
    let _: () = cmd("RESTORE")
        .arg("old")
        .arg(0)
        .arg(&payload)
        .query(&mut con)
        .expect("RESTORE of a version 1 value");
    assert_eq!(
        locks(&mut con, "old", &[]),
        [
            entry("/A/C", "WRITE", "alice", None),
            entry("/A/D", "READ", "bob", None),
            entry("/B/C", "WRITE", "alice", None),
            entry("/x y/\u{100}", "READ", "bob", None),
        ]
    );
    // It saves in today's encoding and loads back, now with a note among its locks.
    assert!(take_noted(
        &mut con,
        "old",
        "alice",
        b"renamed",
        &["WRITE", "/A/C"]
    ));
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).expect("RELOAD");
    let dump: Vec<u8> = cmd("DUMP").arg("old").query(&mut con).expect("DUMP");
    let module_id = u64::from_be_bytes(dump[2..10].try_into().expect("8 bytes"));
    assert_eq!(
        module_id & 0x3ff,
        u64::from(pathlock_core::persist::VERSION)
    );
    assert_eq!(
        locks(&mut con, "old", &[b"/A/C"]),
        [entry("/A/C", "WRITE", "alice", Some(b"renamed"))]
    );
    assert_eq!(lock_set(&mut con, "old").len(), 4);
}
