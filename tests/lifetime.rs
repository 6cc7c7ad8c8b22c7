//! The lifetime of a project key in the module's own indexes: every way a key leaves the
//! keyspace takes its entry in the expiry schedule with it (`pathlock_scheduled_keys` in `INFO`
//! counts them), and every way a key moves keeps its entry, so its locks still lapse on time.

mod common;

use std::time::Duration;

use common::*;

fn scheduled(con: &mut Connection) -> i64 {
    info_number(con, "pathlock", "pathlock_scheduled_keys")
}

fn select(con: &mut Connection, db: i64) {
    let _: () = cmd("SELECT").arg(db).query(con).expect("SELECT");
}

/// Projects `name` in the current database, each holding a lock for ten minutes.
fn hold(con: &mut Connection, names: &[&str]) {
    for name in names {
        assert!(take(con, name, "t", &["TTL", "600000", "WRITE", "/A"]));
    }
}

#[test]
fn every_way_a_key_leaves_takes_its_entry_in_the_schedule() {
    let server = Server::start();
    let mut con = server.conn();
    let names = ["del", "unlink", "set", "restore", "renamed-over", "kept"];
    hold(&mut con, &names);
    // A long name lives apart from short ones in the schedule; it goes the same way.
    let long = "a-project-name-longer-than-fifteen-bytes";
    hold(&mut con, &[long, "from"]);
    assert_eq!(scheduled(&mut con), 8);
    let payload: Vec<u8> = {
        let _: () = cmd("SET")
            .arg(&["plain", "v"])
            .query(&mut con)
            .expect("SET");
        cmd("DUMP").arg("plain").query(&mut con).expect("DUMP")
    };
    let steps: [(&str, Vec<Vec<u8>>); 6] = [
        ("DEL", vec![b"del".to_vec(), long.into()]),
        ("UNLINK", vec![b"unlink".to_vec()]),
        ("SET", vec![b"set".to_vec(), b"v".to_vec()]),
        (
            "RESTORE",
            vec![
                b"restore".to_vec(),
                b"0".to_vec(),
                payload,
                b"REPLACE".to_vec(),
            ],
        ),
        // The project renamed onto another one overwrites it: one entry goes, one moves.
        ("RENAME", vec![b"from".to_vec(), b"renamed-over".to_vec()]),
        ("DEL", vec![b"nothing".to_vec()]),
    ];
    let mut left = 8;
    for (command, args) in steps {
        let _: Value = cmd(command).arg(&args).query(&mut con).expect(command);
        left -= match command {
            "DEL" if args.len() == 2 => 2,
            "DEL" => 0,
            _ => 1,
        };
        assert_eq!(scheduled(&mut con), left, "after {command}");
    }
    assert_eq!(left, 2, "renamed-over and kept");
    // A flush of one database takes its entries and leaves the others'.
    select(&mut con, 1);
    hold(&mut con, &["one", "two"]);
    assert_eq!(scheduled(&mut con), 4);
    let _: () = cmd("FLUSHDB").query(&mut con).expect("FLUSHDB");
    assert_eq!(scheduled(&mut con), 2);
    hold(&mut con, &["three"]);
    for flush in [&["ASYNC"][..], &[]] {
        let _: () = cmd("FLUSHALL")
            .arg(flush)
            .query(&mut con)
            .expect("FLUSHALL");
        assert_eq!(scheduled(&mut con), 0, "after FLUSHALL {flush:?}");
        hold(&mut con, &["again"]);
        assert_eq!(scheduled(&mut con), 1);
    }
}

#[test]
fn an_evicted_project_takes_its_entry_with_it() {
    let server = Server::start_with(&[
        "--maxmemory",
        "30mb",
        "--maxmemory-policy",
        "allkeys-random",
    ]);
    let mut con = server.conn();
    let _: () = cmd("CONFIG")
        .arg(&["SET", "pathlock.accept-eviction", "yes"])
        .query(&mut con)
        .expect("CONFIG SET");
    // Projects until the limit evicts some of them, in pipelined batches.
    for batch in 0..200 {
        let mut pipe = redis::pipe();
        for i in 0..1000 {
            pipe.cmd("PATHLOCK.ACQUIRE")
                .arg(format!("proj:{batch}:{i}"))
                .arg(&["TOKEN", "t", "TTL", "600000", "WRITE", "/A"])
                .ignore();
        }
        let _: () = pipe.query(&mut con).expect("acquires");
        if info_number(&mut con, "stats", "evicted_keys") > 1000 {
            break;
        }
    }
    assert!(info_number(&mut con, "stats", "evicted_keys") > 1000);
    // Read together: the server goes on evicting between commands while it is over its limit.
    let (keys, info): (i64, String) = redis::pipe()
        .atomic()
        .cmd("DBSIZE")
        .cmd("INFO")
        .arg("pathlock")
        .query(&mut con)
        .expect("DBSIZE and INFO");
    let entries = info
        .lines()
        .find_map(|line| line.strip_prefix("pathlock_scheduled_keys:"))
        .and_then(|n| n.trim().parse::<i64>().ok())
        .expect("pathlock_scheduled_keys");
    assert_eq!(
        entries, keys,
        "an entry per project left, none for the evicted"
    );
}

#[test]
fn a_key_that_moves_keeps_its_entry_and_its_locks_lapse_on_time() {
    let server = Server::start();
    let mut con = server.conn();
    // A brief lock beside a long one in each project, so that the key stays when it lapses.
    for name in ["renamed", "moved", "swapped"] {
        assert!(take(
            &mut con,
            name,
            "long",
            &["TTL", "600000", "WRITE", "/A"]
        ));
        assert!(take(
            &mut con,
            name,
            "brief",
            &["TTL", "1500", "WRITE", "/B"]
        ));
    }
    let _: () = cmd("RENAME")
        .arg(&["renamed", "renamed-to"])
        .query(&mut con)
        .expect("RENAME");
    let moved: i64 = cmd("MOVE")
        .arg(&["moved", "1"])
        .query(&mut con)
        .expect("MOVE");
    assert_eq!(moved, 1);
    let _: () = cmd("SWAPDB")
        .arg(&["0", "2"])
        .query(&mut con)
        .expect("SWAPDB");
    assert_eq!(scheduled(&mut con), 3);
    // Each brief lock is reclaimed by the expiry cycle where its key now is.
    wait_until(Duration::from_secs(10), "the brief locks to lapse", || {
        info_number(&mut con, "pathlock", "pathlock_locks") == 3
    });
    for (db, name) in [(2, "renamed-to"), (1, "moved"), (2, "swapped")] {
        select(&mut con, db);
        let locks: Vec<Value> = cmd("PATHLOCK.LOCKS")
            .arg(name)
            .query(&mut con)
            .expect("LOCKS");
        assert_eq!(locks.len(), 1, "{name} in db {db}");
    }
    assert_eq!(scheduled(&mut con), 3);
}
