//! Redis Cluster on loopback: 3 masters with a replica each, the module on every node. Projects
//! spread over all slots are served through a cluster-aware client; a node that does not own a
//! key answers -MOVED; resharding carries every lock (equal digests on the new owner); a manual
//! failover keeps every lock acknowledged with `WAIT 1`, and fences continue above the old ones.

use std::collections::BTreeMap;
use std::process::Command;

use crate::cluster_harness::*;
use crate::common::*;

fn digests(cluster: &Cluster, keys: &[String]) -> BTreeMap<String, String> {
    keys.iter()
        .map(|key| {
            let mut con = cluster.owner(key).conn();
            (key.clone(), digest_of(&mut con, key))
        })
        .collect()
}

#[test]
fn a_cluster_routes_reshards_and_fails_over_with_every_lock() {
    let cluster = Cluster::start();
    let mut client = cluster.client();

    // Projects spread over all slots, through a cluster-aware client.
    let keys: Vec<String> = (0..300).map(|i| format!("proj:{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let granted: Option<(String, i64)> = cmd("PATHLOCK.ACQUIRE")
            .arg(key)
            .arg(&[
                "TOKEN",
                &format!("t{i}"),
                "TTL",
                "600000",
                "WRITE",
                "/A/C",
                "READ",
                "/B",
            ])
            .query(&mut client)
            .expect("ACQUIRE through the cluster");
        assert_eq!(granted.map(|g| g.0), Some(format!("t{i}")));
    }
    let refused: Option<(String, i64)> = cmd("PATHLOCK.ACQUIRE")
        .arg(&["proj:7", "WRITE", "/A"])
        .query(&mut client)
        .expect("ACQUIRE");
    assert_eq!(refused, None);
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    let per_master: Vec<i64> = masters
        .iter()
        .map(|m| info_number(&mut m.conn(), "pathlock", "pathlock_keys"))
        .collect();
    assert!(per_master.iter().all(|&n| n > 50), "{per_master:?}");
    assert_eq!(per_master.iter().sum::<i64>(), 300);

    // A node that does not own the key redirects.
    let owner = cluster.owner("proj:0");
    let other = masters
        .iter()
        .find(|m| m.port != owner.port)
        .expect("another master");
    let error = error_of(try_acquire(&mut other.conn(), "proj:0", &["WRITE", "/x"]));
    assert!(error.starts_with("MOVED"), "{error}");
    // The reading commands route by their key too, an owner's listing and the queue included.
    assert_refused(
        &mut other.conn(),
        "MOVED",
        &[
            &[b"PATHLOCK.LOCKS", b"proj:0", b"TOKEN", b"t0"],
            &[b"PATHLOCK.WAITERS", b"proj:0", b"/A"],
        ],
    );
    let owned: Vec<LockEntry> = cmd("PATHLOCK.LOCKS")
        .arg(&["proj:0", "TOKEN", "t0"])
        .query(&mut client)
        .expect("LOCKS TOKEN through the cluster");
    assert_eq!(owned.len(), 2);
    assert_eq!(
        count_entries(&mut client, &["PATHLOCK.WAITERS", "proj:0"]),
        0
    );

    // Resharding moves slots with their project keys, locks intact.
    let before = digests(&cluster, &keys);
    let owners_before: Vec<u16> = keys.iter().map(|k| cluster.owner(k).port).collect();
    let from = cluster.owner("proj:0");
    let to = masters
        .iter()
        .find(|m| m.port != from.port)
        .expect("target");
    cluster.reshard(from, to, 2000);
    cluster.wait_until_ok();
    let owners_after: Vec<u16> = keys.iter().map(|k| cluster.owner(k).port).collect();
    let moved_keys = owners_before
        .iter()
        .zip(&owners_after)
        .filter(|(b, a)| b != a)
        .count();
    assert!(moved_keys > 0, "the reshard moved project keys");
    let after = digests(&cluster, &keys);
    assert_eq!(before, after, "every lock arrived intact");
    assert!(!take(&mut client, "proj:0", "intruder", &["WRITE", "/A"]));

    // Manual failover: a replica takes over a master with every lock acknowledged by WAIT 1.
    let master = cluster.owner("proj:0");
    let mut m = master.conn();
    let granted = acquire(
        &mut m,
        "proj:0",
        &["TOKEN", "late", "TTL", "600000", "WRITE", "/Z"],
    )
    .expect("granted");
    let acked: i64 = cmd("WAIT").arg(1).arg(5000).query(&mut m).expect("WAIT");
    assert_eq!(acked, 1);
    let replica = cluster.replica_of(master);
    let owned: Vec<String> = keys
        .iter()
        .filter(|k| cluster.owner(k).port == master.port)
        .cloned()
        .collect();
    let before = digests(&cluster, &owned);
    let slot: i64 = cmd("CLUSTER")
        .arg(&["KEYSLOT", "proj:0"])
        .query(&mut m)
        .expect("KEYSLOT");
    cluster.fail_over_to(replica, slot);
    cluster.wait_until_ok();
    assert_eq!(
        digests(&cluster, &owned),
        before,
        "no acknowledged lock was lost"
    );
    let mut client = cluster.client();
    let next: Option<(String, i64)> = cmd("PATHLOCK.ACQUIRE")
        .arg(&["proj:0", "WRITE", "/new"])
        .query(&mut client)
        .expect("ACQUIRE");
    assert_eq!(
        next.map(|g| g.1),
        Some(granted.1 + 1),
        "fences continue above the old master's"
    );
    println!(
        "cluster: {} keys over {per_master:?}; resharding 2000 slots moved {moved_keys} keys; failed over with {} keys",
        keys.len(),
        owned.len()
    );
}

/// A project held on the master that serves `key`, with a client waiting on it there.
struct Awaited<'a> {
    source: &'a Server,
    /// Another master, where the slot can move.
    target: &'a Server,
    con: Connection,
    waiter: std::thread::JoinHandle<redis::RedisResult<Option<(String, i64)>>>,
    slot: i64,
}

