//! A Redis Cluster on loopback for the Cluster tests (`tests/cluster.rs`, `tests/atomic_migration.rs`):
//! 3 masters with a replica each, the module on every node; how slots move (`redis-cli --cluster
//! reshard`, which `MIGRATE`s key by key, or Valkey 9's `CLUSTER MIGRATESLOTS`), a manual
//! failover that retries, and the reshard-under-load workload both ways of moving slots run.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::{RedisResult, ServerErrorKind};

use crate::common::*;

pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::start_with_replicas(1)
    }

    /// 3 masters with `replicas` replicas each.
    pub fn start_with_replicas(replicas: usize) -> Cluster {
        let nodes: Vec<Server> = (0..3 * (1 + replicas))
            .map(|_| {
                Server::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "3000",
                ])
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new(cli_binary())
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            created.status.success(),
            "{}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = Cluster { nodes };
        cluster.wait_until_ok();
        cluster
    }

    pub fn wait_until_ok(&self) {
        for node in &self.nodes {
            let mut con = node.conn();
            wait_until(Duration::from_secs(30), "cluster_state:ok", || {
                let info: String = cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut con)
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
            });
        }
    }

    pub fn client(&self) -> redis::cluster::ClusterConnection {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect();
        ClusterClient::new(urls)
            .and_then(|c| c.get_connection())
            .expect("cluster connection")
    }

    /// The node serving `key` as master now.
    pub fn owner(&self, key: &str) -> &Server {
        let mut con = self.nodes[0].conn();
        let slot: i64 = cmd("CLUSTER")
            .arg(&["KEYSLOT", key])
            .query(&mut con)
            .expect("KEYSLOT");
        let slots: Vec<Value> = cmd("CLUSTER").arg("SLOTS").query(&mut con).expect("SLOTS");
        for range in slots {
            let Value::Array(parts) = range else { continue };
            let (Value::Int(from), Value::Int(to)) = (&parts[0], &parts[1]) else {
                continue;
            };
            if (*from..=*to).contains(&slot) {
                let Value::Array(master) = &parts[2] else {
                    continue;
                };
                let Value::Int(port) = master[1] else {
                    continue;
                };
                return self
                    .nodes
                    .iter()
                    .find(|n| i64::from(n.port) == port)
                    .expect("known node");
            }
        }
        panic!("no owner for slot {slot}");
    }

    pub fn node_id(&self, node: &Server) -> String {
        let mut con = node.conn();
        cmd("CLUSTER").arg("MYID").query(&mut con).expect("MYID")
    }

    pub fn masters(&self) -> Vec<&Server> {
        self.nodes
            .iter()
            .filter(|n| {
                let mut con = n.conn();
                info_field(&mut con, "replication", "role").as_deref() == Some("master")
            })
            .collect()
    }
}

/// The paths of the reshard test's workload; `/z` is held, and `/z/w` awaited, across each
/// reshard.
pub const RESHARD_PATHS: &[&str] = &["/", "/a", "/a/b", "/b", "/b/c", "/c", "/z", "/z/w"];
/// The lowest slots, which `redis-cli --cluster reshard` moves first, hold the projects.
pub const RESHARD_SLOTS: i64 = 16;
pub const PROJECTS: usize = 6;

/// Counts of what the clients did, by name.
pub type Counts = Mutex<BTreeMap<&'static str, usize>>;

pub fn count(counts: &Counts, what: &'static str) {
    *counts.lock().expect("counts").entry(what).or_default() += 1;
}

