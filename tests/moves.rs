//! A waiter never wins a project that moved away (issue 13): when the value of a key with
//! waiters leaves its name (`MIGRATE`, `RENAME`, `MOVE`, `SWAPDB`, an overwrite), the waiters are
//! answered an error and nothing is granted under the name left behind; only `DEL` and flushes
//! (the project is gone) let them start over on the empty name.

use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::common::*;

/// A blocking acquire on a connection of its own; yields the reply or the error text.
fn spawn_wait(
    server: &Server,
    key: &str,
    token: &str,
    path: &str,
) -> JoinHandle<Result<Value, String>> {
    let mut con = server.conn();
    let (key, token, path) = (key.to_string(), token.to_string(), path.to_string());
    thread::spawn(move || {
        cmd("PATHLOCK.ACQUIRE")
            .arg(&key)
            .arg(&[
                "TOKEN",
                token.as_str(),
                "WAIT",
                "5000",
                "WRITE",
                path.as_str(),
            ])
            .query::<Value>(&mut con)
            .map_err(|e| match (e.code(), e.detail()) {
                (Some(code), Some(detail)) => format!("{code} {detail}"),
                _ => e.to_string(),
            })
    })
}

/// `holder` takes `WRITE /A` in `key`, and `waiter` starts waiting for `WRITE /A/x` there.
fn held_and_awaited(
    server: &Server,
    con: &mut Connection,
    key: &str,
) -> JoinHandle<Result<Value, String>> {
    assert!(take(con, key, "holder", &["TTL", "60000", "WRITE", "/A"]));
    let waiter = spawn_wait(server, key, "waiter", "/A/x");
    wait_for_blocked(con, 1);
    waiter
}

/// Runs `command` on `con` while a waiter of `key` waits behind its holder (`held_and_awaited`):
/// the command's reply and the waiter's answer.
fn answer_to(
    server: &Server,
    con: &mut Connection,
    key: &str,
    command: &redis::Cmd,
) -> (Value, Result<Value, String>) {
    let waiter = held_and_awaited(server, con, key);
    let reply: Value = command.query(con).expect("the command");
    (reply, waiter.join().expect("the waiter"))
}

fn exists(con: &mut Connection, key: &str) -> bool {
    cmd("EXISTS").arg(key).query::<i64>(con).expect("EXISTS") == 1
}

/// The reproduction of the issue: S migrates K, with its holder and a waiter, to D.
#[test]
fn a_waiter_of_a_migrated_project_is_answered_that_it_moved_not_granted() {
    let source = Server::start();
    let destination = Server::start();
    let mut con = source.conn();
    let waiter = held_and_awaited(&source, &mut con, "K");
    let held = lock_set(&mut con, "K");
    let _: () = cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(destination.port)
        .arg(&["K", "0", "5000"])
        .query(&mut con)
        .expect("MIGRATE");
    let answer = waiter.join().expect("the waiter");
    assert_eq!(
        answer,
        Err(format!(
            "ERR project moved: its key was migrated to 127.0.0.1:{} while this client waited; acquire it there",
            destination.port
        ))
    );
    assert!(
        !exists(&mut con, "K"),
        "no orphan project is left on the source"
    );
    assert_no_waiters(&mut con);
    let mut there = destination.conn();
    let locks = lock_set(&mut there, "K");
    assert_eq!(locks, held, "the holder's lock, with its fence, moved");
    assert_eq!(locks.len(), 1);
    // The waiter retries where the project is now, and finds it held.
    assert!(!take(&mut there, "K", "waiter", &["WRITE", "/A/x"]));
}

#[test]
fn a_waiter_of_a_renamed_or_moved_project_is_answered_that_it_moved() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, answer) = answer_to(&server, &mut con, "p", cmd("RENAME").arg(&["p", "q"]));
    assert!(
        answer
            .as_ref()
            .is_err_and(|e| e.starts_with("ERR project moved: its key was renamed")),
        "{answer:?}"
    );
    assert!(
        !exists(&mut con, "p"),
        "nothing was granted under the old name"
    );
    assert_eq!(
        lock_set(&mut con, "q").len(),
        1,
        "the holder's lock moved with the key"
    );

    let (moved, answer) = answer_to(&server, &mut con, "m", cmd("MOVE").arg(&["m", "3"]));
    assert_eq!(moved, Value::Int(1));
    assert!(
        answer
            .as_ref()
            .is_err_and(|e| e.starts_with("ERR project moved")),
        "{answer:?}"
    );
    assert!(!exists(&mut con, "m"));
    let _: () = cmd("SELECT").arg(3).query(&mut con).expect("SELECT");
    assert_eq!(lock_set(&mut con, "m").len(), 1);
    assert_no_waiters(&mut con);
}

#[test]
fn a_waiter_of_an_overwritten_project_is_answered_that_it_was_replaced() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, answer) = answer_to(
        &server,
        &mut con,
        "p",
        cmd("SET").arg(&["p", "a string now"]),
    );
    assert_eq!(
        answer,
        Err("ERR project replaced: its key was overwritten by another value while this client waited".into())
    );

    // RESTORE ... REPLACE of another project: its locks are not the waiter's to be granted in.
    assert!(take(&mut con, "other", "o", &["READ", "/B"]));
    let payload: Vec<u8> = cmd("DUMP").arg("other").query(&mut con).expect("DUMP");
    let (_, answer) = answer_to(
        &server,
        &mut con,
        "r",
        cmd("RESTORE").arg("r").arg(0).arg(payload).arg("REPLACE"),
    );
    assert!(
        answer
            .as_ref()
            .is_err_and(|e| e.starts_with("ERR project replaced")),
        "{answer:?}"
    );
    assert_eq!(lock_set(&mut con, "r"), lock_set(&mut con, "other"));
}

