//! Fences never go back for a key name (`docs/commands.md`, "Fences"): while a key exists each grant takes the
//! previous fence + 1, and a key created again after `DEL`, `UNLINK`, `FLUSHALL`, a restart from
//! RDB or AOF (with and without the RDB preamble), a failover to a replica, or on another shard
//! after a reshard starts above every fence given before. Eviction is in `eviction.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::Duration;

use crate::common::*;

const LIMIT: i64 = 1 << 53;

/// Grants `count` acquires on `key` with fresh tokens; returns their fences, checking that each
/// is the previous + 1 and below 2^53.
fn grants(con: &mut Connection, key: &str, count: usize) -> Vec<i64> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let fences: Vec<i64> = (0..count)
        .map(|_| {
            let path = format!("/g{}", NEXT.fetch_add(1, Ordering::Relaxed));
            acquire(con, key, &["TTL", "600000", "WRITE", &path])
                .expect("granted")
                .1
        })
        .collect();
    for pair in fences.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "{fences:?}");
    }
    assert!(fences.iter().all(|f| (1..LIMIT).contains(f)), "{fences:?}");
    fences
}

fn next_fence(con: &mut Connection, key: &str) -> i64 {
    grants(con, key, 1)[0]
}

fn run(con: &mut Connection, args: &[&str]) {
    let _: Value = cmd(args[0]).arg(&args[1..]).query(con).expect("command");
}

#[test]
fn deleting_unlinking_or_flushing_never_restarts_the_counter() {
    let server = Server::start();
    let mut con = server.conn();
    let mut last = *grants(&mut con, "p", 5).last().expect("fences");
    for removal in [
        &["DEL", "p"][..],
        &["UNLINK", "p"],
        &["FLUSHALL"],
        &["FLUSHALL", "ASYNC"],
        &["FLUSHDB"],
    ] {
        run(&mut con, removal);
        let exists: i64 = cmd("EXISTS").arg("p").query(&mut con).expect("EXISTS");
        assert_eq!(exists, 0, "{removal:?}");
        let fences = grants(&mut con, "p", 3);
        assert!(fences[0] > last, "{removal:?}: {fences:?} after {last}");
        last = fences[2];
    }
    // Another key name starts above every fence the server gave, too.
    assert!(next_fence(&mut con, "q") > last);
    // A key overwritten by another type and locked again.
    run(&mut con, &["SET", "p", "x"]);
    run(&mut con, &["DEL", "p"]);
    assert!(next_fence(&mut con, "p") > last);
}

/// Deletes every key, persists, crashes and restarts: the next key of the same name starts
/// above the last fence.
fn after_restart(extra: &[&str], persist: &[&str]) {
    let mut server = Server::start_with(extra);
    let mut con = server.conn();
    let last = *grants(&mut con, "p", 20).last().expect("fences");
    run(&mut con, &["DEL", "p"]);
    run(&mut con, persist);
    wait_until(Duration::from_secs(20), "persistence", || {
        info_number(&mut con, "persistence", "aof_rewrite_in_progress") == 0
            && info_number(&mut con, "persistence", "aof_rewrite_scheduled") == 0
            && info_number(&mut con, "persistence", "rdb_bgsave_in_progress") == 0
    });
    server.crash_and_restart();
    let mut con = server.conn();
    let dbsize: i64 = cmd("DBSIZE").query(&mut con).expect("DBSIZE");
    assert_eq!(dbsize, 0, "{extra:?}");
    let fence = next_fence(&mut con, "p");
    assert!(
        fence > last,
        "{extra:?} {persist:?}: {fence} after {last}; log:\n{}",
        server.log()
    );
}

#[test]
fn a_restart_from_an_rdb_saved_with_no_project_left_keeps_fences_above() {
    after_restart(&[], &["SAVE"]);
}