impl Cluster {
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect()
    }

    /// `redis-cli --cluster check` finds every slot covered, no open slot, and every node
    /// agreeing on the configuration.
    pub fn check_is_clean(&self) -> Result<(), String> {
        let checked = Command::new(cli_binary())
            .args([
                "--cluster",
                "check",
                &format!("127.0.0.1:{}", self.nodes[0].port),
            ])
            .output()
            .expect("redis-cli --cluster check");
        let report = String::from_utf8_lossy(&checked.stdout).into_owned();
        if checked.status.success() && !report.contains("[WARNING]") && !report.contains("[ERR]") {
            Ok(())
        } else {
            Err(report)
        }
    }

    /// Waits for `check_is_clean`. A slot that no node claims for 10 seconds is given an owner
    /// with `redis-cli --cluster fix`, as an operator would, once: Redis 7.0's cluster bus can
    /// leave a slot that moves back and forth quickly without an owner (redis/redis#12344 fixed
    /// one such race in 7.2), which is the server's own state, not the module's. The locks'
    /// exclusion and fences are checked throughout by the clients' history all the same.
    pub fn wait_until_clean(&self) {
        let started = Instant::now();
        let mut fixed = false;
        loop {
            match self.check_is_clean() {
                Ok(()) => return,
                Err(report) if started.elapsed() > Duration::from_secs(30) => {
                    panic!("the cluster stays unclean:\n{report}")
                }
                Err(report)
                    if !fixed
                        && started.elapsed() > Duration::from_secs(10)
                        && report.contains("slots are covered") =>
                {
                    eprintln!("a slot has had no owner for 10 s; fixing it:\n{report}");
                    // Redis 7.0's fix asks before covering a slot and reads the answer from
                    // its input, `--cluster-yes` or not.
                    let mut fix = Command::new(cli_binary())
                        .args([
                            "--cluster",
                            "fix",
                            &format!("127.0.0.1:{}", self.nodes[0].port),
                        ])
                        .arg("--cluster-yes")
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .spawn()
                        .expect("redis-cli --cluster fix");
                    if let Some(mut input) = fix.stdin.take() {
                        // The fix may ask once per kind of uncovered slot; an answer it does
                        // not read is harmless.
                        let _ = input.write_all(b"yes\nyes\nyes\n");
                    }
                    let fixed_report = fix.wait_with_output().expect("redis-cli --cluster fix");
                    eprintln!("{}", String::from_utf8_lossy(&fixed_report.stdout));
                    fixed = true;
                }
                Err(_) => thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Moves the `slots` lowest slots of `from` to `to` with `redis-cli --cluster reshard`.
    pub fn reshard(&self, from: &Server, to: &Server, slots: i64) {
        let moved = Command::new(cli_binary())
            .args(["--cluster", "reshard", &format!("127.0.0.1:{}", from.port)])
            .args([
                "--cluster-from",
                &self.node_id(from),
                "--cluster-to",
                &self.node_id(to),
            ])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster reshard");
        assert!(
            moved.status.success(),
            "the reshard failed:\n{}\n{}",
            String::from_utf8_lossy(&moved.stdout),
            String::from_utf8_lossy(&moved.stderr)
        );
    }

    /// The slot ranges each node serves (a replica those of its master), from `CLUSTER SLOTS`.
    pub fn served_ranges(&self) -> BTreeMap<u16, Vec<(i64, i64)>> {
        let slots: Vec<Value> = cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.nodes[0].conn())
            .expect("SLOTS");
        let mut served: BTreeMap<u16, Vec<(i64, i64)>> = BTreeMap::new();
        for range in slots {
            let Value::Array(parts) = range else { continue };
            let (Some(Value::Int(from)), Some(Value::Int(to))) = (parts.first(), parts.get(1))
            else {
                continue;
            };
            for node in &parts[2..] {
                if let Value::Array(node) = node {
                    if let Some(Value::Int(port)) = node.get(1) {
                        let port = u16::try_from(*port).expect("a port");
                        served.entry(port).or_default().push((*from, *to));
                    }
                }
            }
        }
        served
    }
}

/// The sum over the masters of one field of `INFO errorstats` (`errorstat_ASK:count=3`).
pub fn error_count(cluster: &Cluster, prefix: &str) -> i64 {
    cluster
        .masters()
        .iter()
        .map(|m| {
            let text: String = cmd("INFO")
                .arg("errorstats")
                .query(&mut m.conn())
                .expect("INFO errorstats");
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("errorstat_{prefix}:count=")))
                .and_then(|n| n.split(',').next()?.trim().parse().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// Key names whose slots are distinct and among the `RESHARD_SLOTS` lowest.
pub fn keys_in_low_slots(con: &mut Connection) -> Vec<String> {
    let candidates: Vec<String> = (0..40_000).map(|i| format!("project:{i}")).collect();
    let mut pipe = redis::pipe();
    for key in &candidates {
        pipe.cmd("CLUSTER").arg("KEYSLOT").arg(key);
    }
    let slots: Vec<i64> = pipe.query(con).expect("KEYSLOT");
    let mut taken = BTreeMap::new();
    for (key, slot) in candidates.into_iter().zip(slots) {
        if slot < RESHARD_SLOTS && taken.len() < PROJECTS {
            taken.entry(slot).or_insert(key);
        }
    }
    assert_eq!(taken.len(), PROJECTS, "enough keys in the lowest slots");
    taken.into_values().collect()
}

/// How many keys `node` holds in `slot` (`CLUSTER COUNTKEYSINSLOT`).
pub fn keys_in_slot(node: &Server, slot: i64) -> i64 {
    cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut node.conn())
        .expect("COUNTKEYSINSLOT")
}

pub fn cluster_connection(
    urls: &[String],
) -> redis::RedisResult<redis::cluster::ClusterConnection> {
    ClusterClient::builder(urls.to_vec())
        .retries(30)
        .min_retry_wait(10)
        .max_retry_wait(200)
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(5))
        .build()
        .and_then(|c| c.get_connection())
}

/// How the load's clients keep a grant: a renewal one time in three.
const LOAD_PACE: Pace = Pace {
    pause_ms: 30,
    renew_one_in: 3,
    renew_ms: 100,
    renew_spread_ms: 400,
};

/// One client of the load: acquire (waiting half of the time), hold a little, maybe renew,
/// release, through the cluster client, recording each certain hold.
pub fn load_client(
    id: usize,
    keys: &[String],
    urls: &[String],
    stop: &AtomicBool,
    history: &Mutex<Vec<Hold>>,
    counts: &Counts,
) {
    let mut rng = Rng::new(104_729 * (id as u64 + 1));
    let mut con = None;
    let mut seq = 0;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = con.as_mut() else {
            con = cluster_connection(urls).ok();
            if con.is_none() {
                thread::sleep(Duration::from_millis(50));
            }
            continue;
        };
        seq += 1;
        let key = rng.pick(keys).clone();
        let token = format!("c{id}-{seq}");
        let ttl = 200 + rng.below(600);
        let wait = if rng.below(2) == 0 { rng.below(800) } else { 0 };
        let items = random_items(&mut rng, &RESHARD_PATHS[..6]);
        let command = acquire_command(&key, &token, ttl, wait, &items);
        let sent = Instant::now();
        let fence = match command.query::<Option<(String, i64)>>(c) {
            Ok(Some((_, fence))) => fence,
            Ok(None) => {
                count(counts, "refused");
                continue;
            }
            Err(e) => {
                // The outcome is unknown: claim nothing, connect afresh.
                eprintln!("reshard load: ACQUIRE failed: {e}");
                count(counts, "errors");
                con = None;
                continue;
            }
        };
        let mut hold = Hold::granted(&key, &token, items, fence, sent, ttl);
        if hold.keep(c, &mut rng, &LOAD_PACE, |_| true) {
            count(counts, "renewed");
        }
        history.lock().expect("history").push(hold);
        count(counts, "granted");
        if let Err(e) = cmd("PATHLOCK.RELEASE").arg(&[&key, &token]).query::<i64>(c) {
            eprintln!("reshard load: RELEASE failed: {e}");
            count(counts, "errors");
            con = None;
        }
    }
}

