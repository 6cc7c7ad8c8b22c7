//! Mutual exclusion under concurrency and faults, proven by a checker over recorded histories.
//!
//! 32 clients run random multi-path READ/WRITE acquires (some waiting, short leases, some
//! renewing) on a small tree. Each records the intervals in which it certainly held its locks,
//! and the checker of `common/history.rs` finds any two conflicting holds of different owners
//! that overlap, and any path whose writers' fences do not increase.
//!
//! Negative controls show the checker can fail: a planted overlap, and rogue clients that enter
//! the critical section without a lock. Fault runs kill the server and restart it from its AOF
//! mid-run, and promote a replica mid-run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

const PATHS: &[&str] = &["/", "/a", "/a/b", "/a/b/c", "/a/c", "/b", "/b/a", "/c"];
const KEY: &str = "stress";
/// Short holds, a renewal one time in four.
const PACE: Pace = Pace {
    pause_ms: 15,
    renew_one_in: 4,
    renew_ms: 50,
    renew_spread_ms: 200,
};

struct Run {
    port: Arc<AtomicU16>,
    stop: Arc<AtomicBool>,
    /// Count a grant only once `WAIT 1` confirms a replica has it.
    wait_for_replica: bool,
}

/// One client: acquire, hold a little (maybe renewing), release; record each certain hold.
fn client(
    id: usize,
    run: &Run,
    history: &Mutex<Vec<Hold>>,
    stats: &Mutex<BTreeMap<&'static str, usize>>,
) {
    let mut rng = Rng::new(7919 * (id as u64 + 1));
    let mut con: Option<Connection> = None;
    let mut seq = 0;
    let count = |what: &'static str| *stats.lock().expect("stats").entry(what).or_default() += 1;
    while !run.stop.load(Ordering::Relaxed) {
        let Some(c) = con.as_mut() else {
            let port = run.port.load(Ordering::Relaxed);
            con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .ok();
            if con.is_none() {
                thread::sleep(Duration::from_millis(20));
            }
            continue;
        };
        let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
        seq += 1;
        let token = format!("c{id}-{seq}");
        let ttl = 30 + rng.below(300);
        let wait = if rng.below(3) == 0 { rng.below(150) } else { 0 };
        let items = random_items(&mut rng, PATHS);
        let command = acquire_command(KEY, &token, ttl, wait, &items);
        let sent = Instant::now();
        let reply: Result<Option<(String, i64)>, _> = command.query(c);
        let fence = match reply {
            Ok(Some((_, fence))) => fence,
            Ok(None) => {
                count("refused");
                continue;
            }
            Err(_) => {
                // The outcome is unknown: claim nothing, reconnect.
                count("errors");
                con = None;
                continue;
            }
        };
        if run.wait_for_replica {
            let acked: Result<i64, _> = cmd("WAIT").arg(1).arg(200).query(c);
            if !matches!(acked, Ok(1)) {
                count("unconfirmed");
                con = None;
                continue;
            }
        }
        let mut hold = Hold::granted(KEY, &token, items, fence, sent, ttl);
        if hold.keep(c, &mut rng, &PACE, |_| true) {
            count("renewed");
        }
        history.lock().expect("history").push(hold);
        count("granted");
        if cmd("PATHLOCK.RELEASE")
            .arg(&[KEY, &token])
            .query::<i64>(c)
            .is_err()
        {
            count("errors");
            con = None;
        }
    }
}

/// Runs 32 clients for `duration`, calling `fault` once halfway; returns the history and counts.
fn stress(
    port: u16,
    wait_for_replica: bool,
    duration: Duration,
    fault: impl FnOnce(&Arc<AtomicU16>),
) -> (Vec<Hold>, BTreeMap<&'static str, usize>) {
    let run = Arc::new(Run {
        port: Arc::new(AtomicU16::new(port)),
        stop: Arc::new(AtomicBool::new(false)),
        wait_for_replica,
    });
    let history = Arc::new(Mutex::new(Vec::new()));
    let stats = Arc::new(Mutex::new(BTreeMap::new()));
    let clients: Vec<_> = (0..32)
        .map(|id| {
            let (run, history, stats) = (run.clone(), history.clone(), stats.clone());
            thread::spawn(move || client(id, &run, &history, &stats))
        })
        .collect();
    thread::sleep(duration / 2);
    fault(&run.port);
    thread::sleep(duration / 2);
    run.stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client");
    }
    let history = history.lock().expect("history").clone();
    let stats = stats.lock().expect("stats").clone();
    (history, stats)
}

