//! Least-privilege ACL users against a real server: key specs that say what each command does to
//! its key (read-only `LOCKS`, `CHECK` and `WAITERS`), the `pathlock` ACL category where the server has
//! module categories (Redis 7.2+, Valkey 8+), and the recipes of `docs/operations.md`, which on Redis 7.0 name
//! the commands instead of the category. Nobody needs the replication-only command. Key patterns
//! hold for every command, even for a user given them all. What the server is told of each
//! command (flags, key specs, categories beside the reference) is in `command_docs.rs`.

use std::io::Write;
use std::net::TcpStream;
use std::thread;

use crate::common::*;

/// Whether the server lets modules declare ACL categories: `ACL CAT` then lists `pathlock`.
fn has_categories(con: &mut Connection) -> bool {
    let categories: Vec<String> = cmd("ACL").arg("CAT").query(con).expect("ACL CAT");
    categories.iter().any(|c| c == "pathlock")
}

/// Whether the server must have module categories: not on Redis 7.0, where the API is missing;
/// on Redis 8 and Valkey (reported beside the Redis version it is compatible with), where it
/// is there, so a missing category is a failure rather than a reason to fall back to naming the
/// commands. `None` for the untested versions between.
fn categories_expected(con: &mut Connection) -> Option<bool> {
    if info_field(con, "server", "valkey_version").is_some() {
        return Some(true);
    }
    let version = info_field(con, "server", "redis_version").expect("redis_version");
    let mut numbers = version.split('.').map(|n| n.parse::<u32>().unwrap_or(0));
    match (numbers.next(), numbers.next()) {
        (Some(7), Some(0)) => Some(false),
        (Some(major), _) if major >= 8 => Some(true),
        _ => None,
    }
}

/// Every command a client sends, on `other:1`: a key outside the `proj:*` pattern of the users
/// below.
const ON_OTHER_KEY: [&[&[u8]]; 6] = [
    &[b"PATHLOCK.ACQUIRE", b"other:1", b"WRITE", b"/A"],
    &[b"PATHLOCK.RELEASE", b"other:1", b"admin"],
    &[b"PATHLOCK.RENEW", b"other:1", b"admin", b"100"],
    &[b"PATHLOCK.LOCKS", b"other:1"],
    &[b"PATHLOCK.CHECK", b"other:1", b"READ", b"/"],
    &[b"PATHLOCK.WAITERS", b"other:1"],
];

fn user(server: &Server, admin: &mut Connection, name: &str, rules: &[&str]) -> Connection {
    let _: () = cmd("ACL")
        .arg(&["SETUSER", name, "reset", "on", ">pw"])
        .arg(rules)
        .query(admin)
        .unwrap_or_else(|e| panic!("ACL SETUSER {name} {rules:?}: {e}"));
    let mut con = server.conn();
    let _: () = cmd("AUTH")
        .arg(&[name, "pw"])
        .query(&mut con)
        .expect("AUTH");
    con
}

/// The application recipe of `docs/operations.md`: the lock commands on `proj:*` keys, nothing else.
fn application_rules(categories: bool) -> Vec<&'static str> {
    if categories {
        vec!["~proj:*", "+@pathlock"]
    } else {
        vec![
            "~proj:*",
            "+pathlock.acquire",
            "+pathlock.release",
            "+pathlock.renew",
            "+pathlock.locks",
            "+pathlock.check",
            "+pathlock.waiters",
        ]
    }
}

/// The dashboard recipe of `docs/operations.md`: read permission on `proj:*` keys and the three reading
/// commands.
fn dashboard_rules() -> Vec<&'static str> {
    vec![
        "%R~proj:*",
        "+pathlock.check",
        "+pathlock.locks",
        "+pathlock.waiters",
    ]
}