/// Sends `command` to the node at `address`, following `-MOVED` and `-ASK` (with `ASKING`) and
/// retrying after `-TRYAGAIN`, as a cluster client does. Returns the reply, the node that gave
/// it, and how many redirects were followed.
pub fn follow(address: &str, command: &redis::Cmd) -> (redis::RedisResult<Value>, String, usize) {
    let mut address = address.to_string();
    let mut asking = false;
    let mut redirects = 0;
    for _ in 0..100 {
        let reply = redis::Client::open(format!("redis://{address}/"))
            .and_then(|c| c.get_connection())
            .and_then(|mut con| {
                let _: () = cmd("CLIENT").arg(&["SETNAME", "anchor"]).query(&mut con)?;
                if asking {
                    let _: () = cmd("ASKING").query(&mut con)?;
                }
                command.query::<Value>(&mut con)
            });
        let Err(error) = &reply else {
            return (reply, address, redirects);
        };
        match error.kind() {
            redis::ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask) => {
                let Some((to, _)) = error.redirect_node() else {
                    return (reply, address, redirects);
                };
                asking = error.kind() == redis::ErrorKind::Server(ServerErrorKind::Ask);
                address = to.to_string();
                redirects += 1;
            }
            redis::ErrorKind::Server(ServerErrorKind::TryAgain) => {
                asking = false;
                redirects += 1;
                thread::sleep(Duration::from_millis(20));
            }
            _ => return (reply, address, redirects),
        }
    }
    panic!("more than 100 redirects, the last to {address}");
}

