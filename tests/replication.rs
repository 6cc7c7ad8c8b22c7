//! Replication of effects: a master and a replica on loopback agree after random workloads with
//! expiries, an AOF replay reaches the same state, a replica never decides on its own, and a
//! promoted replica takes over expiry and fencing.

use std::thread::sleep;
use std::time::Duration;

use crate::common::*;

const KEYS: &[&str] = &["proj:1", "proj:2", "proj:3", "{x}:4"];
const TOKENS: &[&str] = &["t0", "t1", "t2", "t3", "t4", "t5"];
const PATHS: &[&str] = &[
    "/", "/a", "/a/b", "/a/bc", "/ab", "/a/b/c", "/b", "/b/x y", "/a-", "/c/%", "/d/1", "/d/2",
    "/d/3", "/d/4", "/e/1/x", "/e/2/x", "/e/3/x", "/f", "/g", "/h",
];

/// One random command: acquires (some multi-path, some with generated tokens, most with short
/// leases so that expiries happen throughout), releases, renews, reads and the odd DEL.
fn random_command(con: &mut Connection, rng: &mut Rng) {
    let key = *rng.pick(KEYS);
    let token = *rng.pick(TOKENS);
    match rng.below(100) {
        0..=49 => {
            let ttl = if rng.below(20) == 0 {
                60_000
            } else {
                5 + rng.below(150)
            };
            let mut command = cmd("PATHLOCK.ACQUIRE");
            command.arg(key);
            if rng.below(10) > 0 {
                command.arg("TOKEN").arg(token);
            }
            command.arg("TTL").arg(ttl);
            for _ in 0..=rng.below(3) {
                let mode = if rng.below(2) == 0 { "READ" } else { "WRITE" };
                command.arg(mode).arg(*rng.pick(PATHS));
            }
            let _: Value = command.query(con).expect("ACQUIRE");
        }
        50..=69 => {
            let mut command = cmd("PATHLOCK.RELEASE");
            command.arg(key).arg(token);
            for _ in 0..rng.below(3) {
                command.arg(*rng.pick(PATHS));
            }
            let _: i64 = command.query(con).expect("RELEASE");
        }
        70..=79 => {
            let ms = if rng.below(5) == 0 {
                60_000
            } else {
                1 + rng.below(100)
            };
            renew(con, key, token, ms);
        }
        80..=93 => {
            let _: Value = cmd("PATHLOCK.CHECK")
                .arg(key)
                .arg(&["WRITE", *rng.pick(PATHS)])
                .query(con)
                .expect("CHECK");
        }
        94..=98 => {
            let _: Value = cmd("PATHLOCK.LOCKS").arg(key).query(con).expect("LOCKS");
        }
        _ => {
            let _: i64 = cmd("DEL").arg(key).query(con).expect("DEL");
        }
    }
}

/// Stops the master's writes (its expiry cycle included), lets the replica catch up, and
/// compares every key's digest and the whole dataset's.
fn assert_replica_agrees(master: &mut Connection, replica: &mut Connection) {
    pause_and_sync(master);
    for key in KEYS {
        assert_eq!(digest_of(master, key), digest_of(replica, key), "{key}");
    }
    assert_eq!(dataset_digest(master), dataset_digest(replica));
    // Deleted projects may still be in either server's lazy-free thread (Valkey's default).
    assert_eq!(settled_gauges(master), settled_gauges(replica), "gauges");
    resume_writes(master);
}

#[test]
fn a_replica_reaches_the_masters_state_after_a_random_workload() {
    let master = Server::start_with(&["--appendonly", "yes"]);
    let replica = Server::replica_of(&master, &["--appendonly", "yes"]);
    let mut m = master.conn();
    let mut r = replica.conn();
    let mut rng = Rng::new(0x5eed_0001);
    for round in 0..4 {
        for _ in 0..1000 {
            random_command(&mut m, &mut rng);
        }
        if round == 1 {
            // Let short leases lapse so that the expiry cycle, not a command, reclaims them.
            sleep(Duration::from_millis(300));
        }
        assert_replica_agrees(&mut m, &mut r);
    }
    let expirations = info_number(&mut m, "pathlock", "pathlock_total_expirations");
    let grants = info_number(&mut m, "pathlock", "pathlock_total_grants");
    let conflicts = info_number(&mut m, "pathlock", "pathlock_total_conflicts");
    println!("workload: {grants} grants, {conflicts} conflicts, {expirations} expirations");
    assert!(
        expirations > 100 && conflicts > 100 && grants > 500,
        "the workload exercised little"
    );

    // An AOF replay, on the master and on the replica (whose AOF holds the effects it
    // applied), reaches the same state.
    pause_and_sync(&mut m);
    let before = dataset_digest(&mut m);
    for con in [&mut m, &mut r] {
        let _: () = cmd("DEBUG")
            .arg("LOADAOF")
            .query(con)
            .expect("DEBUG LOADAOF");
        assert_eq!(dataset_digest(con), before);
    }
    resume_writes(&mut m);
}