#[test]
fn a_read_only_user_may_inspect_but_not_lock() {
    let server = Server::start();
    let mut admin = server.conn();
    assert!(take(
        &mut admin,
        "proj:1",
        "t",
        &["TTL", "600000", "WRITE", "/A/C"]
    ));
    let mut reader = user(&server, &mut admin, "reader", &dashboard_rules());
    assert_eq!(count_entries(&mut reader, &["PATHLOCK.LOCKS", "proj:1"]), 1);
    assert_eq!(
        count_entries(&mut reader, &["PATHLOCK.CHECK", "proj:1", "WRITE", "/A"]),
        1
    );
    assert_eq!(
        count_entries(&mut reader, &["PATHLOCK.LOCKS", "proj:1", "TOKEN", "t"]),
        1
    );
    assert_eq!(
        count_entries(&mut reader, &["PATHLOCK.WAITERS", "proj:1", "/A"]),
        0
    );
    // Given the writing commands too, the user still lacks write permission on the key.
    let _: () = cmd("ACL")
        .arg(&[
            "SETUSER",
            "reader",
            "+pathlock.acquire",
            "+pathlock.release",
            "+pathlock.renew",
        ])
        .query(&mut admin)
        .expect("ACL SETUSER");
    assert_refused(
        &mut reader,
        "NOPERM",
        &[
            &[b"PATHLOCK.ACQUIRE", b"proj:1", b"WRITE", b"/B"],
            &[b"PATHLOCK.RELEASE", b"proj:1", b"t"],
            &[b"PATHLOCK.RENEW", b"proj:1", b"t", b"1000"],
        ],
    );
    // And read permission on other keys is not given.
    assert_refused(
        &mut reader,
        "NOPERM",
        &[
            &[b"PATHLOCK.LOCKS", b"other:1"],
            &[b"PATHLOCK.WAITERS", b"other:1"],
        ],
    );
    assert_eq!(lock_set(&mut admin, "proj:1").len(), 1, "nothing changed");
}

#[test]
fn an_application_user_locks_only_its_keys_and_never_needs_the_effect_command() {
    let server = Server::start();
    let mut admin = server.conn();
    let categories = has_categories(&mut admin);
    assert!(take(&mut admin, "other:1", "admin", &["WRITE", "/x"]));
    let mut app = user(&server, &mut admin, "app", &application_rules(categories));
    // The whole life of a lock on its own keys.
    assert!(take(
        &mut app,
        "proj:1",
        "a",
        &["TTL", "60000", "WRITE", "/A"]
    ));
    assert_eq!(count_entries(&mut app, &["PATHLOCK.LOCKS", "proj:1"]), 1);
    assert_eq!(
        count_entries(&mut app, &["PATHLOCK.CHECK", "proj:1", "READ", "/A/b"]),
        1
    );
    assert_eq!(renew(&mut app, "proj:1", "a", 60_000), 1);
    // A blocking acquire, which the category must allow too.
    let waited: Option<(String, i64)> = cmd("PATHLOCK.ACQUIRE")
        .arg(&["proj:1", "TOKEN", "b", "WAIT", "50", "WRITE", "/A"])
        .query(&mut app)
        .expect("ACQUIRE WAIT");
    assert_eq!(waited, None);
    assert_eq!(release(&mut app, "proj:1", "a", &[]), 1);
    // Other keys, other commands and the replication-only command are refused.
    assert_refused(&mut app, "NOPERM", &ON_OTHER_KEY);
    assert_refused(
        &mut app,
        "NOPERM",
        &[
            &[b"PATHLOCK.EFFECT", b"proj:1", b"FENCE", b"9"],
            &[b"GET", b"proj:1"],
            &[b"DEL", b"proj:1"],
        ],
    );
    assert_eq!(
        lock_set(&mut admin, "other:1").len(),
        1,
        "app changed nothing"
    );
}

#[test]
fn the_commands_are_in_the_usual_categories_where_the_server_has_them() {
    let server = Server::start();
    let mut admin = server.conn();
    let categories = has_categories(&mut admin);
    if let Some(expected) = categories_expected(&mut admin) {
        assert_eq!(categories, expected, "the pathlock category on this server");
    }
    if !categories {
        // Redis 7.0: no module categories. The commands are then in no category at all, so
        // `+@write` never includes them by accident, and the recipes name them.
        let write: Vec<String> = cmd("ACL")
            .arg(&["CAT", "write"])
            .query(&mut admin)
            .expect("ACL CAT write");
        assert!(
            !write.iter().any(|c| c.starts_with("pathlock")),
            "{write:?}"
        );
        return;
    }
    let members = |con: &mut Connection, category: &str| -> Vec<String> {
        let mut names: Vec<String> = cmd("ACL")
            .arg(&["CAT", category])
            .query::<Vec<String>>(con)
            .expect("ACL CAT")
            .into_iter()
            .map(|c| c.to_ascii_lowercase())
            .filter(|c| c.starts_with("pathlock."))
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        members(&mut admin, "pathlock"),
        [
            "pathlock.acquire",
            "pathlock.check",
            "pathlock.locks",
            "pathlock.release",
            "pathlock.renew",
            "pathlock.waiters"
        ]
    );
    assert_eq!(
        members(&mut admin, "read"),
        ["pathlock.check", "pathlock.locks", "pathlock.waiters"]
    );
    assert_eq!(
        members(&mut admin, "write"),
        [
            "pathlock.acquire",
            "pathlock.effect",
            "pathlock.release",
            "pathlock.renew"
        ]
    );
    assert_eq!(members(&mut admin, "blocking"), ["pathlock.acquire"]);
    // `+@read` alone is enough for a dashboard with read permission on the keys.
    assert!(take(&mut admin, "proj:2", "t", &["WRITE", "/A"]));
    let mut reader = user(&server, &mut admin, "reader", &["%R~proj:*", "+@read"]);
    assert_eq!(count_entries(&mut reader, &["PATHLOCK.LOCKS", "proj:2"]), 1);
    assert_eq!(
        count_entries(&mut reader, &["PATHLOCK.WAITERS", "proj:2"]),
        0
    );
    let error = error_from(
        &mut reader,
        &[b"PATHLOCK.ACQUIRE", b"proj:2", b"READ", b"/B"],
    );
    assert!(error.starts_with("NOPERM"), "{error}");
}

