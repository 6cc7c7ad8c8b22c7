//! ACQUIRE, RELEASE and RENEW against a real redis-server: replies, tokens, fences, leases,
//! atomicity, configs and every bad input.

use std::thread::sleep;
use std::time::Duration;

use crate::common::*;

#[test]
fn acquire_generates_a_uuid_token_and_counts_fences_up_by_one() {
    let server = Server::start();
    let mut con = server.conn();
    let (token, first) = acquire(&mut con, "proj:1", &["WRITE", "/A/C"]).expect("granted");
    assert!((1..1 << 53).contains(&first), "{first}");
    assert_eq!(token.len(), 36);
    assert_eq!(token.as_bytes()[14], b'4', "UUID version 4: {token}");
    assert!(token
        .chars()
        .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)));
    let (other, fence) = acquire(&mut con, "proj:1", &["WRITE", "/B"]).expect("granted");
    assert_ne!(other, token);
    assert_eq!(fence, first + 1);
    let kind: String = cmd("TYPE").arg("proj:1").query(&mut con).expect("TYPE");
    assert_eq!(kind, "path-lock");
}

#[test]
fn a_given_token_is_echoed_and_owns_the_lock() {
    let server = Server::start();
    let mut con = server.conn();
    let reply = acquire(
        &mut con,
        "p",
        &["TOKEN", "alice", "TTL", "10000", "WRITE", "/A"],
    );
    assert_eq!(reply.map(|(token, _)| token), Some("alice".to_string()));
    assert!(!take(&mut con, "p", "bob", &["READ", "/A/x"]));
    assert_eq!(
        release(&mut con, "p", "bob", &[]),
        0,
        "wrong token frees nothing"
    );
    assert!(!take(&mut con, "p", "bob", &["READ", "/A/x"]));
    assert_eq!(release(&mut con, "p", "alice", &[]), 1);
    assert!(take(&mut con, "p", "bob", &["READ", "/A/x"]));
}

#[test]
fn fences_count_successful_calls_only_and_never_go_back() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, first) = acquire(&mut con, "p", &["TOKEN", "a", "WRITE", "/A", "WRITE", "/B"])
        .expect("one call, many paths, one fence");
    assert_eq!(
        acquire(&mut con, "p", &["TOKEN", "b", "WRITE", "/A/x"]),
        None
    );
    assert_eq!(
        acquire(&mut con, "p", &["TOKEN", "b", "WRITE", "/C"]),
        Some(("b".into(), first + 1))
    );
    assert_eq!(release(&mut con, "p", "a", &[]), 2);
    assert_eq!(release(&mut con, "p", "b", &[]), 1);
    // The key goes with its last lock, and its fences do not start over.
    let exists: i64 = cmd("EXISTS").arg("p").query(&mut con).expect("EXISTS");
    assert_eq!(exists, 0);
    let (_, after) = acquire(&mut con, "p", &["TOKEN", "c", "WRITE", "/A"]).expect("granted");
    assert!(after > first + 1, "{after} after {}", first + 1);
    // Nor does deleting the key: fences for a key name never go back.
    let _: i64 = cmd("DEL").arg("p").query(&mut con).expect("DEL");
    let (_, again) = acquire(&mut con, "p", &["TOKEN", "c", "WRITE", "/A"]).expect("granted");
    assert!(again > after, "{again} after {after}");
    // Each key has its own counter, which starts above every fence the server has given.
    let (_, other) = acquire(&mut con, "q", &["TOKEN", "c", "WRITE", "/A"]).expect("granted");
    assert!(other > again, "{other} after {again}");
}

#[test]
fn a_refused_request_changes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "p", "holder", &["WRITE", "/B/x"]));
    // Moving /A into /B is refused as a whole because /B/x is held...
    assert!(!take(
        &mut con,
        "p",
        "mover",
        &["WRITE", "/A", "WRITE", "/B"]
    ));
    // ...so /A was not taken, and the mover holds nothing.
    assert!(take(&mut con, "p", "third", &["WRITE", "/A"]));
    assert_eq!(release(&mut con, "p", "mover", &[]), 0);
}

