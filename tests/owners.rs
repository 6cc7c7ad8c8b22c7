//! Who holds what and who waits: `LOCKS key [path] TOKEN token` (one owner's locks, costing
//! what it returns), `WAITERS key [path]` (the queue, in order, with times and notes), and the
//! `WRONGTYPE` error of a key that is not a project.

use std::thread::{sleep, JoinHandle};
use std::time::{Duration, Instant};

use crate::common::*;

/// `(path, mode, token)` of each entry of a LOCKS reply.
fn listed(con: &mut Connection, key: &str, args: &[&str]) -> Vec<String> {
    let entries: Vec<LockEntry> = cmd("PATHLOCK.LOCKS")
        .arg(key)
        .arg(args)
        .query(con)
        .expect("LOCKS");
    entries
        .into_iter()
        .map(|(path, mode, token, _, _, _)| {
            format!(
                "{mode} {} {}",
                String::from_utf8_lossy(&path),
                String::from_utf8_lossy(&token)
            )
        })
        .collect()
}

#[test]
fn locks_with_token_lists_only_that_owners_locks_in_tree_order() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(
        &mut con,
        "p",
        "alice",
        &["WRITE", "/B/x", "READ", "/A"]
    ));
    assert!(take(
        &mut con,
        "p",
        "alice",
        &["READ", "/A/c", "READ", "/TOKEN/f"]
    ));
    assert!(take(
        &mut con,
        "p",
        "bob",
        &["READ", "/A", "READ", "/TOKEN"]
    ));
    assert!(take(&mut con, "p", "TOKEN", &["WRITE", "/C"]));
    assert_eq!(
        listed(&mut con, "p", &["TOKEN", "alice"]),
        [
            "READ /A alice",
            "READ /A/c alice",
            "WRITE /B/x alice",
            "READ /TOKEN/f alice"
        ]
    );
    assert_eq!(
        listed(&mut con, "p", &["/A", "TOKEN", "alice"]),
        ["READ /A alice", "READ /A/c alice"]
    );
    assert_eq!(
        listed(&mut con, "p", &["/A", "token", "bob"]),
        ["READ /A bob"]
    );
    // `LOCKS key TOKEN` is the folder /TOKEN; `LOCKS key TOKEN t` the option; the folder with
    // the option is written /TOKEN (or TOKEN) before it.
    assert_eq!(
        listed(&mut con, "p", &["TOKEN"]),
        ["READ /TOKEN bob", "READ /TOKEN/f alice"]
    );
    assert_eq!(
        listed(&mut con, "p", &["TOKEN", "TOKEN"]),
        ["WRITE /C TOKEN"]
    );
    assert_eq!(
        listed(&mut con, "p", &["/TOKEN", "TOKEN", "alice"]),
        ["READ /TOKEN/f alice"]
    );
    assert_eq!(
        listed(&mut con, "p", &["TOKEN", "TOKEN", "bob"]),
        ["READ /TOKEN bob"]
    );
    // Nobody, nowhere, a missing key: empty.
    assert!(listed(&mut con, "p", &["TOKEN", "carol"]).is_empty());
    assert!(listed(&mut con, "p", &["/Z", "TOKEN", "alice"]).is_empty());
    assert!(listed(&mut con, "p", &["/A/c/d", "TOKEN", "alice"]).is_empty());
    assert!(listed(&mut con, "missing", &["TOKEN", "alice"]).is_empty());
    // Expired locks are listed nowhere.
    assert!(take(&mut con, "p", "brief", &["TTL", "30", "WRITE", "/E"]));
    sleep(Duration::from_millis(80));
    assert!(listed(&mut con, "p", &["TOKEN", "brief"]).is_empty());
    assert_errors(
        &mut con,
        &[
            (
                &[&b"PATHLOCK.LOCKS"[..], b"p", b"/A", b"/B"][..],
                "ERR unknown option '/B' after the path: expected TOKEN token",
            ),
            (
                &[b"PATHLOCK.LOCKS", b"p", b"/A", b"TOKEN"],
                "ERR TOKEN needs a value",
            ),
            (
                &[b"PATHLOCK.LOCKS", b"p", b"TOKEN", b""],
                "ERR invalid token",
            ),
            (
                &[b"PATHLOCK.LOCKS", b"p", b"/A", b"\xc4\x80\r\n", b"t"],
                "ERR unknown option '\\xc4\\x80\\r\\n' after the path",
            ),
            (
                &[b"PATHLOCK.LOCKS", b"p", b"/A", b"TOKEN", b"t", b"x"],
                "ERR wrong number of arguments",
            ),
        ],
    );
}

