//! Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) with the module loaded: the module
//! declares that it handles it where the server has it, every change made on the source while a
//! slot moves reaches the target (fences continue above every fence the source gave), a waiter
//! of a moving project is redirected and granted where the project went, the source trims the
//! slot without taking the trim for a `DEL`, a cancelled or failed migration leaves the source
//! as it was and the target without the slot's keys, the target's replica keeps exclusion when
//! it takes over right after the switch, and the reshard-under-load workload holds with
//! `CLUSTER MIGRATESLOTS` too.
//!
//! On a server without `CLUSTER MIGRATESLOTS` (Redis 7.0, Valkey 8.1) the first test checks that
//! the server's own answer is unchanged by the module, and the others say on stderr that they do
//! not apply there.

use std::process::Command;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::cluster_harness::*;
use crate::common::*;

/// The tests start clusters and time pauses on a machine of two cores, so they run one at a
/// time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether the server under test is Valkey 9 or later, which has `CLUSTER MIGRATESLOTS`.
fn has_slot_migration() -> bool {
    let out = Command::new(server_binary())
        .arg("--version")
        .output()
        .expect("server --version");
    let text = String::from_utf8_lossy(&out.stdout);
    let major = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .and_then(|v| v.split('.').next()?.parse::<u32>().ok())
        .unwrap_or(0);
    text.starts_with("Valkey") && major >= 9
}

fn not_here(test: &str) -> bool {
    if has_slot_migration() {
        return false;
    }
    eprintln!("{test}: this server has no CLUSTER MIGRATESLOTS; the test does not apply");
    true
}

/// A key whose slot `owner` serves, and that slot.
fn key_on(cluster: &Cluster, owner: &Server, prefix: &str) -> (String, i64) {
    let mut con = owner.conn();
    for i in 0.. {
        let key = format!("{prefix}:{i}");
        if cluster.owner(&key).port == owner.port {
            let slot: i64 = cmd("CLUSTER")
                .arg(&["KEYSLOT", &key])
                .query(&mut con)
                .expect("KEYSLOT");
            return (key, slot);
        }
    }
    unreachable!()
}

fn other_master<'a>(cluster: &'a Cluster, than: &Server) -> &'a Server {
    cluster
        .masters()
        .into_iter()
        .find(|m| m.port != than.port)
        .expect("another master")
}

fn start_migration(cluster: &Cluster, from: &Server, to: &Server, slot: i64) {
    let started: redis::RedisResult<String> = cmd("CLUSTER")
        .arg("MIGRATESLOTS")
        .arg("SLOTSRANGE")
        .arg(slot)
        .arg(slot)
        .arg("NODE")
        .arg(cluster.node_id(to))
        .query(&mut from.conn());
    assert_eq!(started.as_deref(), Ok("OK"), "CLUSTER MIGRATESLOTS");
}

fn wait_for_state(node: &Server, state: &str) {
    wait_for_states(node, &[state]);
}

fn wait_for_states(node: &Server, states: &[&str]) {
    let mut con = node.conn();
    wait_until(
        Duration::from_secs(30),
        &format!("the migration to be {states:?}"),
        || {
            migration_states(&mut con)
                .iter()
                .any(|s| states.contains(&s.as_str()))
        },
    );
}

/// The source streams the slot's writes to the target: before the target asks it to pause
/// (`replicating`), and while `DEBUG SLOTMIGRATION PREVENT-PAUSE` keeps it from pausing
/// (`waiting-to-pause`).
fn wait_for_streaming(node: &Server) {
    wait_for_states(node, &["replicating", "waiting-to-pause"]);
}

fn wait_for_owner(cluster: &Cluster, slot: i64, owner: &Server) {
    for node in &cluster.nodes {
        let mut con = node.conn();
        wait_until(
            Duration::from_secs(30),
            "every node to see the owner",
            || owner_port(&mut con, slot) == Some(owner.port),
        );
    }
}

fn debug_slot_migration(node: &Server, what: &str, on: bool) {
    let _: () = cmd("DEBUG")
        .arg(&["SLOTMIGRATION", what, if on { "1" } else { "0" }])
        .query(&mut node.conn())
        .expect("DEBUG SLOTMIGRATION");
}

fn pathlock_keys(node: &Server) -> i64 {
    settled_gauges(&mut node.conn()).1
}

/// The fence of an `ACQUIRE` reply.
fn fence_of(reply: &redis::RedisResult<Option<(String, i64)>>) -> i64 {
    match reply {
        Ok(Some((_, fence))) => *fence,
        other => panic!("not granted: {other:?}"),
    }
}

