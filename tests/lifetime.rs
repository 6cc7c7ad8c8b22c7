//! The lifetime of a project key in the module's own indexes: every way a key leaves the
//! keyspace takes its entry in the expiry schedule with it (`pathlock_scheduled_keys` in `INFO`
//! counts them), and every way a key moves keeps its entry, so its locks still lapse on time.

use std::time::Duration;

use crate::common::*;

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
    // Projects until the limit evicts some of them, in pipelined batches. Some 200,000 reach
    // 30 MB on most servers, but Redis 8.2 held 200,000 projects of one lock in 30.4 MB, still
    // under the limit (30 MiB), so the bound goes to 1,000,000 for servers whose keys cost less.
    for batch in 0..1000 {
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

fn exists(con: &mut Connection, key: &str) -> bool {
    let n: i64 = cmd("EXISTS").arg(key).query(con).expect("EXISTS");
    n == 1
}

fn dbsize(con: &mut Connection) -> i64 {
    cmd("DBSIZE").query(con).expect("DBSIZE")
}

/// The keyspace events of database 0 (generic and module classes) that `actions` raise, as
/// `(key, event)`, in order.
fn events_of(server: &Server, actions: impl FnOnce(&mut Connection)) -> Vec<(String, String)> {
    let mut con = server.conn();
    let _: () = cmd("CONFIG")
        .arg(&["SET", "notify-keyspace-events", "Kgd"])
        .query(&mut con)
        .expect("CONFIG SET");
    let mut subscriber = server.conn();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:*").expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    actions(&mut con);
    let mut events = Vec::new();
    while let Ok(message) = pubsub.get_message() {
        let key = message
            .get_channel_name()
            .trim_start_matches("__keyspace@0__:");
        events.push((key.to_string(), message.get_payload().unwrap_or_default()));
    }
    events
}

fn events_on<'a>(events: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    events
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, event)| event.as_str())
        .collect()
}

#[test]
fn a_project_whose_last_lock_is_released_is_no_key() {
    let server = Server::start();
    let mut con = server.conn();
    let events = events_of(&server, |con| {
        assert!(take(con, "p", "a", &["WRITE", "/A"]));
        assert!(take(con, "p", "b", &["WRITE", "/B"]));
        assert_eq!(release(con, "p", "a", &[]), 1);
        assert!(exists(con, "p"), "b still holds a lock");
        assert_eq!(release(con, "p", "b", &["/B"]), 1);
        assert!(!exists(con, "p"), "the last lock went, and the key with it");
    });
    assert_eq!(
        events_on(&events, "p"),
        [
            "pathlock.acquire",
            "pathlock.acquire",
            "pathlock.release",
            "pathlock.release",
            "del"
        ]
    );
    // Nothing of it is left anywhere.
    assert_eq!(settled_gauges(&mut con), (0, 0));
    assert_eq!(scheduled(&mut con), 0);
    // A release that frees nothing deletes nothing and creates nothing.
    assert_eq!(release(&mut con, "p", "a", &[]), 0);
    assert_eq!(dbsize(&mut con), 0);
}

#[test]
fn a_project_whose_last_lease_lapses_is_no_key() {
    let server = Server::start();
    let mut con = server.conn();
    let long = "a-project-name-longer-than-fifteen-bytes";
    let events = events_of(&server, |con| {
        // The expiry cycle reclaims these: nothing touches the keys.
        for key in ["x", "y", long] {
            assert!(take(con, key, "a", &["TTL", "200", "WRITE", "/A"]));
            assert!(take(con, key, "b", &["TTL", "300", "READ", "/B"]));
        }
        // This one is emptied by whichever comes first: the expiry cycle, or a command that
        // meets its lapsed lease, its last one.
        assert!(take(con, "z", "a", &["TTL", "100", "WRITE", "/A"]));
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(renew(con, "z", "a", 1000), 0);
        assert!(!exists(con, "z"));
        wait_until(Duration::from_secs(10), "the keys to go", || {
            dbsize(con) == 0
        });
    });
    for key in ["x", "y", long, "z"] {
        assert_eq!(
            events_on(&events, key).last(),
            Some(&"del"),
            "{key}: {events:?}"
        );
    }
    assert_eq!(settled_gauges(&mut con), (0, 0));
    assert_eq!(scheduled(&mut con), 0);
}