#[test]
fn a_waiter_in_a_swapped_database_is_answered_that_it_moved() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, answer) = answer_to(&server, &mut con, "p", cmd("SWAPDB").arg(&["0", "1"]));
    assert_eq!(
        answer,
        Err("ERR project moved: SWAPDB swapped its database while this client waited".into())
    );
    assert!(!exists(&mut con, "p"));
    let _: () = cmd("SELECT").arg(1).query(&mut con).expect("SELECT");
    // The waiter left the queue of the project it waited in: a new request is not behind it.
    wait_until(Duration::from_secs(5), "the queue to be purged", || {
        let blockers: Vec<LockEntry> = cmd("PATHLOCK.CHECK")
            .arg(&["p", "WRITE", "/B"])
            .query(&mut con)
            .expect("CHECK");
        blockers.is_empty()
    });
    assert!(take(&mut con, "p", "next", &["WRITE", "/B"]));
}

#[test]
fn a_waiter_of_a_deleted_project_still_starts_over_on_the_empty_name() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, answer) = answer_to(&server, &mut con, "p", cmd("DEL").arg("p"));
    assert!(matches!(answer, Ok(Value::Array(_))), "{answer:?}");
    assert_eq!(lock_set(&mut con, "p").len(), 1);
}

/// A master that turns replica answers its waiters as Redis answers its own blocked clients,
/// and grants nothing: the replica's locks change only through its new master's effects.
#[test]
fn a_master_that_turns_replica_answers_its_waiters_unblocked() {
    let server = Server::start();
    let other = Server::start();
    let mut con = server.conn();
    let (_, answer) = answer_to(
        &server,
        &mut con,
        "p",
        cmd("REPLICAOF").arg("127.0.0.1").arg(other.port),
    );
    assert!(
        answer.as_ref().is_err_and(|e| e.starts_with("UNBLOCKED ")),
        "{answer:?}"
    );
    assert_no_waiters(&mut con);
}

/// `MIGRATE` queued in `MULTI` runs at `EXEC`, when Redis runs no command filter; `MIGRATE ...
/// KEYS` takes several projects at once; a script runs `MIGRATE` inside another command. Their
/// waiters are answered as after a plain `MIGRATE`, and nothing is granted on the source; a
/// `DEL` in a transaction still lets its waiters start over.
#[test]
fn a_waiter_of_a_project_migrated_in_a_transaction_or_with_others_is_answered_that_it_moved() {
    let source = Server::start();
    let destination = Server::start();
    let moved = format!(
        "ERR project moved: its key was migrated to 127.0.0.1:{} while this client waited; acquire it there",
        destination.port
    );
    let mut con = source.conn();

    let waiter = held_and_awaited(&source, &mut con, "T");
    let held = lock_set(&mut con, "T");
    let (migrated,): (String,) = redis::pipe()
        .atomic()
        .cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(destination.port)
        .arg(&["T", "0", "5000"])
        .query(&mut con)
        .expect("MULTI MIGRATE EXEC");
    assert_eq!(migrated, "OK");
    assert_eq!(waiter.join().expect("the waiter"), Err(moved.clone()));
    assert!(!exists(&mut con, "T"), "nothing was granted on the source");
    let mut there = destination.conn();
    assert_eq!(lock_set(&mut there, "T"), held);

    // Several projects in one MIGRATE ... KEYS, inside a transaction and outside.
    for atomic in [false, true] {
        let keys = if atomic { ["m1", "m2"] } else { ["k1", "k2"] };
        let first = held_and_awaited(&source, &mut con, keys[0]);
        assert!(take(
            &mut con,
            keys[1],
            "holder",
            &["TTL", "60000", "WRITE", "/A"]
        ));
        let second = spawn_wait(&source, keys[1], "waiter", "/A/x");
        wait_for_blocked(&mut con, 2);
        let mut pipe = redis::pipe();
        if atomic {
            pipe.atomic();
        }
        pipe.cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(destination.port)
            .arg(&["", "0", "5000", "KEYS"])
            .arg(&keys);
        let (migrated,): (String,) = pipe.query(&mut con).expect("MIGRATE KEYS");
        assert_eq!(migrated, "OK");
        for (key, waiter) in keys.iter().zip([first, second]) {
            assert_eq!(
                waiter.join().expect("the waiter"),
                Err(moved.clone()),
                "{key}"
            );
            assert!(!exists(&mut con, key), "nothing was granted on the source");
            assert_eq!(lock_set(&mut there, key).len(), 1);
        }
    }

    // A script's MIGRATE (Redis runs the command filter for a script's commands).
    let waiter = held_and_awaited(&source, &mut con, "S");
    let script = format!(
        "return redis.call('MIGRATE', '127.0.0.1', '{}', KEYS[1], 0, 5000)",
        destination.port
    );
    let migrated: String = cmd("EVAL")
        .arg(&script)
        .arg(1)
        .arg("S")
        .query(&mut con)
        .expect("EVAL MIGRATE");
    assert_eq!(migrated, "OK");
    assert_eq!(waiter.join().expect("the waiter"), Err(moved.clone()));
    assert!(!exists(&mut con, "S"));
    assert_eq!(lock_set(&mut there, "S").len(), 1);

    // A DEL in a transaction is still a DEL: the waiter starts over on the empty name.
    let waiter = held_and_awaited(&source, &mut con, "D");
    let (deleted,): (i64,) = redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg("D")
        .query(&mut con)
        .expect("MULTI DEL EXEC");
    assert_eq!(deleted, 1);
    let answer = waiter.join().expect("the waiter");
    assert!(matches!(answer, Ok(Value::Array(_))), "{answer:?}");
    assert_no_waiters(&mut con);
}