/// `ACQUIRE key TOKEN token WAIT ms items...` on its own connection to `node`, in a thread.
fn wait_on(
    node: &Server,
    key: &str,
    token: &str,
    wait_ms: u64,
    items: &[&str],
) -> thread::JoinHandle<redis::RedisResult<Option<(String, i64)>>> {
    let mut con = node.conn();
    let mut acquire = cmd("PATHLOCK.ACQUIRE");
    acquire
        .arg(key)
        .arg(&[
            "TOKEN",
            token,
            "TTL",
            "600000",
            "WAIT",
            &wait_ms.to_string(),
        ])
        .arg(items);
    thread::spawn(move || acquire.query(&mut con))
}

/// The module declares that it handles atomic slot migration exactly where the server has it:
/// on Valkey 9 `CLUSTER MIGRATESLOTS` is not refused because of a loaded module; elsewhere the
/// server's own answer to an unknown subcommand is unchanged.
#[test]
fn the_module_declares_atomic_slot_migration_where_the_server_has_it() {
    let _serial = serial();
    let server = Server::start_with(&["--cluster-enabled", "yes"]);
    let error = error_from(
        &mut server.conn(),
        &[
            b"CLUSTER",
            b"MIGRATESLOTS",
            b"SLOTSRANGE",
            b"0",
            b"0",
            b"NODE",
            &[b'a'; 40],
        ],
    );
    assert!(
        !error.contains("does not support atomic slot migrations"),
        "{error}"
    );
    if has_slot_migration() {
        // The node serves no slot: the server's own check answers, past the modules' one.
        assert!(error.contains("Slot 0 has no node served"), "{error}");
    } else {
        assert!(
            error.to_lowercase().contains("unknown subcommand"),
            "{error}"
        );
    }
}

/// While a slot moves (held in its streaming phase with `DEBUG SLOTMIGRATION PREVENT-PAUSE`),
/// the source grants, releases, renews, hands a lock to a waiter and reclaims a lapsed lease
/// in its expiry cycle, on a cluster without replicas or AOF, where the module builds no effect
/// for its own sake. The target ends with exactly the source's locks, and its next fence is
/// above every fence the source gave.
#[test]
fn every_change_made_on_the_source_while_a_slot_moves_reaches_the_target() {
    if not_here("every_change_made_on_the_source_while_a_slot_moves_reaches_the_target") {
        return;
    }
    let _serial = serial();
    let cluster = Cluster::start_with_replicas(0);
    let source = cluster.masters()[0];
    let target = other_master(&cluster, source);
    let (key, slot) = key_on(&cluster, source, "moving");
    let mut con = source.conn();
    assert_eq!(
        info_number(&mut con, "replication", "connected_slaves"),
        0,
        "no replica listens to the source"
    );
    let mut fences = Vec::new();
    for i in 0..5 {
        let path = format!("/early/{i}");
        let token = format!("early-{i}");
        fences.push(fence_of(
            &cmd("PATHLOCK.ACQUIRE")
                .arg(&[&key, "TOKEN", &token, "TTL", "600000", "WRITE", &path])
                .query(&mut con),
        ));
    }

    debug_slot_migration(source, "PREVENT-PAUSE", true);
    start_migration(&cluster, source, target, slot);
    wait_for_streaming(source);

    for i in 0..20 {
        let path = format!("/during/{i}");
        let token = format!("during-{i}");
        fences.push(fence_of(
            &cmd("PATHLOCK.ACQUIRE")
                .arg(&[&key, "TOKEN", &token, "TTL", "600000", "WRITE", &path])
                .query(&mut con),
        ));
    }
    assert_eq!(release(&mut con, &key, "early-0", &[]), 1);
    assert_eq!(renew(&mut con, &key, "early-1", 900_000), 1);
    // A lease that lapses and is reclaimed by the expiry cycle, a change no command makes.
    let expired = info_number(&mut con, "pathlock", "pathlock_total_expirations");
    fences.push(fence_of(
        &cmd("PATHLOCK.ACQUIRE")
            .arg(&[&key, "TOKEN", "brief", "TTL", "100", "WRITE", "/brief"])
            .query(&mut con),
    ));
    wait_until(Duration::from_secs(10), "the expiry cycle", || {
        info_number(&mut con, "pathlock", "pathlock_total_expirations") > expired
    });
    // A lock handed from its holder to a waiter by a release.
    fences.push(fence_of(
        &cmd("PATHLOCK.ACQUIRE")
            .arg(&[&key, "TOKEN", "handing", "TTL", "600000", "WRITE", "/hand"])
            .query(&mut con),
    ));
    let waiter = wait_on(source, &key, "handed", 10_000, &["WRITE", "/hand/x"]);
    wait_for_waiters(&mut source.conn(), 1);
    assert_eq!(release(&mut con, &key, "handing", &[]), 1);
    fences.push(fence_of(&waiter.join().expect("the waiter")));
    let on_source = lock_set(&mut con, &key);
    let digest = digest_of(&mut con, &key);
    let highest = *fences.iter().max().expect("fences");

    debug_slot_migration(source, "PREVENT-PAUSE", false);
    wait_for_state(source, "success");
    wait_for_owner(&cluster, slot, target);

    let mut on_target = target.conn();
    assert_eq!(
        lock_set(&mut on_target, &key),
        on_source,
        "every lock arrived"
    );
    assert_eq!(
        digest_of(&mut on_target, &key),
        digest,
        "and the fence counter"
    );
    let next = fence_of(
        &cmd("PATHLOCK.ACQUIRE")
            .arg(&[&key, "TOKEN", "after", "WRITE", "/after"])
            .query(&mut on_target),
    );
    assert!(
        next > highest,
        "the target's fence {next} is above every fence the source gave ({highest})"
    );
    assert_eq!(keys_in_slot(source, slot), 0, "the source trimmed the slot");
    assert_eq!(pathlock_keys(source), 0);
    println!(
        "atomic migration: {} fences given on the source (highest {highest}), the target's next {next}",
        fences.len()
    );
}