/// How the reshard-under-load test moves slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mover {
    /// `redis-cli --cluster reshard`: `CLUSTER SETSLOT` and `MIGRATE` of each key.
    Reshard,
    /// Valkey 9's atomic slot migration, `CLUSTER MIGRATESLOTS`.
    MigrateSlots,
}

impl Cluster {
    /// Moves the slots `first..=last` from `from` to `to` with `CLUSTER MIGRATESLOTS`, and waits
    /// until the migration succeeded on the source and every node sees `to` own them.
    pub fn migrate_slots(&self, from: &Server, to: &Server, first: i64, last: i64) {
        let mut con = from.conn();
        let started: redis::RedisResult<String> = cmd("CLUSTER")
            .arg("MIGRATESLOTS")
            .arg("SLOTSRANGE")
            .arg(first)
            .arg(last)
            .arg("NODE")
            .arg(self.node_id(to))
            .query(&mut con);
        assert_eq!(started.as_deref(), Ok("OK"), "CLUSTER MIGRATESLOTS");
        wait_until(
            Duration::from_secs(60),
            "the slot migration to succeed",
            || {
                let states = migration_states(&mut con);
                assert!(
                    !states.iter().any(|s| s == "failed" || s == "cancelled"),
                    "the slot migration ended {states:?}"
                );
                !states.is_empty() && states.iter().all(|s| s == "success")
            },
        );
        for node in &self.nodes {
            let mut con = node.conn();
            wait_until(
                Duration::from_secs(30),
                "every node to see the new owner",
                || {
                    owner_port(&mut con, first) == Some(to.port)
                        && owner_port(&mut con, last) == Some(to.port)
                },
            );
        }
    }

    /// A replica of `master`.
    pub fn replica_of(&self, master: &Server) -> &Server {
        self.nodes
            .iter()
            .find(|n| {
                let mut con = n.conn();
                info_field(&mut con, "replication", "master_port").as_deref()
                    == Some(&master.port.to_string())
            })
            .expect("a replica of the master")
    }