#[test]
fn reacquiring_is_idempotent_and_takes_a_new_fence() {
    let server = Server::start();
    let mut con = server.conn();
    let args = ["TOKEN", "t", "TTL", "300", "WRITE", "/A"];
    let (_, first) = acquire(&mut con, "p", &args).expect("granted");
    sleep(Duration::from_millis(200));
    // The retry refreshes the lease: 300 ms from now, not from the first grant.
    let longer = ["TOKEN", "t", "TTL", "2000", "WRITE", "/A"];
    assert_eq!(
        acquire(&mut con, "p", &longer),
        Some(("t".into(), first + 1))
    );
    sleep(Duration::from_millis(300));
    assert!(
        !take(&mut con, "p", "other", &["READ", "/A"]),
        "lease was refreshed"
    );
    assert_eq!(
        release(&mut con, "p", "t", &["/A"]),
        1,
        "one release frees it"
    );
    assert!(take(&mut con, "p", "other", &["READ", "/A"]));
}

#[test]
fn release_by_path_frees_every_mode_held_there() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(
        &mut con,
        "p",
        "me",
        &["READ", "/A", "WRITE", "/A/x", "WRITE", "/B"]
    ));
    assert!(
        take(&mut con, "p", "me", &["WRITE", "/A"]),
        "the classic SIX case"
    );
    assert_eq!(
        release(&mut con, "p", "me", &["/A/"]),
        2,
        "READ and WRITE on /A"
    );
    assert_eq!(release(&mut con, "p", "me", &["/A"]), 0);
    assert!(
        !take(&mut con, "p", "you", &["READ", "/A"]),
        "/A/x is still held"
    );
    assert_eq!(release(&mut con, "p", "me", &["A/x", "/nothing"]), 1);
    assert_eq!(release(&mut con, "p", "me", &[]), 1);
    assert_eq!(release(&mut con, "p", "me", &[]), 0);
    assert!(take(&mut con, "p", "you", &["WRITE", "/"]));
}

#[test]
fn leases_expire_and_expired_locks_cannot_be_released_or_renewed() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "p", "short", &["TTL", "100", "WRITE", "/A"]));
    assert!(!take(&mut con, "p", "other", &["WRITE", "/A"]));
    sleep(Duration::from_millis(250));
    assert_eq!(
        renew(&mut con, "p", "short", 10_000),
        0,
        "the lease is gone"
    );
    assert_eq!(release(&mut con, "p", "short", &[]), 0);
    assert!(take(&mut con, "p", "other", &["WRITE", "/A"]));
}

#[test]
fn renew_extends_every_live_lock_of_the_token() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(
        &mut con,
        "p",
        "me",
        &["TTL", "300", "WRITE", "/A", "READ", "/B"]
    ));
    assert!(take(&mut con, "p", "you", &["TTL", "300", "WRITE", "/C"]));
    assert_eq!(renew(&mut con, "p", "me", 5_000), 2);
    assert_eq!(renew(&mut con, "p", "nobody", 5_000), 0);
    sleep(Duration::from_millis(450));
    assert!(!take(&mut con, "p", "x", &["READ", "/A"]), "renewed");
    assert!(!take(&mut con, "p", "x", &["WRITE", "/B"]), "renewed");
    assert!(
        take(&mut con, "p", "x", &["WRITE", "/C"]),
        "not renewed, expired"
    );
    // Renew can also shorten a lease.
    assert_eq!(renew(&mut con, "p", "me", 1), 2);
    sleep(Duration::from_millis(20));
    assert!(take(&mut con, "p", "x", &["WRITE", "/A"]));
}