/// A waiter blocked on a project whose slot moves is answered `-MOVED <slot> <target>` when the
/// slot changes hands, never granted on the source, and the source's trim of the slot queues
/// nobody again and grants nobody on the empty name. Retried on the target, the waiter waits
/// behind the holder, whose lock moved, and is granted above its fence.
#[test]
fn a_waiter_of_a_moving_project_is_redirected_and_granted_on_the_target() {
    if not_here("a_waiter_of_a_moving_project_is_redirected_and_granted_on_the_target") {
        return;
    }
    let _serial = serial();
    let cluster = Cluster::start_with_replicas(0);
    let source = cluster.masters()[0];
    let target = other_master(&cluster, source);
    let (key, slot) = key_on(&cluster, source, "waited");
    let mut con = source.conn();
    let held = fence_of(
        &cmd("PATHLOCK.ACQUIRE")
            .arg(&[&key, "TOKEN", "holder", "TTL", "600000", "WRITE", "/A"])
            .query(&mut con),
    );
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            wait_on(
                source,
                &key,
                &format!("waiter-{i}"),
                20_000,
                &["WRITE", "/A/x"],
            )
        })
        .collect();
    wait_for_waiters(&mut source.conn(), 3);
    let grants = info_number(&mut con, "pathlock", "pathlock_total_grants");

    cluster.migrate_slots(source, target, slot, slot);

    let moved = format!("{slot} 127.0.0.1:{}", target.port);
    for waiter in waiters {
        let answer = waiter.join().expect("a waiter");
        let error = error_of(answer);
        assert!(
            error.starts_with("MOVED") && error.contains(&moved),
            "the waiter is redirected to the target: {error}"
        );
    }
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_total_grants"),
        grants,
        "nobody was granted on the source after the switch"
    );
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_clients_waiting"),
        0
    );
    assert_eq!(keys_in_slot(source, slot), 0, "the source trimmed the slot");
    assert_eq!(
        pathlock_keys(source),
        0,
        "and queued nobody on the empty name"
    );

    let retried = wait_on(target, &key, "waiter-0", 20_000, &["WRITE", "/A/x"]);
    wait_for_waiters(&mut target.conn(), 1);
    let mut on_target = target.conn();
    assert_eq!(release(&mut on_target, &key, "holder", &[]), 1);
    let granted = fence_of(&retried.join().expect("the retried waiter"));
    assert!(granted > held, "{granted} is above the holder's {held}");
}