#[test]
fn a_restart_from_an_aof_with_the_rdb_preamble_keeps_fences_above() {
    after_restart(&aof_always("yes"), &["BGREWRITEAOF"]);
}

#[test]
fn a_restart_from_an_aof_without_the_rdb_preamble_keeps_fences_above() {
    let aof = aof_always("no");
    // Replayed: the effects in the AOF raise the mark again.
    after_restart(&aof, &["PING"]);
    // Rewritten after the deletion: the AOF holds nothing of the project, and the clock floor
    // keeps the new key above.
    after_restart(&aof, &["BGREWRITEAOF"]);
}

#[test]
fn a_promoted_replica_starts_new_keys_above_the_fences_it_received() {
    let (master, _replica, mut m, mut r) = master_and_replica();
    let last = *grants(&mut m, "p", 10).last().expect("fences");
    let _: i64 = cmd("WAIT").arg(1).arg(5000).query(&mut m).expect("WAIT");
    assert_eq!(digest_of(&mut m, "p"), digest_of(&mut r, "p"));
    assert_eq!(
        info_number(&mut r, "pathlock", "pathlock_fence_mark"),
        info_number(&mut m, "pathlock", "pathlock_fence_mark"),
        "the replica's mark follows the effects it applied"
    );
    drop(m);
    drop(master);
    promote(&mut r);
    assert_eq!(next_fence(&mut r, "p"), last + 1);
    run(&mut r, &["DEL", "p"]);
    assert!(next_fence(&mut r, "p") > last + 1);
}

#[test]
fn a_replica_that_syncs_after_the_deletion_gets_the_mark_from_the_rdb() {
    let master = Server::start();
    let mut m = master.conn();
    let last = *grants(&mut m, "p", 10).last().expect("fences");
    run(&mut m, &["DEL", "p"]);
    // The full sync carries no project, only the mark in the RDB's aux data.
    let replica = Server::replica_of(&master, &[]);
    let mut r = replica.conn();
    assert!(info_number(&mut r, "pathlock", "pathlock_fence_mark") > last);
    drop(m);
    drop(master);
    promote(&mut r);
    assert!(next_fence(&mut r, "p") > last);
}

#[test]
fn a_key_created_on_a_master_replicates_its_first_fence_and_never_decides_it_on_the_replica() {
    let (_master, _replica, mut m, mut r) = master_and_replica();
    for key in ["a", "b", "c"] {
        grants(&mut m, key, 2);
        run(&mut m, &["DEL", key]);
        grants(&mut m, key, 2);
    }
    let _: i64 = cmd("WAIT").arg(1).arg(5000).query(&mut m).expect("WAIT");
    for key in ["a", "b", "c"] {
        assert_eq!(digest_of(&mut m, key), digest_of(&mut r, key), "{key}");
    }
}

/// A project deleted on one shard and created again on another after a reshard (here two
/// independent servers, as two Cluster shards are): the new shard knows nothing of the old
/// fences, and the clock floor starts the key above them, given clocks that agree and fewer
/// than a thousand grants per millisecond. A key moved with its value (`MIGRATE`, as a
/// reshard of a live key does) keeps counting where it was.
#[test]
fn a_key_recreated_on_another_shard_starts_above_the_old_shards_fences() {
    let old = Server::start();
    let new = Server::start();
    let mut a = old.conn();
    let mut b = new.conn();
    let last = *grants(&mut a, "p", 200).last().expect("fences");
    run(&mut a, &["DEL", "p"]);
    sleep(Duration::from_millis(2));
    let fence = next_fence(&mut b, "p");
    assert!(fence > last, "{fence} after {last}");
    // A live key moved with its value continues.
    let last = *grants(&mut a, "q", 5).last().expect("fences");
    let port = new.port.to_string();
    run(&mut a, &["MIGRATE", "127.0.0.1", &port, "q", "0", "5000"]);
    assert_eq!(next_fence(&mut b, "q"), last + 1);
}