/// How many times the clients of a run counted `what` (`granted`, `refused`, `errors`, ...).
fn counted(stats: &BTreeMap<&'static str, usize>, what: &str) -> usize {
    stats.get(what).copied().unwrap_or(0)
}

fn report(name: &str, history: &[Hold], stats: &BTreeMap<&'static str, usize>) -> (usize, usize) {
    let (overlaps, fence_errors) = check(history);
    println!("{name}: {} holds, {stats:?}; checker: {overlaps} overlaps, {fence_errors} fence inversions", history.len());
    (overlaps, fence_errors)
}

#[test]
fn no_two_owners_hold_conflicting_locks_at_once() {
    let server = Server::start();
    let (history, stats) = stress(server.port, false, Duration::from_secs(4), |_| {});
    assert!(counted(&stats, "granted") > 300, "{stats:?}");
    assert!(
        counted(&stats, "refused") > 100,
        "conflicts must be frequent: {stats:?}"
    );
    assert_eq!(report("no faults", &history, &stats), (0, 0));

    // Negative control 1: a planted overlap is caught.
    let mut planted = history.clone();
    let victim = history
        .iter()
        .find(|h| h.items.iter().any(|(m, _)| m == "WRITE"))
        .expect("a writer")
        .clone();
    planted.push(Hold {
        owner: "intruder".into(),
        fence: 0,
        ..victim
    });
    assert!(
        check(&planted).0 >= 1,
        "the checker missed a planted overlap"
    );

    // Negative control 2: rogue clients that write without a lock, beside honest ones.
    let run_stop = Arc::new(AtomicBool::new(false));
    let honest = {
        let server_port = server.port;
        let stop = run_stop.clone();
        thread::spawn(move || {
            let (history, _) = stress(server_port, false, Duration::from_secs(1), |_| {});
            stop.store(true, Ordering::Relaxed);
            history
        })
    };
    let mut rogue = Vec::new();
    let mut rng = Rng::new(42);
    while !run_stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        thread::sleep(Duration::from_millis(5));
        rogue.push(Hold {
            key: KEY.to_string(),
            owner: format!("rogue-{}", rogue.len()),
            items: vec![("WRITE".into(), rng.pick(PATHS).to_string())],
            fence: 0,
            start,
            end: Instant::now(),
        });
    }
    let mut mixed = honest.join().expect("honest run");
    assert_eq!(check(&mixed).0, 0, "honest clients alone are exclusive");
    mixed.extend(rogue);
    let (caught, _) = check(&mixed);
    println!("negative control: rogue writers caused {caught} overlaps");
    assert!(caught > 0, "the checker missed rogue writers");
}

#[test]
fn exclusion_holds_across_a_crash_and_an_aof_restart() {
    let server = Mutex::new(Server::start_with(&aof_always("yes")));
    let port = server.lock().expect("server").port;
    let (history, stats) = stress(port, false, Duration::from_secs(4), |_| {
        server.lock().expect("server").crash_and_restart();
    });
    assert!(
        counted(&stats, "errors") > 0,
        "the crash was felt: {stats:?}"
    );
    assert!(counted(&stats, "granted") > 200, "{stats:?}");
    assert_eq!(report("kill -9 and AOF restart", &history, &stats), (0, 0));
}

#[test]
fn exclusion_holds_across_a_replica_promotion_with_wait() {
    let master = Mutex::new(Some(Server::start()));
    let replica = Server::replica_of(
        master.lock().expect("master").as_ref().expect("master"),
        &[],
    );
    let port = master
        .lock()
        .expect("master")
        .as_ref()
        .expect("master")
        .port;
    let replica_port = replica.port;
    let (history, stats) = stress(port, true, Duration::from_secs(4), |target| {
        // The master dies; the replica is promoted and clients move to it.
        drop(master.lock().expect("master").take());
        let mut r = replica.conn();
        promote(&mut r);
        target.store(replica_port, Ordering::Relaxed);
    });
    assert!(counted(&stats, "granted") > 50, "{stats:?}");
    assert_eq!(
        report(
            "failover to a replica, grants confirmed with WAIT 1",
            &history,
            &stats
        ),
        (0, 0)
    );
}