/// `CLUSTER CANCELSLOTMIGRATIONS` while the slot streams: the target deletes what it imported,
/// and the source keeps every lock, waiter and fence, and goes on granting as before.
#[test]
fn a_cancelled_slot_migration_leaves_the_source_as_it_was() {
    if not_here("a_cancelled_slot_migration_leaves_the_source_as_it_was") {
        return;
    }
    let _serial = serial();
    let cluster = Cluster::start_with_replicas(0);
    let source = cluster.masters()[0];
    let target = other_master(&cluster, source);
    let (key, slot) = key_on(&cluster, source, "cancelled");
    let mut con = source.conn();
    let _ = fence_of(
        &cmd("PATHLOCK.ACQUIRE")
            .arg(&[&key, "TOKEN", "holder", "TTL", "600000", "WRITE", "/A"])
            .query(&mut con),
    );
    let waiter = wait_on(source, &key, "waiter", 30_000, &["WRITE", "/A/x"]);
    wait_for_waiters(&mut source.conn(), 1);

    debug_slot_migration(source, "PREVENT-PAUSE", true);
    start_migration(&cluster, source, target, slot);
    wait_for_streaming(source);
    wait_until(
        Duration::from_secs(10),
        "the snapshot on the target",
        || pathlock_keys(target) == 1,
    );
    let during = fence_of(
        &cmd("PATHLOCK.ACQUIRE")
            .arg(&[&key, "TOKEN", "during", "TTL", "600000", "WRITE", "/during"])
            .query(&mut con),
    );
    let before = lock_set(&mut con, &key);
    let digest = digest_of(&mut con, &key);

    let _: () = cmd("CLUSTER")
        .arg("CANCELSLOTMIGRATIONS")
        .query(&mut con)
        .expect("CANCELSLOTMIGRATIONS");
    wait_for_state(source, "cancelled");
    debug_slot_migration(source, "PREVENT-PAUSE", false);
    wait_for_state(target, "failed");
    wait_until(
        Duration::from_secs(10),
        "the target to delete its import",
        || pathlock_keys(target) == 0,
    );
    assert_eq!(owner_port(&mut con, slot), Some(source.port));
    assert_eq!(lock_set(&mut con, &key), before, "every lock stayed");
    assert_eq!(digest_of(&mut con, &key), digest, "and the fence counter");
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_clients_waiting"),
        1,
        "the waiter still waits"
    );
    assert_eq!(release(&mut con, &key, "holder", &[]), 1);
    let granted = fence_of(&waiter.join().expect("the waiter"));
    assert_eq!(granted, during + 1, "fences go on from where they were");
}

/// A migration that fails at its last step: the target never takes the slot over (`DEBUG
/// SLOTMIGRATION PREVENT-FAILOVER`), so the source stays paused until its pause times out.
/// Meanwhile a waiter's time runs out, which would let the waiter behind it in; nothing is
/// granted while the source is paused (the stream to the target is closed by then, and the
/// server refuses to propagate), the server does not stop, and once the migration has failed
/// the second waiter is granted on the source, where every lock stayed, and the target keeps
/// no key of the slot.
#[test]
fn a_failed_slot_migration_grants_nothing_while_paused_and_leaves_the_source_as_it_was() {
    if not_here(
        "a_failed_slot_migration_grants_nothing_while_paused_and_leaves_the_source_as_it_was",
    ) {
        return;
    }
    let _serial = serial();
    let cluster = Cluster::start_with_replicas(0);
    let source = cluster.masters()[0];
    let target = other_master(&cluster, source);
    let (key, slot) = key_on(&cluster, source, "failing");
    let mut con = source.conn();
    let _: () = cmd("CONFIG")
        .arg(&["SET", "cluster-manual-failover-timeout", "5000"])
        .query(&mut con)
        .expect("CONFIG SET");
    let held = fence_of(
        &cmd("PATHLOCK.ACQUIRE")
            .arg(&[&key, "TOKEN", "reader", "TTL", "600000", "READ", "/A"])
            .query(&mut con),
    );
    // The writer waits behind the reader; the second reader is compatible with the first but
    // not with the writer queued before it, so it waits behind the writer.
    let writer = wait_on(source, &key, "writer", 5_000, &["WRITE", "/A"]);
    wait_for_waiters(&mut source.conn(), 1);
    let reader = wait_on(source, &key, "reader-2", 60_000, &["READ", "/A/x"]);
    wait_for_waiters(&mut source.conn(), 2);
    let before = lock_set(&mut con, &key);
    let grants = info_number(&mut con, "pathlock", "pathlock_total_grants");

    debug_slot_migration(target, "PREVENT-FAILOVER", true);
    let started = Instant::now();
    start_migration(&cluster, source, target, slot);
    wait_for_state(source, "failover-granted");
    // The pause lasts twice the manual-failover timeout, 10 s.
    assert!(
        started.elapsed() < Duration::from_millis(4_500),
        "the source paused before the writer's time runs out"
    );
    assert_eq!(
        writer.join().expect("the writer"),
        Ok(None),
        "the writer timed out"
    );
    let paused = migration_states(&mut con)
        .iter()
        .any(|s| s == "failover-granted");
    assert!(
        paused,
        "the source was still paused when the writer timed out"
    );
    thread::sleep(Duration::from_millis(300));
    if migration_states(&mut con)
        .iter()
        .any(|s| s == "failover-granted")
    {
        assert_eq!(
            info_number(&mut con, "pathlock", "pathlock_total_grants"),
            grants,
            "nothing is granted while the source is paused"
        );
    }

    wait_for_state(source, "failed");
    let granted = fence_of(&reader.join().expect("the second reader"));
    assert!(granted > held);
    let mut on_target = target.conn();
    wait_until(
        Duration::from_secs(20),
        "the target to give the import up",
        || {
            migration_states(&mut on_target)
                .iter()
                .any(|s| s == "failed")
        },
    );
    debug_slot_migration(target, "PREVENT-FAILOVER", false);
    wait_until(
        Duration::from_secs(10),
        "the target to delete its import",
        || pathlock_keys(target) == 0,
    );
    assert_eq!(owner_port(&mut con, slot), Some(source.port));
    let mut after = lock_set(&mut con, &key);
    after.retain(|(_, _, token, _)| token != b"reader-2");
    assert_eq!(after, before, "every lock stayed on the source");
    let pong: String = cmd("PING").query(&mut con).expect("PING");
    assert_eq!(pong, "PONG");
}