    /// `CLUSTER FAILOVER` on `replica`, until it serves `slot` as master. A manual failover
    /// that does not complete within the server's manual-failover timeout (5 s: the replica
    /// must catch up with its paused master and win a vote) is abandoned by the server without
    /// a word, which on a loaded machine happens now and then; the operator's remedy is to ask
    /// again, and so does this, every 15 s for up to 90 s.
    pub fn fail_over_to(&self, replica: &Server, slot: i64) {
        let started = Instant::now();
        loop {
            let _: () = cmd("CLUSTER")
                .arg("FAILOVER")
                .query(&mut replica.conn())
                .expect("CLUSTER FAILOVER");
            let asked = Instant::now();
            while asked.elapsed() < Duration::from_secs(15) {
                if owner_port(&mut self.nodes[0].conn(), slot) == Some(replica.port) {
                    return;
                }
                thread::sleep(Duration::from_millis(50));
            }
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "timed out waiting for the replica to take over"
            );
            eprintln!(
                "the manual failover to {} did not complete; asking again",
                replica.port
            );
        }
    }
}

/// The `state` of every slot migration `CLUSTER GETSLOTMIGRATIONS` lists on a node.
pub fn migration_states(con: &mut Connection) -> Vec<String> {
    let jobs: Vec<Value> = cmd("CLUSTER")
        .arg("GETSLOTMIGRATIONS")
        .query(con)
        .expect("CLUSTER GETSLOTMIGRATIONS");
    jobs.iter()
        .filter_map(|job| {
            let fields: Vec<(String, Value)> = match job {
                Value::Map(pairs) => pairs
                    .iter()
                    .filter_map(|(k, v)| Some((redis::from_redis_value_ref(k).ok()?, v.clone())))
                    .collect(),
                Value::Array(items) => items
                    .chunks(2)
                    .filter_map(|kv| {
                        Some((
                            redis::from_redis_value_ref(&kv[0]).ok()?,
                            kv.get(1)?.clone(),
                        ))
                    })
                    .collect(),
                _ => return None,
            };
            fields
                .into_iter()
                .find(|(k, _)| k == "state")
                .and_then(|(_, v)| redis::from_redis_value(v).ok())
        })
        .collect()
}

/// The port of the master that serves `slot`, as the node of `con` sees it.
pub fn owner_port(con: &mut Connection, slot: i64) -> Option<u16> {
    let slots: Vec<Value> = cmd("CLUSTER").arg("SLOTS").query(con).ok()?;
    slots.into_iter().find_map(|range| {
        let Value::Array(parts) = range else {
            return None;
        };
        let (Some(Value::Int(from)), Some(Value::Int(to)), Some(Value::Array(master))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            return None;
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return None;
        };
        (*from..=*to)
            .contains(&slot)
            .then(|| u16::try_from(*port).ok())
            .flatten()
    })
}