#[test]
fn the_default_ttl_comes_from_the_config() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = cmd("CONFIG")
        .arg(&["SET", "pathlock.default-ttl", "100"])
        .query(&mut con)
        .expect("CONFIG SET");
    assert!(take(&mut con, "p", "me", &["WRITE", "/A"]));
    sleep(Duration::from_millis(250));
    assert!(take(&mut con, "p", "you", &["WRITE", "/A"]));
}

#[test]
fn missing_keys_hold_nothing_and_are_not_created() {
    let server = Server::start();
    let mut con = server.conn();
    assert_eq!(release(&mut con, "nope", "t", &[]), 0);
    assert_eq!(renew(&mut con, "nope", "t", 100), 0);
    let exists: i64 = cmd("EXISTS").arg("nope").query(&mut con).expect("EXISTS");
    assert_eq!(exists, 0);
}

#[test]
fn other_types_answer_wrongtype() {
    let server = Server::start();
    let mut con = server.conn();
    let _: () = cmd("SET").arg("s").arg("1").query(&mut con).expect("SET");
    assert_refused(
        &mut con,
        "WRONGTYPE",
        &[
            &[b"PATHLOCK.ACQUIRE", b"s", b"WRITE", b"/A"],
            &[b"PATHLOCK.RELEASE", b"s", b"t"],
            &[b"PATHLOCK.RENEW", b"s", b"t", b"100"],
        ],
    );
    let value: String = cmd("GET").arg("s").query(&mut con).expect("GET");
    assert_eq!(value, "1");
}

#[test]
fn keywords_are_case_insensitive_and_options_come_in_any_order() {
    let server = Server::start();
    let mut con = server.conn();
    let reply = acquire(
        &mut con,
        "p",
        &["ttl", "5000", "token", "t", "write", "/A", "rEaD", "/B"],
    );
    assert_eq!(reply.map(|(token, _)| token), Some("t".into()));
    assert!(!take(&mut con, "p", "u", &["WRITE", "/B"]));
    let reply: i64 = cmd("pathlock.release")
        .arg("p")
        .arg("t")
        .query(&mut con)
        .expect("release");
    assert_eq!(reply, 2);
}