/// Right after a slot moved, the target grants a lock and `WAIT 1` confirms that its replica
/// has it; a manual failover of the target then keeps every lock (those that moved with the
/// slot too), exclusion holds on the new master and fences go on above the old ones.
#[test]
fn a_failover_of_the_target_right_after_the_switch_keeps_exclusion() {
    if not_here("a_failover_of_the_target_right_after_the_switch_keeps_exclusion") {
        return;
    }
    let _serial = serial();
    let cluster = Cluster::start();
    let source = cluster.masters()[0];
    let target = other_master(&cluster, source);
    let (key, slot) = key_on(&cluster, source, "failover");
    let mut con = source.conn();
    let moved = fence_of(
        &cmd("PATHLOCK.ACQUIRE")
            .arg(&[&key, "TOKEN", "moved", "TTL", "600000", "WRITE", "/A"])
            .query(&mut con),
    );

    cluster.migrate_slots(source, target, slot, slot);

    let mut on_target = target.conn();
    let after = fence_of(
        &cmd("PATHLOCK.ACQUIRE")
            .arg(&[&key, "TOKEN", "after", "TTL", "600000", "WRITE", "/B"])
            .query(&mut on_target),
    );
    assert!(after > moved);
    let acked: i64 = cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut on_target)
        .expect("WAIT");
    assert_eq!(acked, 1, "the target's replica has the grant");
    let digest = digest_of(&mut on_target, &key);

    let replica = cluster.replica_of(target);
    cluster.fail_over_to(replica, slot);
    let mut promoted = replica.conn();
    assert_eq!(
        digest_of(&mut promoted, &key),
        digest,
        "every lock survived"
    );
    for (token, path) in [("intruder", "/A"), ("intruder", "/B")] {
        assert!(
            !take(&mut promoted, &key, token, &["WRITE", path]),
            "{path} stays held on the new master"
        );
    }
    let next = fence_of(
        &cmd("PATHLOCK.ACQUIRE")
            .arg(&[&key, "TOKEN", "next", "WRITE", "/C"])
            .query(&mut promoted),
    );
    assert!(next > after, "fences go on: {next} > {after}");
}

/// The reshard-under-load workload (`cluster_harness::reshard_under_load`) with the slots moved
/// by `CLUSTER MIGRATESLOTS`: no two conflicting holds at once, no fence going back, every
/// anchor's waiter granted where its project went.
#[test]
fn exclusion_and_fences_hold_while_slots_with_waiters_move_atomically() {
    if not_here("exclusion_and_fences_hold_while_slots_with_waiters_move_atomically") {
        return;
    }
    let _serial = serial();
    reshard_under_load(Mover::MigrateSlots);
}