#[test]
fn a_replica_refuses_writes_and_never_expires_on_its_own() {
    let (_master, _replica, mut m, mut r) = master_and_replica();
    assert!(take(&mut m, "p", "long", &["TTL", "60000", "WRITE", "/A"]));
    // Brief, but long enough to outlive the checks before the pause on a loaded machine.
    assert!(take(&mut m, "p", "brief", &["TTL", "3000", "WRITE", "/B"]));
    let _: i64 = cmd("WAIT").arg(1).arg(5000).query(&mut m).expect("WAIT");

    let error = error_of(try_acquire(&mut r, "p", &["WRITE", "/C"]));
    assert!(error.starts_with("READONLY"), "{error}");
    let error = error_of(
        cmd("PATHLOCK.EFFECT")
            .arg(&["p", "FENCE", "99"])
            .query::<()>(&mut m),
    );
    assert!(
        error.starts_with("ERR PATHLOCK.EFFECT is internal"),
        "{error}"
    );

    // With the master paused, the brief lease lapses. The replica hides it from reads but keeps
    // it, because only the master's effect may remove it.
    let _: () = cmd("CLIENT")
        .arg(&["PAUSE", "5000", "WRITE"])
        .query(&mut m)
        .expect("PAUSE");
    assert_eq!(
        lock_set(&mut r, "p").len(),
        2,
        "both leases are live before the pause ends"
    );
    sleep(Duration::from_millis(3200));
    let listed = lock_set(&mut r, "p");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(info_number(&mut r, "pathlock", "pathlock_locks"), 2);
    assert_eq!(digest_of(&mut r, "p"), digest_of(&mut m, "p"));
    resume_writes(&mut m);
    // Unpaused, the master reclaims it and the replica follows.
    wait_until(
        Duration::from_secs(5),
        "the reclamation to replicate",
        || info_number(&mut r, "pathlock", "pathlock_locks") == 1,
    );
    assert_eq!(digest_of(&mut r, "p"), digest_of(&mut m, "p"));
}

#[test]
fn a_promoted_replica_expires_locks_and_fences_above_what_it_received() {
    let (master, _replica, mut m, mut r) = master_and_replica();
    let mut last = 0;
    for i in 0..50 {
        let (token, path) = (format!("t{i}"), format!("/f{i}"));
        last = acquire(
            &mut m,
            "p",
            &["TOKEN", &token, "TTL", "60000", "WRITE", &path],
        )
        .expect("granted")
        .1;
    }
    for i in 0..5 {
        let path = format!("/g{i}");
        last = acquire(
            &mut m,
            "p",
            &["TOKEN", "brief", "TTL", "1500", "WRITE", &path],
        )
        .expect("granted")
        .1;
    }
    let _: i64 = cmd("WAIT").arg(1).arg(5000).query(&mut m).expect("WAIT");
    // Freeze the master so that it reclaims nothing, then lose it.
    let _: () = cmd("CLIENT")
        .arg(&["PAUSE", "20000", "WRITE"])
        .query(&mut m)
        .expect("PAUSE");
    drop(m);
    drop(master);
    assert_eq!(info_number(&mut r, "pathlock", "pathlock_locks"), 55);

    promote(&mut r);
    wait_until(
        Duration::from_secs(5),
        "the promoted replica to reclaim",
        || info_number(&mut r, "pathlock", "pathlock_locks") == 50,
    );
    assert!(info_number(&mut r, "pathlock", "pathlock_total_expirations") >= 5);
    // The next fence follows the last one granted on the old master, never a reused one.
    assert_eq!(
        acquire(&mut r, "p", &["WRITE", "/new"]).map(|g| g.1),
        Some(last + 1)
    );
    assert!(
        !take(&mut r, "p", "x", &["READ", "/f7"]),
        "received locks still hold"
    );
}

/// Effects of up to ten words replicate with buffer arguments; longer ones (a grant of four or
/// more paths, a release naming three) take the general path. Both must reach the replica.
#[test]
fn long_effects_replicate_like_short_ones() {
    let (_master, _replica, mut m, mut r) = master_and_replica();
    let many: Vec<String> = (0..6)
        .flat_map(|i| ["WRITE".to_string(), format!("/many/{i}")])
        .collect();
    let mut args = vec!["TOKEN", "wide", "TTL", "60000"];
    args.extend(many.iter().map(String::as_str));
    assert!(acquire(&mut m, "p", &args).is_some());
    assert!(take(&mut m, "p", "one", &["READ", "/solo"]));
    assert_eq!(
        release(&mut m, "p", "wide", &["/many/0", "/many/1", "/many/2"]),
        3
    );
    assert_eq!(renew(&mut m, "p", "wide", 90_000), 3);
    pause_and_sync(&mut m);
    assert_eq!(lock_set(&mut r, "p").len(), 4);
    assert_eq!(digest_of(&mut m, "p"), digest_of(&mut r, "p"));
    resume_writes(&mut m);
}