#[test]
fn a_big_owner_released_whole_leaves_no_key_while_its_locks_are_freed() {
    let server = Server::start();
    let mut con = server.conn();
    let locks = 20_000;
    big_owner_holds(&mut con, "p", locks);
    assert_eq!(release(&mut con, "p", "big", &[]), locks as i64);
    assert!(
        !exists(&mut con, "p"),
        "deleted at once, freed in the background"
    );
    wait_for_lazy_frees(&mut con);
    assert_eq!(settled_gauges(&mut con), (0, 0));
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_locks_freeing"),
        0
    );
    // The same owner lapsing whole: the expiry cycle buries it and the key goes.
    for i in 0..200 {
        assert!(take(
            &mut con,
            "q",
            "big",
            &["TTL", "300", "WRITE", &format!("/f{i}")]
        ));
    }
    wait_until(
        Duration::from_secs(10),
        "the lapsed owner's key to go",
        || !exists(&mut con, "q"),
    );
}

#[test]
fn a_project_left_to_a_waiter_that_gave_up_is_no_key_once_its_holder_lapses() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(
        &mut con,
        "p",
        "holder",
        &["TTL", "500", "WRITE", "/A"]
    ));
    // A waiter that gives up: its connection goes while it waits.
    {
        let mut waiter = server.conn();
        waiter
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let _ = try_acquire(&mut waiter, "p", &["WAIT", "10000", "WRITE", "/A"]);
    }
    wait_until(Duration::from_secs(10), "the key to go", || {
        !exists(&mut con, "p")
    });
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_clients_waiting"),
        0
    );
    assert_eq!(settled_gauges(&mut con), (0, 0));
    // A waiter that times out while another holds the lock leaves the key to that holder.
    assert!(take(
        &mut con,
        "q",
        "holder",
        &["TTL", "600000", "WRITE", "/A"]
    ));
    assert_eq!(
        acquire(&mut con, "q", &["WAIT", "100", "WRITE", "/A"]),
        None
    );
    assert!(exists(&mut con, "q"));
    assert_eq!(release(&mut con, "q", "holder", &[]), 1);
    assert!(!exists(&mut con, "q"));
}

#[test]
fn a_key_emptied_inside_a_transaction_is_gone_for_the_rest_of_it() {
    let server = Server::start();
    let mut con = server.conn();
    let (_, first) = acquire(&mut con, "p", &["TOKEN", "a", "WRITE", "/A"]).expect("granted");
    let (released, exists_after, granted): (i64, i64, (String, i64)) = redis::pipe()
        .atomic()
        .cmd("PATHLOCK.RELEASE")
        .arg(&["p", "a"])
        .cmd("EXISTS")
        .arg("p")
        .cmd("PATHLOCK.ACQUIRE")
        .arg(&["p", "TOKEN", "b", "WRITE", "/A"])
        .query(&mut con)
        .expect("MULTI/EXEC");
    assert_eq!((released, exists_after), (1, 0));
    assert!(granted.1 > first, "{} after {first}", granted.1);
    // A client watching the key sees the deletion as a change.
    let mut watcher = server.conn();
    let _: () = cmd("WATCH").arg("p").query(&mut watcher).expect("WATCH");
    assert_eq!(release(&mut con, "p", "b", &[]), 1);
    let _: () = cmd("MULTI").query(&mut watcher).expect("MULTI");
    let _: () = cmd("PING").query(&mut watcher).expect("PING queued");
    let result: Value = cmd("EXEC").query(&mut watcher).expect("EXEC");
    assert_eq!(
        result,
        Value::Nil,
        "the transaction of a watcher of a deleted key fails"
    );
}