#[test]
fn key_patterns_hold_for_a_user_given_every_command() {
    let server = Server::start();
    let mut admin = server.conn();
    assert!(take(&mut admin, "other:1", "admin", &["WRITE", "/x"]));
    let mut alice = user(&server, &mut admin, "alice", &["~proj:*", "+@all"]);
    assert!(take(&mut alice, "proj:1", "alice", &["WRITE", "/A"]));
    assert_refused(&mut alice, "NOPERM", &ON_OTHER_KEY);
    assert_eq!(
        lock_set(&mut admin, "other:1").len(),
        1,
        "alice changed nothing"
    );
}

/// What the clients need beyond the lock commands (`docs/operations.md`): the recipe user is
/// refused `WAIT`, `CLIENT ID` and `CLIENT UNBLOCK`, and gives up a wait by closing its
/// connection, which takes the request off the queue; the documented additions
/// (`+wait +client|id +client|unblock`) grant exactly those three.
#[test]
fn the_recipe_user_gives_up_a_wait_by_closing_and_the_documented_additions_unblock() {
    let server = Server::start();
    let mut admin = server.conn();
    let categories = has_categories(&mut admin);
    assert!(take(
        &mut admin,
        "proj:1",
        "holder",
        &["TTL", "60000", "WRITE", "/A"]
    ));
    let mut app = user(&server, &mut admin, "app", &application_rules(categories));
    assert_refused(
        &mut app,
        "NOPERM",
        &[
            &[b"WAIT", b"0", b"1"],
            &[b"CLIENT", b"ID"],
            &[b"CLIENT", b"UNBLOCK", b"1"],
        ],
    );
    // A waiting acquire of the recipe user, on a connection that closes while it waits.
    let mut waiter = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    for args in [
        &["AUTH", "app", "pw"][..],
        &[
            "PATHLOCK.ACQUIRE",
            "proj:1",
            "TOKEN",
            "w",
            "WAIT",
            "60000",
            "WRITE",
            "/A/f",
        ],
    ] {
        let words: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        waiter.write_all(&resp(&words)).expect("send");
    }
    wait_for_waiters(&mut admin, 1);
    drop(waiter);
    wait_for_waiters(&mut admin, 0);
    assert_eq!(count_entries(&mut app, &["PATHLOCK.WAITERS", "proj:1"]), 0);

    // The additions: the waiting connection's id, and an unblock that answers its wait nil.
    let mut rules = application_rules(categories);
    rules.extend(["+wait", "+client|id", "+client|unblock"]);
    let mut waiting = user(&server, &mut admin, "app", &rules);
    let acked: i64 = cmd("WAIT").arg(&[0, 1]).query(&mut app).expect("WAIT");
    assert_eq!(acked, 0, "no replicas");
    let id: i64 = cmd("CLIENT")
        .arg("ID")
        .query(&mut waiting)
        .expect("CLIENT ID");
    let blocked = thread::spawn(move || {
        let reply: Option<(String, i64)> = cmd("PATHLOCK.ACQUIRE")
            .arg(&["proj:1", "WAIT", "60000", "WRITE", "/A/f"])
            .query(&mut waiting)
            .expect("ACQUIRE");
        reply
    });
    wait_for_waiters(&mut admin, 1);
    let unblocked: i64 = cmd("CLIENT")
        .arg(&["UNBLOCK", &id.to_string()])
        .query(&mut app)
        .expect("CLIENT UNBLOCK");
    assert_eq!(unblocked, 1);
    assert_eq!(blocked.join().expect("waiter"), None);
    wait_for_waiters(&mut admin, 0);
}