/// Every bad input named in `docs/commands.md` (Errors), and a few more, is an error that names the problem.
#[test]
fn bad_input_is_refused_with_a_clear_error() {
    let server = Server::start();
    let mut con = server.conn();
    let long_path = format!("/{}", "a".repeat(4096));
    let deep_path = "/d".repeat(257);
    let many: Vec<&[u8]> = std::iter::repeat_n([&b"READ"[..], b"/x"], 65)
        .flatten()
        .collect();
    let long_token = vec![b't'; 129];
    let cases: Vec<(Vec<&[u8]>, &str)> = vec![
        (
            vec![b"TTL", b"0", b"WRITE", b"/A"],
            "ERR invalid TTL: must be an integer from 1 to 86400000",
        ),
        (vec![b"TTL", b"-5", b"WRITE", b"/A"], "ERR invalid TTL"),
        (vec![b"TTL", b"1.5", b"WRITE", b"/A"], "ERR invalid TTL"),
        (
            vec![b"TTL", b"86400001", b"WRITE", b"/A"],
            "ERR invalid TTL",
        ),
        (
            vec![b"TTL", b"99999999999999999999", b"WRITE", b"/A"],
            "ERR invalid TTL",
        ),
        (
            vec![b"TTL", b"10", b"TTL", b"10", b"WRITE", b"/A"],
            "ERR TTL given more than once",
        ),
        (
            vec![b"TOKEN", b"a", b"TOKEN", b"b", b"WRITE", b"/A"],
            "ERR TOKEN given more than once",
        ),
        (
            vec![b"WRITE", b"/A", b"TTL"],
            "ERR invalid mode 'TTL': must be READ or WRITE",
        ),
        (
            vec![b"TOKEN", b"", b"WRITE", b"/A"],
            "ERR invalid token: must be 1 to 128 bytes",
        ),
        (
            vec![b"TOKEN", &long_token, b"WRITE", b"/A"],
            "ERR invalid token",
        ),
        (
            vec![b"WAIT", b"-1", b"WRITE", b"/A"],
            "ERR invalid WAIT: must be an integer from 0 to 86400000",
        ),
        (vec![b"WAIT", b"soon", b"WRITE", b"/A"], "ERR invalid WAIT"),
        (
            vec![b"WAIT", b"86400001", b"WRITE", b"/A"],
            "ERR invalid WAIT",
        ),
        (
            vec![b"WAIT", b"1", b"WAIT", b"1", b"WRITE", b"/A"],
            "ERR WAIT given more than once",
        ),
        (
            vec![b"SHARED", b"/A"],
            "ERR unknown option or mode 'SHARED'",
        ),
        (
            vec![b"WRITE", b"/A", b"WRITE"],
            "ERR missing path after mode",
        ),
        (
            vec![b"WRITE", b"/A", b"EXCLUSIVE", b"/B"],
            "ERR invalid mode 'EXCLUSIVE'",
        ),
        (
            vec![b"WRITE", b"/A/../B"],
            "ERR invalid path: '..' segments are not allowed",
        ),
        (vec![b"WRITE", b".."], "ERR invalid path"),
        (
            vec![b"WRITE", long_path.as_bytes()],
            "ERR path too long: at most 4096 bytes",
        ),
        (
            vec![b"WRITE", deep_path.as_bytes()],
            "ERR path too deep: at most 256 segments",
        ),
        (many, "ERR too many paths: at most 64 per call"),
        (vec![b"TTL", b"100", b"TOKEN"], "ERR TOKEN needs a value"),
        (vec![b"TOKEN", b"t", b"TTL", b"5"], "ERR no lock requested"),
    ];
    for (args, expected) in cases {
        let mut full: Vec<&[u8]> = vec![b"PATHLOCK.ACQUIRE", b"p"];
        full.extend(args.iter().copied());
        let error = error_from(&mut con, &full);
        assert!(
            error.starts_with(expected),
            "{args:?}: got {error:?}, expected {expected:?}"
        );
    }
    let mut release_many: Vec<&[u8]> = vec![b"PATHLOCK.RELEASE", b"p", b"t"];
    release_many.extend(std::iter::repeat_n(&b"/x"[..], 65));
    let cases: Vec<(Vec<&[u8]>, &str)> = vec![
        (release_many, "ERR too many paths: at most 64 per call"),
        (
            vec![b"PATHLOCK.RENEW", b"p", b"t", b"86400001"],
            "ERR invalid TTL: must be an integer from 1 to 86400000",
        ),
        (
            vec![b"PATHLOCK.LOCKS", b"p", long_path.as_bytes()],
            "ERR path too long",
        ),
        (
            vec![b"PATHLOCK.LOCKS", b"p", deep_path.as_bytes()],
            "ERR path too deep",
        ),
        (
            vec![b"PATHLOCK.CHECK", b"p", b"WRITE", long_path.as_bytes()],
            "ERR path too long",
        ),
        (
            vec![b"PATHLOCK.CHECK", b"p", b"READ", b"/a/../b"],
            "ERR invalid path",
        ),
        (vec![b"PATHLOCK.RELEASE", b"p", b""], "ERR invalid token"),
        (
            vec![b"PATHLOCK.RELEASE", b"p", b"t", b"/a/.."],
            "ERR invalid path",
        ),
        (vec![b"PATHLOCK.RENEW", b"p", b"t", b"0"], "ERR invalid TTL"),
        (
            vec![b"PATHLOCK.RENEW", b"p", b"t", b"soon"],
            "ERR invalid TTL",
        ),
        (
            vec![b"PATHLOCK.RENEW", b"p", &long_token, b"10"],
            "ERR invalid token",
        ),
        (
            vec![b"PATHLOCK.ACQUIRE", b"p", b"WRITE"],
            "ERR wrong number of arguments",
        ),
        (
            vec![b"PATHLOCK.RELEASE", b"p"],
            "ERR wrong number of arguments",
        ),
        (
            vec![b"PATHLOCK.RENEW", b"p", b"t"],
            "ERR wrong number of arguments",
        ),
        (
            vec![b"PATHLOCK.RENEW", b"p", b"t", b"1", b"2"],
            "ERR wrong number of arguments",
        ),
    ];
    for (args, expected) in cases {
        let error = error_from(&mut con, &args);
        assert!(
            error.starts_with(expected),
            "{args:?}: got {error:?}, expected {expected:?}"
        );
    }
    // No error left a key or a lock behind.
    let exists: i64 = cmd("EXISTS").arg("p").query(&mut con).expect("EXISTS");
    assert_eq!(exists, 0);
}