/// `holder` takes `WRITE /A` in `key` on its master, and `waiter` waits there for `WRITE /A/x`.
fn held_and_awaited<'a>(cluster: &'a Cluster, key: &'static str) -> Awaited<'a> {
    let source = cluster.owner(key);
    let target = cluster
        .masters()
        .into_iter()
        .find(|m| m.port != source.port)
        .expect("another master");
    let mut con = source.conn();
    assert!(take(
        &mut con,
        key,
        "holder",
        &["TTL", "60000", "WRITE", "/A"]
    ));
    let mut waiting = source.conn();
    let waiter = std::thread::spawn(move || {
        cmd("PATHLOCK.ACQUIRE")
            .arg(&[key, "TOKEN", "waiter", "WAIT", "10000", "WRITE", "/A/x"])
            .query::<Option<(String, i64)>>(&mut waiting)
    });
    wait_for_blocked(&mut con, 1);
    let slot: i64 = cmd("CLUSTER")
        .arg(&["KEYSLOT", key])
        .query(&mut con)
        .expect("KEYSLOT");
    Awaited {
        source,
        target,
        con,
        waiter,
        slot,
    }
}

/// A waiter of a project whose slot is being migrated follows it: `MIGRATE` answers it
/// `-ASK <slot> <host>:<port>` of the importing node, nothing is granted on the node the project
/// left, and that node keeps no key in the slot it gave away.
#[test]
fn a_waiter_of_a_migrating_project_is_redirected_with_ask() {
    migrate_with_a_waiter(false);
}

/// The same when the `MIGRATE` is queued in `MULTI` and run by `EXEC`, where Redis runs no
/// command filter.
#[test]
fn a_waiter_of_a_project_migrated_in_a_transaction_is_redirected_with_ask() {
    migrate_with_a_waiter(true);
}

fn migrate_with_a_waiter(in_transaction: bool) {
    let cluster = Cluster::start();
    let key = "proj:ask";
    let Awaited {
        source,
        target,
        mut con,
        waiter,
        slot,
    } = held_and_awaited(&cluster, key);
    let (source_id, target_id) = (cluster.node_id(source), cluster.node_id(target));
    let setslot = |node: &Server, args: &[&str]| {
        let _: () = cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(args)
            .query(&mut node.conn())
            .expect("CLUSTER SETSLOT");
    };
    setslot(target, &["IMPORTING", &source_id]);
    setslot(source, &["MIGRATING", &target_id]);
    let mut migrate = redis::pipe();
    if in_transaction {
        migrate.atomic();
    }
    migrate.cmd("MIGRATE").arg(&[
        "127.0.0.1",
        &target.port.to_string(),
        "",
        "0",
        "5000",
        "KEYS",
        key,
    ]);
    let (migrated,): (String,) = migrate.query(&mut con).expect("MIGRATE");
    assert_eq!(migrated, "OK");
    let error = error_of(waiter.join().expect("the waiter"));
    assert_eq!(error, format!("ASK {slot} 127.0.0.1:{}", target.port));
    for node in cluster.masters() {
        setslot(node, &["NODE", &target_id]);
    }
    assert_eq!(
        keys_in_slot(source, slot),
        0,
        "the source keeps no key in the slot it gave away"
    );
    cluster.wait_until_ok();
    // The waiter retries through the cluster and finds the project, held, where it is now.
    let mut client = cluster.client();
    assert!(!take(&mut client, key, "waiter", &["WRITE", "/A/x"]));
    let checked = Command::new(cli_binary())
        .args(["--cluster", "check", &format!("127.0.0.1:{}", target.port)])
        .output()
        .expect("redis-cli --cluster check");
    let report = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success() && !report.contains("[WARNING]"),
        "{report}"
    );
}

/// A waiter whose project is deleted while its slot migrates away is not granted on the source
/// (which would leave a key there in a slot it gives away): it is told to try again, and the
/// retry is routed to the importing node.
#[test]
fn a_waiter_of_a_project_deleted_during_migration_is_told_to_try_again() {
    let cluster = Cluster::start();
    let key = "proj:del";
    let Awaited {
        source,
        target,
        mut con,
        waiter,
        slot,
    } = held_and_awaited(&cluster, key);
    let _: () = cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg(&["MIGRATING", &cluster.node_id(target)])
        .query(&mut con)
        .expect("SETSLOT MIGRATING");
    let _: i64 = cmd("DEL").arg(key).query(&mut con).expect("DEL");
    let error = error_of(waiter.join().expect("the waiter"));
    assert!(error.starts_with("TRYAGAIN"), "{error}");
    assert_eq!(
        keys_in_slot(source, slot),
        0,
        "nothing was created in the migrating slot"
    );
    let retried = error_of(try_acquire(
        &mut con,
        key,
        &["TOKEN", "waiter", "WRITE", "/A/x"],
    ));
    assert!(retried.starts_with("ASK"), "{retried}");
}

/// Under a load of acquires, renews and releases through a cluster client, the slots of six
/// projects move between the three masters twelve times with `redis-cli --cluster reshard`
/// (`cluster_harness::reshard_under_load`): no two conflicting holds at once, no fence going
/// back, every anchor's waiter granted where its project went.
#[test]
fn exclusion_and_fences_hold_while_slots_with_waiters_are_resharded() {
    reshard_under_load(Mover::Reshard);
}
