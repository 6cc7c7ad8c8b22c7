//! Effects are built only when something would receive them (the AOF, a replica, the backlog a
//! replica resumes from), as Redis propagates its own commands. These tests attack the cases
//! where a server that sent nothing must start sending at exactly the right moment: a replica
//! that attaches to a lone master, a replica that resumes after its master restarted, the AOF
//! switched on at run time, and the module loaded at run time beside a connected replica.

use std::time::{Duration, Instant};

use crate::common::*;

const KEY: &str = "proj";

/// Every lock of `KEY` on both servers, once the replica acknowledged the master's stream.
fn assert_same_locks(master: &mut Connection, replica: &mut Connection) {
    pause_and_sync(master);
    let on_master = lock_set(master, KEY);
    assert!(!on_master.is_empty(), "the scenario left locks to compare");
    let on_replica = lock_set(replica, KEY);
    assert!(
        on_master == on_replica,
        "the replica holds {} locks, the master {}",
        on_replica.len(),
        on_master.len()
    );
    assert_eq!(digest_of(master, KEY), digest_of(replica, KEY));
    resume_writes(master);
}

/// Some acquires with generated and given tokens, and a release.
fn some_changes(con: &mut Connection, round: usize) {
    for i in 0..20 {
        let path = format!("/r{round}/f{i}");
        if i % 2 == 0 {
            let token = format!("t{round}-{i}");
            assert!(take(con, KEY, &token, &["TTL", "600000", "WRITE", &path]));
        } else {
            let _: redis::Value = cmd("PATHLOCK.ACQUIRE")
                .arg(KEY)
                .arg(&["TTL", "600000", "READ", path.as_str()])
                .query(con)
                .expect("ACQUIRE");
        }
    }
    assert_eq!(release(con, KEY, &format!("t{round}-0"), &[]), 1);
}

#[test]
fn a_lone_master_starts_sending_when_a_replica_attaches() {
    let master = Server::start();
    let mut m = master.conn();
    // Nothing listens yet: these changes reach the replica only through its full sync.
    some_changes(&mut m, 0);
    let replica = Server::replica_of(&master, &[]);
    let mut r = replica.conn();
    some_changes(&mut m, 1);
    assert_same_locks(&mut m, &mut r);
}

#[test]
fn changes_made_while_a_replica_syncs_reach_it() {
    let master = Server::start();
    let mut m = master.conn();
    // A big project makes the full sync last long enough for many changes to land in it.
    hold_many(&mut m, KEY, 50_000, "WRITE", 100);
    let port = master.port;
    let writer = std::thread::spawn(move || {
        let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .and_then(|c| c.get_connection())
            .expect("writer connection");
        let started = Instant::now();
        let mut n = 0;
        while started.elapsed() < Duration::from_millis(1500) {
            let token = format!("w{n}");
            let path = format!("/w/{n}");
            assert!(take(
                &mut con,
                KEY,
                &token,
                &["TTL", "600000", "WRITE", &path]
            ));
            n += 1;
        }
        n
    });
    let replica = Server::replica_of(&master, &[]);
    let mut r = replica.conn();
    let written = writer.join().expect("writer");
    eprintln!("propagation: {written} acquires made while the replica attached");
    assert_same_locks(&mut m, &mut r);
}

#[test]
fn a_replica_that_resumes_after_its_master_restarts_gets_every_effect() {
    let mut master = Server::start();
    let mut m = master.conn();
    let replica = Server::replica_of(&master, &["--repl-timeout", "60"]);
    let mut r = replica.conn();
    some_changes(&mut m, 0);
    pause_and_sync(&mut m);
    // The RDB records the replication ID and offset, so the restarted master can take the
    // replica back with a partial resynchronisation from its backlog.
    let _: () = cmd("SAVE").query(&mut m).expect("SAVE");
    master.crash_and_restart();
    let mut m = master.conn();
    // The first changes after the restart, made before the replica is back.
    some_changes(&mut m, 1);
    wait_until(Duration::from_secs(20), "the replica to reconnect", || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    some_changes(&mut m, 2);
    let partial = info_number(&mut m, "stats", "sync_partial_ok");
    eprintln!(
        "propagation: the replica came back with a partial resync: {}",
        partial > 0
    );
    assert_same_locks(&mut m, &mut r);
}

#[test]
fn the_aof_switched_on_at_run_time_records_every_later_change() {
    let master = Server::start();
    let mut m = master.conn();
    some_changes(&mut m, 0);
    let _: () = cmd("CONFIG")
        .arg(&["SET", "appendonly", "yes"])
        .query(&mut m)
        .expect("CONFIG SET appendonly");
    some_changes(&mut m, 1);
    wait_until(Duration::from_secs(20), "the AOF rewrite to end", || {
        info_number(&mut m, "persistence", "aof_rewrite_in_progress") == 0
            && info_number(&mut m, "persistence", "aof_rewrite_scheduled") == 0
    });
    some_changes(&mut m, 2);
    let before = lock_set(&mut m, KEY);
    let digest = digest_of(&mut m, KEY);
    let _: () = cmd("DEBUG")
        .arg("LOADAOF")
        .query(&mut m)
        .expect("DEBUG LOADAOF");
    assert_eq!(
        lock_set(&mut m, KEY),
        before,
        "the locks replayed from the AOF"
    );
    assert_eq!(digest_of(&mut m, KEY), digest);
}

#[test]
fn a_module_loaded_beside_a_connected_replica_sends_its_effects() {
    let bare = Server::start_without_module(&["--enable-module-command", "yes"]);
    let mut m = bare.conn();
    let port = bare.port.to_string();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", port.as_str()]);
    let mut r = replica.conn();
    wait_until(Duration::from_secs(20), "the replica to sync", || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    let module = module_path();
    let _: () = cmd("MODULE")
        .arg("LOAD")
        .arg(module.to_string_lossy().as_ref())
        .query(&mut m)
        .expect("MODULE LOAD");
    some_changes(&mut m, 0);
    assert_same_locks(&mut m, &mut r);
}