#[test]
fn an_owners_listing_costs_what_it_returns() {
    let server = Server::start();
    let mut con = server.conn();
    // 100,000 locks of others, a small owner, and a big owner (20,000 locks) beside a small
    // folder.
    hold_many(&mut con, "big", 100_000, "READ", 1000);
    assert!(take(
        &mut con,
        "big",
        "small",
        &["TTL", "600000", "WRITE", "/s/1", "WRITE", "/s/2"]
    ));
    let mut pipe = redis::pipe();
    for i in 0..20_000 {
        pipe.cmd("PATHLOCK.ACQUIRE")
            .arg(&["big", "TOKEN", "whale", "TTL", "600000", "WRITE"])
            .arg(format!("/w/{i}"))
            .ignore();
    }
    let _: () = pipe.query(&mut con).expect("the big owner's locks");
    assert!(take(
        &mut con,
        "big",
        "whale",
        &["TTL", "600000", "WRITE", "/tiny/x"]
    ));
    let time = |con: &mut Connection, args: &[&str]| {
        timed_listing::<LockEntry>(con, "PATHLOCK.LOCKS", "big", args)
    };
    let (small, small_us) = time(&mut con, &["TOKEN", "small"]);
    let (tiny, tiny_us) = time(&mut con, &["/tiny", "TOKEN", "whale"]);
    let (whale, whale_us) = time(&mut con, &["TOKEN", "whale"]);
    let (all, all_us) = time(&mut con, &[]);
    assert_eq!((small, tiny, whale, all), (2, 1, 20_001, 120_003));
    println!(
        "LOCKS TOKEN small {small_us} us, /tiny TOKEN whale {tiny_us} us, \
         TOKEN whale {whale_us} us, all {all_us} us"
    );
    // A small owner among 120,000 locks, and a small folder of a big owner, cost what they
    // return, far below listing what the project or the owner holds.
    assert!(small_us * 50.0 < all_us, "{small_us} vs {all_us}");
    assert!(tiny_us * 50.0 < whale_us, "{tiny_us} vs {whale_us}");
    assert!(whale_us < all_us, "{whale_us} vs {all_us}");
}

/// One entry of WAITERS: `(token, [mode, path, ...], waited-ms, left-ms, note)`.
type WaiterEntry = (String, Vec<String>, i64, i64, Option<Vec<u8>>);

fn waiters(con: &mut Connection, key: &str, args: &[&str]) -> Vec<WaiterEntry> {
    cmd("PATHLOCK.WAITERS")
        .arg(key)
        .arg(args)
        .query(con)
        .expect("WAITERS")
}

/// A client blocked in `ACQUIRE key TOKEN token WAIT wait [NOTE note] requests...` on its own
/// connection; joins to the reply.
fn wait_for(
    server: &Server,
    key: &str,
    token: &str,
    wait: u64,
    note: Option<&str>,
    requests: &[&str],
) -> JoinHandle<Option<(String, i64)>> {
    let mut args: Vec<String> = ["TOKEN", token, "WAIT", &wait.to_string()]
        .map(String::from)
        .to_vec();
    if let Some(note) = note {
        args.extend(["NOTE".to_string(), note.to_string()]);
    }
    args.extend(requests.iter().map(|r| r.to_string()));
    let mut con = server.conn();
    let key = key.to_string();
    std::thread::spawn(move || {
        cmd("PATHLOCK.ACQUIRE")
            .arg(&key)
            .arg(&args)
            .query(&mut con)
            .expect("ACQUIRE WAIT")
    })
}