#[test]
fn a_bad_argument_anywhere_grants_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "p", "first", &["READ", "/keep"]));
    let error = error_of(try_acquire(
        &mut con,
        "p",
        &["TOKEN", "t", "WRITE", "/A", "WRITE", "/B/../C"],
    ));
    assert!(error.starts_with("ERR invalid path"), "{error}");
    assert!(
        take(&mut con, "p", "other", &["WRITE", "/A"]),
        "/A was not granted"
    );
    assert_eq!(release(&mut con, "p", "t", &[]), 0);
}

#[test]
fn limits_follow_the_module_configs() {
    let server = Server::start();
    let mut con = server.conn();
    for (name, value) in [
        ("pathlock.max-path-bytes", "8"),
        ("pathlock.max-depth", "2"),
        ("pathlock.max-paths-per-call", "2"),
        ("pathlock.max-ttl", "1000"),
    ] {
        let _: () = cmd("CONFIG")
            .arg(&["SET", name, value])
            .query(&mut con)
            .expect("CONFIG SET");
    }
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["WRITE", "/123456789"],
            "ERR path too long: at most 8 bytes",
        ),
        (
            vec!["WRITE", "/a/b/c"],
            "ERR path too deep: at most 2 segments",
        ),
        (
            vec!["READ", "/a", "READ", "/b", "READ", "/c"],
            "ERR too many paths: at most 2 per call",
        ),
        (
            vec!["TTL", "1001", "READ", "/a"],
            "ERR invalid TTL: must be an integer from 1 to 1000",
        ),
    ];
    for (args, expected) in cases {
        let error = error_of(try_acquire(&mut con, "p", &args));
        assert!(error.starts_with(expected), "{args:?}: {error}");
    }
    assert!(take(
        &mut con,
        "p",
        "t",
        &["TTL", "1000", "READ", "/a//b/", "READ", "/c"]
    ));
    // The default TTL (30000) is above the new max-ttl, so it is capped at 1000.
    assert!(take(&mut con, "p", "capped", &["WRITE", "/d"]));
    sleep(Duration::from_millis(1100));
    assert!(take(&mut con, "p", "next", &["WRITE", "/d"]));
    // Out-of-range configs are refused by Redis itself.
    let error = error_of(
        cmd("CONFIG")
            .arg(&["SET", "pathlock.max-depth", "0"])
            .query::<()>(&mut con),
    );
    assert!(error.contains("pathlock.max-depth"), "{error}");
}

#[test]
fn acquire_inside_multi_exec_applies_atomically() {
    let server = Server::start();
    let mut con = server.conn();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("PATHLOCK.ACQUIRE")
        .arg(&["p", "TOKEN", "a", "WRITE", "/A"])
        .cmd("PATHLOCK.ACQUIRE")
        .arg(&["p", "TOKEN", "b", "WRITE", "/A/x"])
        .cmd("PATHLOCK.RELEASE")
        .arg(&["p", "a"])
        .query(&mut con)
        .expect("EXEC");
    assert_eq!(replies.len(), 3);
    assert_eq!(replies[1], Value::Nil);
    assert_eq!(replies[2], Value::Int(1));
}