/// Under a load of acquires, renews and releases through a cluster client, the slots of six
/// projects move between the three masters twelve times (with `mover`). Before each move, every
/// project has a holder of `WRITE /z` and a blocked waiter for `WRITE /z/w`, which follows the
/// redirect it is answered and is granted where the project went, above the holder's fence.
/// The checker finds no two conflicting holds at once and no fence going back on any path;
/// afterwards the cluster checks clean and no node keeps a key in a slot it does not serve.
pub fn reshard_under_load(mover: Mover) {
    let cluster = Cluster::start();
    let urls = cluster.urls();
    let keys = keys_in_low_slots(&mut cluster.nodes[0].conn());
    let first = cluster.owner(&keys[0]);
    let masters = cluster.masters();
    let others: Vec<&Server> = masters
        .iter()
        .copied()
        .filter(|m| m.port != first.port)
        .collect();
    let (a, b, c) = (first, others[0], others[1]);
    for key in &keys {
        assert_eq!(
            cluster.owner(key).port,
            a.port,
            "{key} starts on one master"
        );
    }
    // Round the three masters one way and back, twice.
    let rounds = [(a, b), (b, c), (c, a), (a, c), (c, b), (b, a)].repeat(2);

    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(Vec::new()));
    let counts = Arc::new(Counts::default());
    let clients: Vec<_> = (0..16)
        .map(|id| {
            let (keys, urls) = (keys.clone(), urls.clone());
            let (stop, history, counts) = (stop.clone(), history.clone(), counts.clone());
            thread::spawn(move || load_client(id, &keys, &urls, &stop, &history, &counts))
        })
        .collect();

    let mut main = cluster_connection(&urls).expect("cluster connection");
    let followed = Arc::new(AtomicUsize::new(0));
    let mut anchor_fences = Vec::new();
    let started = Instant::now();
    thread::sleep(Duration::from_millis(500));
    for (round, (from, to)) in rounds.iter().enumerate() {
        cluster.wait_until_clean();
        // A holder of WRITE /z in each project, and a waiter for WRITE /z/w behind it.
        let mut holders = Vec::new();
        let mut waiters = Vec::new();
        for key in &keys {
            let token = format!("anchor-{round}-{key}");
            let sent = Instant::now();
            let granted: Option<(String, i64)> = cmd("PATHLOCK.ACQUIRE")
                .arg(key)
                .arg(&[
                    "TOKEN", &token, "TTL", "20000", "WAIT", "5000", "WRITE", "/z",
                ])
                .query(&mut main)
                .expect("the anchor's ACQUIRE");
            let (_, fence) = granted.expect("the anchor is granted");
            holders.push((key.clone(), token, fence, sent, Instant::now()));
            let (key, history, followed) = (key.clone(), history.clone(), followed.clone());
            let address = format!("127.0.0.1:{}", from.port);
            waiters.push(thread::spawn(move || {
                let token = format!("awaits-{round}-{key}");
                let mut acquire = cmd("PATHLOCK.ACQUIRE");
                acquire.arg(&key).arg(&[
                    "TOKEN", &token, "TTL", "20000", "WAIT", "20000", "WRITE", "/z/w",
                ]);
                let sent = Instant::now();
                let (reply, node, redirects) = follow(&address, &acquire);
                let start = Instant::now();
                followed.fetch_add(redirects, Ordering::Relaxed);
                let fence = match reply {
                    Ok(Value::Array(parts)) => match parts.get(1) {
                        Some(Value::Int(fence)) => *fence,
                        other => panic!("the waiter's fence: {other:?}"),
                    },
                    other => panic!("the waiter of {key} was not granted: {other:?}"),
                };
                thread::sleep(Duration::from_millis(5));
                let end = Instant::now().min(sent + Duration::from_millis(20_000));
                history.lock().expect("history").push(Hold {
                    key: key.clone(),
                    owner: token.clone(),
                    items: vec![("WRITE".into(), "/z/w".into())],
                    fence,
                    start,
                    end,
                });
                let mut release = cmd("PATHLOCK.RELEASE");
                release.arg(&[&key, &token]);
                let (released, _, more) = follow(&node, &release);
                followed.fetch_add(more, Ordering::Relaxed);
                assert!(matches!(released, Ok(Value::Int(1))), "{released:?}");
                (key, fence, redirects)
            }));
        }
        wait_until(
            Duration::from_secs(10),
            "the anchors' waiters to block",
            || {
                let list: String = cmd("CLIENT")
                    .arg("LIST")
                    .query(&mut from.conn())
                    .expect("CLIENT LIST");
                let blocked = list
                    .lines()
                    .filter(|l| l.contains("name=anchor ") && l.contains(" flags=b "))
                    .count();
                blocked == PROJECTS
            },
        );
        let waiting: i64 = masters
            .iter()
            .map(|m| info_number(&mut m.conn(), "pathlock", "pathlock_clients_waiting"))
            .sum();
        *counts
            .lock()
            .expect("counts")
            .entry("waiters at reshards")
            .or_default() += usize::try_from(waiting).unwrap_or(0);

        match mover {
            Mover::Reshard => cluster.reshard(from, to, RESHARD_SLOTS),
            Mover::MigrateSlots => cluster.migrate_slots(from, to, 0, RESHARD_SLOTS - 1),
        }
        wait_until(
            Duration::from_secs(10),
            "every project on its new master",
            || keys.iter().all(|key| cluster.owner(key).port == to.port),
        );
        // The holders release where their projects are now; their waiters are granted there.
        for (key, token, fence, sent, start) in holders {
            let end = Instant::now().min(sent + Duration::from_millis(20_000));
            history.lock().expect("history").push(Hold {
                key: key.clone(),
                owner: token.clone(),
                items: vec![("WRITE".into(), "/z".into())],
                fence,
                start,
                end,
            });
            let released: i64 = cmd("PATHLOCK.RELEASE")
                .arg(&[&key, &token])
                .query(&mut main)
                .expect("the anchor's RELEASE");
            assert_eq!(released, 1, "the anchor's lock moved with {key}");
            anchor_fences.push((key, fence));
        }
        for waiter in waiters {
            let (key, fence, redirects) = waiter.join().expect("an anchor's waiter");
            let held = anchor_fences
                .iter()
                .rev()
                .find(|(k, _)| *k == key)
                .map(|(_, f)| *f)
                .expect("its holder");
            assert!(
                fence > held,
                "{key}: the waiter's fence {fence} is above {held}"
            );
            assert!(redirects > 0, "{key}: the waiter followed its project");
        }
        count(&counts, "reshards");
        thread::sleep(Duration::from_millis(1000));
    }
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().expect("a load client");
    }
    let elapsed = started.elapsed();

    cluster.wait_until_clean();
    // No node keeps a key in a slot it does not serve.
    let served = cluster.served_ranges();
    for node in &cluster.nodes {
        let mut con = node.conn();
        let keys_here: Vec<String> = cmd("SCAN")
            .cursor_arg(0)
            .arg(&["COUNT", "1000"])
            .clone()
            .iter(&mut con)
            .expect("SCAN")
            .collect::<RedisResult<_>>()
            .expect("SCAN");
        let ranges = served.get(&node.port).cloned().unwrap_or_default();
        for key in keys_here {
            let slot: i64 = cmd("CLUSTER")
                .arg(&["KEYSLOT", &key])
                .query(&mut node.conn())
                .expect("KEYSLOT");
            assert!(
                ranges.iter().any(|(f, t)| (*f..=*t).contains(&slot)),
                "node {} keeps {key} of slot {slot}, which it does not serve",
                node.port
            );
        }
    }
    for master in &masters {
        let serves = &served[&master.port];
        for slot in 0..RESHARD_SLOTS {
            let n: i64 = cmd("CLUSTER")
                .arg("COUNTKEYSINSLOT")
                .arg(slot)
                .query(&mut master.conn())
                .expect("COUNTKEYSINSLOT");
            let owns = serves.iter().any(|(f, t)| (*f..=*t).contains(&slot));
            assert!(
                owns || n == 0,
                "{} keeps {n} keys of slot {slot}",
                master.port
            );
        }
    }

    let history = history.lock().expect("history").clone();
    let counts = counts.lock().expect("counts").clone();
    let (overlaps, fence_errors) = check(&history);
    let redirects = ["MOVED", "ASK", "TRYAGAIN"].map(|e| (e, error_count(&cluster, e)));
    println!(
        "reshard under load ({mover:?}): {} reshards of {RESHARD_SLOTS} slots with {PROJECTS} projects in {:.1} s; \
         {} holds, {counts:?}; waiters' redirects followed: {}; redirects answered by the masters: {redirects:?}; \
         checker: {overlaps} overlaps, {fence_errors} fence inversions",
        rounds.len(),
        elapsed.as_secs_f64(),
        history.len(),
        followed.load(Ordering::Relaxed),
    );
    assert!(
        counts.get("granted").copied().unwrap_or(0) > 100,
        "{counts:?}"
    );
    assert_eq!((overlaps, fence_errors), (0, 0));
}