#[test]
fn waiters_lists_the_queue_in_order_with_times_and_notes() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(
        &mut con,
        "p",
        "holder",
        &["TTL", "60000", "WRITE", "/"]
    ));
    let started = Instant::now();
    let first = wait_for(
        &server,
        "p",
        "w1",
        20_000,
        Some("w1: upload"),
        &["WRITE", "/A/x"],
    );
    wait_for_waiters(&mut con, 1);
    sleep(Duration::from_millis(150));
    let second = wait_for(
        &server,
        "p",
        "w2",
        5_000,
        None,
        &["READ", "/B", "WRITE", "/A/z"],
    );
    wait_for_waiters(&mut con, 2);
    let third = wait_for(&server, "p", "w3", 20_000, Some("w3"), &["READ", "/C/y"]);
    wait_for_waiters(&mut con, 3);
    let all = waiters(&mut con, "p", &[]);
    let elapsed = started.elapsed().as_millis() as i64;
    let tokens: Vec<&str> = all.iter().map(|w| w.0.as_str()).collect();
    assert_eq!(tokens, ["w1", "w2", "w3"], "queue order");
    assert_eq!(all[0].1, ["WRITE", "/A/x"]);
    assert_eq!(all[1].1, ["READ", "/B", "WRITE", "/A/z"]);
    assert_eq!(all[0].4.as_deref(), Some(&b"w1: upload"[..]));
    assert_eq!(all[1].4, None);
    // Waited and left, in ms: the first has waited longest; each has waited no longer than
    // the test has run, and has what its WAIT gave minus what it waited left.
    assert!(all[0].2 >= 150 && all[0].2 <= elapsed, "{all:?}");
    assert!(all[1].2 <= all[0].2 - 100, "{all:?}");
    for (entry, wait) in all.iter().zip([20_000, 5_000, 20_000]) {
        let (waited, left) = (entry.2, entry.3);
        assert!(
            left <= wait - waited + 1 && left >= wait - waited - 50,
            "{entry:?} of a {wait} ms wait"
        );
    }
    // At or under a path: every waiter with an item there, the whole request shown.
    let tokens =
        |entries: Vec<WaiterEntry>| -> Vec<String> { entries.into_iter().map(|w| w.0).collect() };
    assert_eq!(tokens(waiters(&mut con, "p", &["/A"])), ["w1", "w2"]);
    assert_eq!(tokens(waiters(&mut con, "p", &["/A/x"])), ["w1"]);
    assert_eq!(tokens(waiters(&mut con, "p", &["B"])), ["w2"]);
    assert_eq!(tokens(waiters(&mut con, "p", &["/C"])), ["w3"]);
    assert!(waiters(&mut con, "p", &["/A/y"]).is_empty());
    assert!(waiters(&mut con, "p", &["/D"]).is_empty());
    assert!(waiters(&mut con, "missing", &[]).is_empty());
    // A grant takes a waiter off the list.
    assert_eq!(release(&mut con, "p", "holder", &[]), 1);
    for handle in [first, second, third] {
        assert!(handle.join().expect("a waiter").is_some());
    }
    assert!(waiters(&mut con, "p", &[]).is_empty());
    assert_errors(
        &mut con,
        &[
            (
                &[&b"PATHLOCK.WAITERS"[..], b"p", b"/a/../b"][..],
                "ERR invalid path",
            ),
            (
                &[b"PATHLOCK.WAITERS", b"p", b"/a", b"/b"],
                "ERR wrong number of arguments",
            ),
            (&[b"PATHLOCK.WAITERS"], "ERR wrong number of arguments"),
        ],
    );
}

#[test]
fn a_waiter_that_gave_up_is_listed_no_more() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(
        &mut con,
        "p",
        "holder",
        &["TTL", "60000", "WRITE", "/A"]
    ));
    let timing_out = wait_for(&server, "p", "brief", 200, None, &["WRITE", "/A"]);
    let mut leaving = server.conn();
    let id: i64 = cmd("CLIENT")
        .arg("ID")
        .query(&mut leaving)
        .expect("CLIENT ID");
    // Sent without reading the reply: the client stays blocked on its connection.
    let blocking = cmd("PATHLOCK.ACQUIRE")
        .arg(&["p", "TOKEN", "leaving", "WAIT", "60000", "WRITE", "/A/b"])
        .get_packed_command();
    leaving.send_packed_command(&blocking).expect("send");
    wait_for_waiters(&mut con, 2);
    assert_eq!(waiters(&mut con, "p", &[]).len(), 2);
    assert_eq!(timing_out.join().expect("the waiter"), None);
    let unblocked: i64 = cmd("CLIENT")
        .arg(&["UNBLOCK", &id.to_string()])
        .query(&mut con)
        .expect("CLIENT UNBLOCK");
    assert_eq!(unblocked, 1);
    wait_for_waiters(&mut con, 0);
    assert!(waiters(&mut con, "p", &[]).is_empty());
}

#[test]
fn a_key_of_another_type_is_named_in_its_wrongtype_error() {
    let server = Server::start();
    let mut con = server.conn();
    let key: &[u8] = b"cache:\xc4\x80\r\n";
    let _: () = cmd("SET").arg(key).arg("x").query(&mut con).expect("SET");
    let expected =
        "WRONGTYPE key 'cache:\\xc4\\x80\\r\\n' is not a pathlock project: it holds another type of value";
    for args in [
        &[&b"PATHLOCK.ACQUIRE"[..], key, b"WRITE", b"/A"][..],
        &[b"PATHLOCK.ACQUIRE", key, b"WAIT", b"100", b"WRITE", b"/A"],
        &[b"PATHLOCK.RELEASE", key, b"t"],
        &[b"PATHLOCK.RENEW", key, b"t", b"100"],
        &[b"PATHLOCK.LOCKS", key],
        &[b"PATHLOCK.LOCKS", key, b"TOKEN", b"t"],
        &[b"PATHLOCK.CHECK", key, b"READ", b"/"],
        &[b"PATHLOCK.WAITERS", key],
    ] {
        assert_eq!(error_from(&mut con, args), expected, "{args:?}");
    }
    let value: String = cmd("GET").arg(key).query(&mut con).expect("GET");
    assert_eq!(value, "x", "nothing changed");
}