/// The replies of the transaction below: INFO, two ACQUIREs, RENEW, RELEASE, LOCKS, INFO.
type Transaction = (String, Value, Value, i64, i64, Vec<LockEntry>, String);

/// Right after a mass expiry, commands reclaim only what they need (their own token, the lapsed
/// leases in their way, two more owners each), replicate it naming the owners, and leave the rest
/// to the expiry cycle; the replica and an AOF replay agree before and after the cycle's work.
#[test]
fn lazy_expiry_reclaims_what_commands_need_and_replicates_it_exactly() {
    const LOCKS: usize = 5000;
    let master = Server::start_with(&["--appendonly", "yes"]);
    let replica = Server::replica_of(&master, &[]);
    let mut m = master.conn();
    let mut r = replica.conn();
    // Leases of 1.5 s over ten folders; the grants take far less than that.
    hold_many_for(&mut m, "p", LOCKS, "WRITE", 10, 1500);
    // One write the server reads at once: it sleeps past every deadline, then runs the
    // transaction before its expiry timer can fire, so the commands meet the whole expiry.
    let mut pipe = redis::pipe();
    pipe.cmd("DEBUG").arg(&["SLEEP", "1.6"]).ignore();
    pipe.cmd("MULTI").ignore();
    pipe.cmd("INFO").arg("pathlock").ignore();
    pipe.cmd("PATHLOCK.ACQUIRE")
        .arg(&["p", "TOKEN", "taker", "TTL", "60000", "WRITE", "/d1/f1"])
        .ignore();
    pipe.cmd("PATHLOCK.ACQUIRE")
        .arg(&["p", "TOKEN", "reader", "TTL", "60000", "READ", "/d2"])
        .ignore();
    pipe.cmd("PATHLOCK.RENEW")
        .arg(&["p", "h3", "60000"])
        .ignore();
    pipe.cmd("PATHLOCK.RELEASE").arg(&["p", "h4"]).ignore();
    pipe.cmd("PATHLOCK.LOCKS").arg("p").ignore();
    pipe.cmd("INFO").arg("pathlock").ignore();
    pipe.cmd("EXEC");
    let (replies,): (Transaction,) = pipe.query(&mut m).expect("the transaction");
    let (before, taker, reader, renewed, released, listed, after) = replies;
    let stored = |info: &str| -> i64 {
        info.lines()
            .find_map(|l| l.strip_prefix("pathlock_locks:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("pathlock_locks")
    };
    assert_eq!(
        stored(&before),
        LOCKS as i64,
        "nothing was reclaimed before"
    );
    assert!(
        matches!(taker, Value::Array(_)),
        "a lapsed path is free: {taker:?}"
    );
    assert!(
        matches!(reader, Value::Array(_)),
        "a lapsed folder is free: {reader:?}"
    );
    assert_eq!(
        (renewed, released),
        (0, 0),
        "a lapsed lease is neither renewed nor released"
    );
    assert_eq!(
        listed.len(),
        2,
        "only the two new locks are listed: {listed:?}"
    );
    // Four changing commands: two owners each besides what they need, which is h1, h3 and h4.
    // The 500 lapsed writers beneath /d2 are not among them: the folder's bound on the leases
    // beneath it says they all lapsed, so the reader is granted over them without a look, and
    // they are left to the expiry cycle.
    let reclaimed = stored(&before) + 2 - stored(&after);
    assert!(
        (3..=11).contains(&reclaimed),
        "{reclaimed} locks reclaimed by four commands"
    );
    // The replica holds exactly what the master holds, lapsed locks included.
    assert_replica_agrees(&mut m, &mut r);
    // The expiry cycle takes the rest back.
    wait_until(Duration::from_secs(10), "the expiry cycle", || {
        info_number(&mut m, "pathlock", "pathlock_locks") == 2
    });
    assert_replica_agrees(&mut m, &mut r);
    pause_and_sync(&mut m);
    let digest = dataset_digest(&mut m);
    let _: () = cmd("DEBUG").arg("LOADAOF").query(&mut m).expect("LOADAOF");
    assert_eq!(
        dataset_digest(&mut m),
        digest,
        "the AOF replays to the same state"
    );
    resume_writes(&mut m);
}