/// The master decides the deletion and its replicas and its AOF apply it as a deletion; a
/// replica whose clock says a lease lapsed keeps the key until its master's deletion comes.
#[test]
fn replicas_and_the_aof_receive_the_deletion_and_never_decide_it() {
    let mut master = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::replica_of(&master, &[]);
    let mut m = master.conn();
    let mut r = replica.conn();
    let (_, fence) = acquire(&mut m, "released", &["TOKEN", "a", "WRITE", "/A"]).expect("granted");
    assert_eq!(release(&mut m, "released", "a", &[]), 1);
    let _: i64 = cmd("WAIT").arg(1).arg(5000).query(&mut m).expect("WAIT");
    assert!(!exists(&mut r, "released"));
    // While the master's clients are paused, it reclaims nothing: the replica's clock passes
    // the deadline, but the key stays there until the master deletes it.
    assert!(take(&mut m, "lapsed", "a", &["TTL", "200", "WRITE", "/A"]));
    let _: i64 = cmd("WAIT").arg(1).arg(5000).query(&mut m).expect("WAIT");
    let _: () = cmd("CLIENT")
        .arg(&["PAUSE", "1000", "WRITE"])
        .query(&mut m)
        .expect("CLIENT PAUSE");
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        exists(&mut r, "lapsed"),
        "the replica decides nothing by its clock"
    );
    wait_until(Duration::from_secs(10), "the master's deletion", || {
        !exists(&mut m, "lapsed") && !exists(&mut r, "lapsed")
    });
    // The AOF holds the deletion: a restart from it has no key, and a new one starts above.
    let aof = std::fs::read_dir(master.dir.join("appendonlydir"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|f| std::fs::read(f.path()).ok())
                .flatten()
                .collect::<Vec<u8>>()
        })
        .unwrap_or_else(|_| std::fs::read(master.dir.join("appendonly.aof")).unwrap_or_default());
    let text = String::from_utf8_lossy(&aof).to_uppercase();
    assert!(text.contains("UNLINK"), "the AOF records the deletions");
    master.crash_and_restart();
    let mut m = master.conn();
    assert_eq!(dbsize(&mut m), 0);
    let (_, again) = acquire(&mut m, "released", &["TOKEN", "b", "WRITE", "/A"]).expect("granted");
    assert!(again > fence, "{again} after {fence}");
}

/// Fences for a key name never go back when the key goes because it emptied: deleted and made
/// again, after a restart from an RDB saved without it, and on a promoted replica.
#[test]
fn fences_climb_across_a_deleted_and_recreated_key_a_restart_and_a_failover() {
    let mut master = Server::start();
    let replica = Server::replica_of(&master, &[]);
    let mut m = master.conn();
    let mut fences = Vec::new();
    fn grant_and_release(con: &mut Connection, fences: &mut Vec<i64>) {
        let (token, fence) = acquire(con, "p", &["WRITE", "/A"]).expect("granted");
        assert_eq!(release(con, "p", &token, &[]), 1);
        assert!(!exists(con, "p"));
        fences.push(fence);
    }
    for _ in 0..3 {
        grant_and_release(&mut m, &mut fences);
    }
    // The replica's full sync may still have its fork running on the master (it is reaped on
    // the server's next cron), which refuses SAVE for that while.
    wait_until(Duration::from_secs(20), "SAVE", || {
        cmd("SAVE").query::<()>(&mut m).is_ok()
    });
    master.crash_and_restart();
    let mut m = master.conn();
    grant_and_release(&mut m, &mut fences);
    let mut r = replica.conn();
    wait_until(Duration::from_secs(20), "the replica to sync again", || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    grant_and_release(&mut m, &mut fences);
    let _: i64 = cmd("WAIT").arg(1).arg(5000).query(&mut m).expect("WAIT");
    drop(m);
    drop(master);
    let _: () = cmd("REPLICAOF")
        .arg(&["NO", "ONE"])
        .query(&mut r)
        .expect("REPLICAOF NO ONE");
    grant_and_release(&mut r, &mut fences);
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
}
