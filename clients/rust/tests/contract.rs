//! The shared contract (`clients/contract/`): every scenario, against real servers. The steps are
//! defined in `clients/contract/README.md`; this runner follows the Python one's shape. Cargo's
//! test harness has no tests made at run time, so one test runs every scenario and prints a line
//! for each (ok, skipped with its reason, or FAILED with the step), failing if any failed.

#[path = "../../../tests/cluster_harness/mod.rs"]
mod cluster_harness;
mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use cluster_harness::Cluster;
use common::*;
use pathlock_client::{Acquire, Blocker, Error, Lease, LockRequest, LostReason, Mode, PathLocks};
use redis::aio::ConnectionLike;
use serde_json::{json, Value as Json};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const ME: &str = "rust";

fn contract_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../contract")
}

fn read_json(path: PathBuf) -> Json {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// The servers of a topology, shared by the scenarios and started again after one stops them.
struct Topology {
    masters: Vec<Server>,
    replica: Option<Server>,
    cluster: Option<Cluster>,
    stopped: bool,
}

impl Topology {
    async fn start(name: &str) -> Topology {
        let (masters, replica, cluster) = match name {
            "cluster" => (vec![], None, Some(Cluster::start_with_replicas(0))),
            "replica" => {
                let master = Server::start();
                let replica = acknowledging_replica_of(&master).await;
                (vec![master], Some(replica), None)
            }
            _ => (vec![Server::start()], None, None),
        };
        Topology {
            masters,
            replica,
            cluster,
            stopped: false,
        }
    }

    fn master_ports(&self) -> Vec<u16> {
        match &self.cluster {
            Some(cluster) => cluster.nodes.iter().map(|n| n.port).collect(),
            None => self.masters.iter().map(|m| m.port).collect(),
        }
    }

    fn urls(&self) -> Vec<String> {
        self.master_ports()
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}/"))
            .collect()
    }

    async fn flush(&self) {
        for port in self.master_ports() {
            let mut con = admin_of(port).await;
            run(&mut con, &["FLUSHALL"]).await;
            run(&mut con, &["CONFIG", "RESETSTAT"]).await;
        }
    }

    async fn handle(&self, key: &str) -> PathLocks {
        if self.cluster.is_some() {
            let client = redis::cluster::ClusterClient::new(self.urls()).expect("cluster client");
            PathLocks::new(client, key)
        } else {
            locks_via(self.masters[0].port, key).await
        }
    }

    /// A connection of the runner's own to `on`: the replica, or the master (in a cluster, one
    /// that routes each command by its key).
    async fn admin(&self, on: &str) -> Box<dyn ConnectionLike + Send> {
        if on == "replica" {
            let replica = self.replica.as_ref().expect("this topology has no replica");
            return Box::new(replica.admin().await);
        }
        if self.cluster.is_some() {
            let client = redis::cluster::ClusterClient::new(self.urls()).expect("cluster client");
            return Box::new(client.get_async_connection().await.expect("cluster admin"));
        }
        Box::new(self.masters[0].admin().await)
    }
}

/// Whether `message` is `pattern`, each `{n}` in it standing for one or more digits.
fn matches(pattern: &str, message: &str) -> bool {
    let mut pieces = pattern.split("{n}");
    let first = pieces.next().unwrap_or_default();
    let Some(mut rest) = message.strip_prefix(first) else {
        return false;
    };
    for piece in pieces {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return false;
        }
        let Some(after) = rest[digits..].strip_prefix(piece) else {
            return false;
        };
        rest = after;
    }
    rest.is_empty()
}

/// A duration of the scenarios' milliseconds, a fraction kept to the nanosecond.
fn duration(ms: &Json) -> Duration {
    let ms = ms.as_f64().expect("a number of milliseconds");
    if ms.fract() == 0.0 {
        Duration::from_millis(ms as u64)
    } else {
        Duration::from_nanos((ms * 1e6).round() as u64)
    }
}

fn request(pair: &Json) -> LockRequest {
    let mode = match pair[0].as_str() {
        Some("READ") => Mode::Read,
        _ => Mode::Write,
    };
    LockRequest {
        mode,
        path: pair[1].as_str().unwrap_or_default().into(),
    }
}

fn requests(list: &Json) -> Vec<LockRequest> {
    list.as_array().into_iter().flatten().map(request).collect()
}

fn pairs(locks: &[LockRequest]) -> Json {
    locks
        .iter()
        .map(|l| json!([l.mode.as_str(), l.path]))
        .collect()
}

fn reply(value: redis::Value) -> Json {
    match value {
        redis::Value::Nil => Json::Null,
        redis::Value::Int(n) => json!(n),
        redis::Value::BulkString(bytes) => json!(String::from_utf8_lossy(&bytes)),
        redis::Value::SimpleString(s) => json!(s),
        redis::Value::Okay => json!("OK"),
        redis::Value::Array(items) => Json::Array(items.into_iter().map(reply).collect()),
        other => json!(format!("{other:?}")),
    }
}

fn blocker_matches(want: &Json, got: &Blocker) -> bool {
    want.as_object()
        .into_iter()
        .flatten()
        .all(|(field, value)| match field.as_str() {
            "path" => value == got.path.as_str(),
            "mode" => value == got.mode.as_str(),
            "token" => value == got.token.as_str(),
            "fence" => {
                value
                    .as_str()
                    .and_then(|f| f.parse().ok())
                    .or(value.as_u64())
                    == Some(got.fence)
            }
            "note" => value.as_str() == got.note.as_deref(),
            "ttl_ms_at_most" => {
                !got.ttl.is_zero() && got.ttl.as_millis() <= u128::from(value.as_u64().unwrap_or(0))
            }
            _ => false,
        })
}

/// What a step got: a lease, a nested lock's fence, a loss wait's answer, or a list.
enum Got {
    Lease(Result<Lease, Error>),
    Fence(Result<u64, Error>),
    Loss(Option<LostReason>),
}

/// A lease of the scenario, with what outlives its release: its token and fence, and the
/// answer of a `lost()` taken at the grant (`None` while it waits).
struct Held {
    lease: Option<Lease>,
    token: String,
    fence: u64,
    ended: tokio::sync::watch::Receiver<Option<Option<LostReason>>>,
}

/// A task of the scenario; a nested lock's task has the lease, and gives it back.
struct Task {
    handle: JoinHandle<(Got, Option<Lease>)>,
    name: Option<String>,
}

struct Run<'t> {
    key: String,
    topology: &'t mut Topology,
    slack: Duration,
    task_timeout: Duration,
    handles: HashMap<String, PathLocks>,
    leases: HashMap<String, Held>,
    tasks: HashMap<String, Task>,
    marks: HashMap<String, Instant>,
}

impl Run<'_> {
    fn sub(&self, value: &Json) -> Json {
        match value {
            Json::String(text) => {
                let mut text = text.replace("{key}", &self.key);
                for (name, held) in &self.leases {
                    text = text
                        .replace(&format!("{{token:{name}}}"), &held.token)
                        .replace(&format!("{{fence:{name}}}"), &held.fence.to_string());
                }
                assert!(
                    !text.contains("{token:") && !text.contains("{fence:"),
                    "unknown lease in {text}"
                );
                Json::String(text)
            }
            Json::Array(items) => Json::Array(items.iter().map(|v| self.sub(v)).collect()),
            Json::Object(map) => {
                Json::Object(map.iter().map(|(k, v)| (k.clone(), self.sub(v))).collect())
            }
            other => other.clone(),
        }
    }

    fn keep(&mut self, name: &str, lease: Lease) {
        let (tell, ended) = tokio::sync::watch::channel(None);
        let lost = lease.lost();
        tokio::spawn(async move {
            let _ = tell.send(Some(lost.await));
        });
        self.leases.insert(
            name.into(),
            Held {
                token: lease.token().into(),
                fence: lease.fence(),
                lease: Some(lease),
                ended,
            },
        );
    }

    fn lease(&mut self, name: &str) -> &mut Lease {
        self.leases
            .get_mut(name)
            .and_then(|held| held.lease.as_mut())
            .unwrap_or_else(|| panic!("lease {name} is not at hand"))
    }

    fn check(&mut self, got: Got, expect: &Json, name: Option<&str>) {
        let expect = self.sub(expect);
        let error = match got {
            Got::Lease(Ok(lease)) => {
                assert!(
                    expect.get("error").is_none(),
                    "expected {expect}, got a lease"
                );
                if let Some(above) = expect["fence_above"].as_str() {
                    assert!(lease.fence() > self.leases[above].fence, "fence not above");
                }
                if expect.get("locks").is_some() {
                    assert_eq!(pairs(lease.locks()), expect["locks"]);
                }
                if let Some(ttl) = expect["ttl_ms"].as_u64() {
                    assert_eq!(lease.ttl(), Duration::from_millis(ttl));
                }
                if expect.get("note").is_some() {
                    let note = lease.note().filter(|n| !n.is_empty());
                    assert_eq!(note, expect["note"].as_str());
                }
                if let Some(name) = name {
                    self.keep(name, lease);
                }
                return;
            }
            Got::Fence(Ok(fence)) => {
                assert!(
                    expect.get("error").is_none(),
                    "expected {expect}, got a fence"
                );
                if let Some(above) = expect["fence_above"].as_str() {
                    assert!(fence > self.leases[above].fence, "fence not above");
                }
                return;
            }
            Got::Loss(reason) => {
                let want = expect["lost"].as_str();
                assert_eq!(
                    reason.map(reason_name),
                    want,
                    "the loss wait answered {reason:?}"
                );
                return;
            }
            Got::Lease(Err(e)) | Got::Fence(Err(e)) => e,
        };
        self.check_error(&error, &expect);
    }

    fn check_error(&self, error: &Error, expect: &Json) {
        let kind = expect["error"].as_str().unwrap_or("none");
        let right = matches!(
            (kind, error),
            ("invalid", Error::Invalid(_))
                | ("busy", Error::Busy { .. })
                | ("lost", Error::Lost { .. })
                | ("not_replicated", Error::NotReplicated { .. })
                | ("wrong_type", Error::WrongType { .. })
        );
        assert!(right, "expected {kind}, got {error:?}");
        let message = error.to_string();
        for piece in expect["contains"].as_array().into_iter().flatten() {
            let piece = piece.as_str().unwrap_or_default();
            assert!(message.contains(piece), "{piece:?} not in {message:?}");
        }
        if let Some(pattern) = expect["message"].as_str() {
            assert!(matches(pattern, &message), "message {message:?}");
        }
        if let (Some(want), Error::Busy { blockers, .. }) = (expect["blockers"].as_array(), error) {
            assert_eq!(blockers.len(), want.len(), "blockers {blockers:?}");
            for (want, got) in want.iter().zip(blockers) {
                assert!(blocker_matches(want, got), "{got:?} is not {want}");
            }
        }
        if let (Some(want), Error::Lost { reason, .. }) = (expect["reason"].as_str(), error) {
            assert_eq!(reason_name(*reason), want);
        }
    }

    fn acquire(&self, s: &Json) -> Acquire {
        let handle = &self.handles[s["handle"].as_str().unwrap_or_default()];
        let args = self.sub(&s["args"]);
        let arg = |i: usize| args[i].as_str().unwrap_or_default().to_string();
        let mut acquire = match s["op"].as_str().unwrap_or_default() {
            "upload" => handle.upload(&arg(0)),
            "create" => handle.create(&arg(0)),
            "read" => handle.read(&arg(0)),
            "delete" => handle.delete(&arg(0)),
            "rename" => handle.rename(&arg(0), &arg(1)),
            "move" => handle.move_into(&arg(0), &arg(1)),
            "copy" => handle.copy(&arg(0), &arg(1)),
            "purge" => handle.purge((0..args.as_array().map_or(0, Vec::len)).map(arg)),
            _ => handle.lock(requests(&args)),
        };
        let options = self.sub(&s["options"]);
        for (name, value) in options.as_object().into_iter().flatten() {
            acquire = match name.as_str() {
                "ttl_ms" => acquire.ttl(duration(value)),
                "wait_ms" => acquire.wait(duration(value)),
                "replicas" => acquire.replicas(value.as_u64().unwrap_or(0) as u32),
                "replicas_timeout_ms" => acquire.replicas_timeout(duration(value)),
                _ => acquire.note(value.as_str().unwrap_or_default()),
            };
        }
        acquire
    }

    async fn step(&mut self, s: &Json) {
        let field = |name: &str| s[name].as_str().unwrap_or_default().to_string();
        match s["do"].as_str().unwrap_or_default() {
            "handle" => {
                let key = self.sub(&s.get("key").cloned().unwrap_or(json!(self.key)));
                let mut handle = self.topology.handle(key.as_str().unwrap_or_default()).await;
                for (name, value) in self.sub(&s["options"]).as_object().into_iter().flatten() {
                    handle = match name.as_str() {
                        "ttl_ms" => handle.ttl(duration(value)),
                        "wait_ms" => handle.wait(duration(value)),
                        "replicas" => handle.replicas(value.as_u64().unwrap_or(0) as u32),
                        "replicas_timeout_ms" => handle.replicas_timeout(duration(value)),
                        _ => handle.note(value.as_str().unwrap_or_default()),
                    };
                }
                self.handles.insert(field("name"), handle);
            }
            "acquire" => {
                let acquire = self.acquire(s);
                let name = s["as"].as_str().map(String::from);
                if s.get("task").is_some() {
                    let handle = tokio::spawn(async move { (Got::Lease(acquire.await), None) });
                    self.tasks.insert(field("task"), Task { handle, name });
                } else {
                    let got = Got::Lease(acquire.await);
                    self.check(got, &s["expect"], name.as_deref());
                }
            }
            "lock" => {
                let wanted = requests(&self.sub(&s["requests"]));
                let options = self.sub(&s["options"]);
                let lease_name = field("lease");
                let lease = self
                    .leases
                    .get_mut(&lease_name)
                    .and_then(|h| h.lease.take());
                let mut held = lease.expect("a lease to lock more under");
                let task = async move {
                    let mut more = held.lock(wanted);
                    if let Some(wait) = options.get("wait_ms") {
                        more = more.wait(duration(wait));
                    }
                    if let Some(note) = options["note"].as_str() {
                        more = more.note(note);
                    }
                    let got = Got::Fence(more.await);
                    (got, Some(held))
                };
                if s.get("task").is_some() {
                    let handle = tokio::spawn(task);
                    self.tasks.insert(
                        field("task"),
                        Task {
                            handle,
                            name: Some(lease_name),
                        },
                    );
                } else {
                    let (got, held) = task.await;
                    self.leases.get_mut(&lease_name).expect("lease").lease = held;
                    self.check(got, &s["expect"], None);
                }
            }
            "await" => {
                let task = self.tasks.remove(&field("task")).expect("a task");
                let (got, lease) = tokio::time::timeout(self.task_timeout, task.handle)
                    .await
                    .expect("the task finished in time")
                    .expect("the task ran");
                match lease {
                    // A nested lock's task gives its lease back.
                    Some(lease) => {
                        let name = task.name.expect("the lease's name");
                        self.leases.get_mut(&name).expect("lease").lease = Some(lease);
                        self.check(got, &s["expect"], None);
                    }
                    None => self.check(got, &s["expect"], task.name.as_deref()),
                }
            }
            "pending" => {
                let task = &self.tasks[&field("task")];
                assert!(!task.handle.is_finished(), "the task has finished");
            }
            "release" => {
                let name = field("lease");
                let lease = self.leases.get_mut(&name).and_then(|h| h.lease.take());
                let released = lease.expect("a lease to release").release().await;
                assert!(released.is_ok() || s["may_fail"] == true, "{released:?}");
            }
            "sleep" => tokio::time::sleep(duration(&s["ms"])).await,
            "mark" => {
                self.marks.insert(field("name"), Instant::now());
            }
            "held" => {
                let name = field("lease");
                let held = &self.leases[&name];
                // A released lease is gone in Rust; what its `lost()` answered remains.
                assert!(!matches!(*held.ended.borrow(), Some(Some(_))), "lost");
                if let Some(lease) = &held.lease {
                    assert!(!lease.is_lost() && lease.check().is_ok(), "lost");
                    if let Some(locks) = s.get("locks") {
                        assert_eq!(pairs(lease.locks()), self.sub(locks));
                    }
                }
            }
            "lost" => {
                let since = s["since"]
                    .as_str()
                    .map_or_else(Instant::now, |m| self.marks[m]);
                let limit = s
                    .get("within_ms")
                    .map_or(self.task_timeout, |ms| duration(ms) + self.slack);
                let lease = self.lease(&field("lease"));
                let reason = tokio::time::timeout_at(since + limit, lease.lost()).await;
                let took = since.elapsed();
                let reason =
                    reason.unwrap_or_else(|_| panic!("not reported lost within {limit:?}"));
                assert!(
                    took <= limit + ms(50),
                    "reported lost after {took:?}, limit {limit:?}"
                );
                if let Some(least) = s.get("at_least_ms") {
                    assert!(took >= duration(least), "reported lost after only {took:?}");
                }
                assert_eq!(reason.map(reason_name), s["reason"].as_str());
                let lease = self.lease(&field("lease"));
                assert!(lease.is_lost());
                let error = lease.check().expect_err("the check fails");
                let mut expect = json!({"error": "lost", "reason": s["reason"]});
                if let Some(message) = s.get("message") {
                    expect["message"] = self.sub(message);
                }
                self.check_error(&error, &expect);
            }
            "loss_wait" => {
                let held = &self.leases[&field("lease")];
                let handle = match &held.lease {
                    Some(lease) => {
                        let lost = lease.lost();
                        tokio::spawn(async move { (Got::Loss(lost.await), None) })
                    }
                    None => {
                        let mut ended = held.ended.clone();
                        tokio::spawn(async move {
                            let answer = ended
                                .wait_for(Option::is_some)
                                .await
                                .map(|a| (*a).flatten());
                            (Got::Loss(answer.ok().flatten()), None)
                        })
                    }
                };
                self.tasks
                    .insert(field("task"), Task { handle, name: None });
            }
            "redis" => {
                let words = self.sub(&s["command"]);
                let words: Vec<&str> = words
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Json::as_str)
                    .collect();
                let mut cmd = redis::cmd(words[0]);
                for word in &words[1..] {
                    cmd.arg(*word);
                }
                let mut admin = self
                    .topology
                    .admin(s["on"].as_str().unwrap_or("master"))
                    .await;
                let answer = reply(admin.req_packed_command(&cmd).await.expect("the command"));
                if let Some(want) = s.get("reply") {
                    assert_eq!(answer, self.sub(want), "{words:?} answered {answer}");
                }
            }
            "stop" => {
                self.topology.stopped = true;
                match field("server").as_str() {
                    "replica" => self.topology.replica.as_mut().expect("a replica").stop(),
                    _ => self.topology.masters[0].stop(),
                }
            }
            "server_locks" => {
                let key = self.sub(&s.get("key").cloned().unwrap_or(json!(self.key)));
                let mut admin = self
                    .topology
                    .admin(s["on"].as_str().unwrap_or("master"))
                    .await;
                let mut cmd = redis::cmd("PATHLOCK.LOCKS");
                cmd.arg(key.as_str().unwrap_or_default());
                let answer = reply(admin.req_packed_command(&cmd).await.expect("LOCKS"));
                let mut got: Vec<String> = answer
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| format!("{} {} {}", e[1], e[0], e[2]))
                    .collect();
                let mut want: Vec<String> = self
                    .sub(&s["locks"])
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|l| format!("{} {} {}", l[0], l[1], l[2]))
                    .collect();
                got.sort();
                want.sort();
                assert_eq!(got, want);
            }
            "inspect" => self.inspect(s).await,
            "waiting" => {
                let count = s["count"].as_u64().unwrap_or(1) as usize;
                let started = Instant::now();
                loop {
                    let mut admin = self.topology.admin("master").await;
                    let mut cmd = redis::cmd("PATHLOCK.WAITERS");
                    cmd.arg(&self.key);
                    let answer = reply(admin.req_packed_command(&cmd).await.expect("WAITERS"));
                    if answer.as_array().map_or(0, Vec::len) >= count {
                        break;
                    }
                    assert!(
                        started.elapsed() < self.task_timeout,
                        "timed out waiting for {count} waiters"
                    );
                    tokio::time::sleep(ms(10)).await;
                }
            }
            "calls" => {
                let mut admin = self.topology.masters[0].admin().await;
                let info: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query_async(&mut admin)
                    .await
                    .expect("INFO");
                let prefix = format!("cmdstat_{}:", field("command")).to_lowercase();
                let calls = info
                    .lines()
                    .find(|line| line.to_lowercase().starts_with(&prefix))
                    .and_then(|line| line.split(['=', ',']).nth(1))
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
                assert_eq!(
                    Some(calls),
                    s["count"].as_u64(),
                    "calls of {}",
                    field("command")
                );
            }
            other => panic!("unknown step {other}"),
        }
    }

    async fn inspect(&mut self, s: &Json) {
        let handle = self.handles[s["handle"].as_str().unwrap_or_default()].clone();
        let token = self.sub(&s["token"]);
        let path = self.sub(&s["path"]);
        let expect = self.sub(&s["expect"]);
        let (token, path) = (token.as_str(), path.as_str());
        let call = s["call"].as_str().unwrap_or_default();
        let got: Result<Vec<Json>, Error> = match call {
            "waiters" => handle.waiters(path).await.map(|list| {
                list.into_iter()
                    .map(|w| json!({"token": w.token, "locks": pairs(&w.locks), "note": w.note}))
                    .collect()
            }),
            _ => {
                let blockers = if call == "check" {
                    handle
                        .check(requests(&self.sub(&s["requests"])), token)
                        .await
                } else {
                    handle.locks(path, token).await
                };
                blockers.map(|list| list.into_iter().map(|b| blocker_json(&b)).collect())
            }
        };
        match (got, expect.as_array()) {
            (Err(error), None) => self.check_error(&error, &expect),
            (Ok(got), Some(want)) => {
                assert_eq!(got.len(), want.len(), "{call} answered {got:?}");
                for (want, got) in want.iter().zip(&got) {
                    for (field, value) in want.as_object().into_iter().flatten() {
                        let same = match field.as_str() {
                            "fence" => {
                                Some(got["fence"].to_string()) == value.as_str().map(String::from)
                                    || got["fence"] == *value
                            }
                            "ttl_ms_at_most" => {
                                let ttl = got["ttl_ms"].as_u64().unwrap_or(0);
                                ttl > 0 && ttl <= value.as_u64().unwrap_or(0)
                            }
                            _ => got[field] == *value,
                        };
                        assert!(same, "{got} is not {want}");
                    }
                }
            }
            (got, _) => panic!(
                "{call} answered {:?}, expected {expect}",
                got.map(|_| "a list")
            ),
        }
    }

    async fn clean_up(&mut self) {
        for (_, task) in self.tasks.drain() {
            if let Ok(Ok((got, lease))) = tokio::time::timeout(self.task_timeout, task.handle).await
            {
                if let Some(lease) = lease {
                    let _ = lease.release().await;
                }
                if let Got::Lease(Ok(lease)) = got {
                    let _ = lease.release().await;
                }
            }
        }
        for (_, held) in self.leases.drain() {
            if let Some(lease) = held.lease {
                // The server may be gone; the locks expire anyway.
                let _ = lease.release().await;
            }
        }
    }
}

/// A blocker as the scenarios name its fields.
fn blocker_json(b: &Blocker) -> Json {
    json!({
        "path": b.path, "mode": b.mode.as_str(), "token": b.token, "fence": b.fence,
        "note": b.note, "ttl_ms": b.ttl.as_millis() as u64,
    })
}

fn reason_name(reason: LostReason) -> &'static str {
    match reason {
        LostReason::Gone => "gone",
        LostReason::Expired => "expired",
        LostReason::Replaced => "replaced",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_scenario_of_the_contract() {
    let settings = read_json(contract_dir().join("contract.json"));
    let slack = duration(&settings["slack_ms"]);
    let task_timeout = duration(&settings["task_timeout_ms"]);
    let mut files: Vec<PathBuf> = std::fs::read_dir(contract_dir().join("scenarios"))
        .expect("the scenarios")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let scenarios: Vec<Json> = files
        .into_iter()
        .flat_map(|file| {
            read_json(file)["scenarios"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    assert!(scenarios.len() >= 20, "too few scenarios");
    let mut topologies: HashMap<String, Topology> = HashMap::new();
    let mut failed = Vec::new();
    for scenario in &scenarios {
        let name = scenario["name"].as_str().unwrap_or_default();
        if let Some(why) = scenario["except"][ME].as_str() {
            println!("scenario {name}: skipped: {why}");
            continue;
        }
        let wanted = scenario["topology"]
            .as_str()
            .unwrap_or("single")
            .to_string();
        if topologies.get(&wanted).is_some_and(|t| t.stopped) {
            topologies.remove(&wanted);
        }
        if !topologies.contains_key(&wanted) {
            topologies.insert(wanted.clone(), Topology::start(&wanted).await);
        }
        let topology = topologies.get_mut(&wanted).expect("started");
        topology.flush().await;
        let mut run = Run {
            key: scenario["key"].as_str().unwrap_or("proj:contract").into(),
            topology,
            slack,
            task_timeout,
            handles: HashMap::new(),
            leases: HashMap::new(),
            tasks: HashMap::new(),
            marks: HashMap::new(),
        };
        let mut failure = None;
        for (number, step) in scenario["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if step["except"].get(ME).is_some() {
                continue;
            }
            // A failed step panics; the scenario stops there and the next one runs.
            let outcome = futures_catch(run.step(step)).await;
            if let Err(why) = outcome {
                failure = Some(format!("step {} {step}: {why}", number + 1));
                break;
            }
        }
        run.clean_up().await;
        match failure {
            None => println!("scenario {name}: ok"),
            Some(why) => {
                println!("scenario {name}: FAILED: {why}");
                failed.push(format!("{name}: {why}"));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} scenarios failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// Runs a step, turning its panic (a failed assertion) into an error.
async fn futures_catch<F: std::future::Future<Output = ()>>(future: F) -> Result<(), String> {
    use std::panic::AssertUnwindSafe;
    let caught = CatchUnwind(Box::pin(AssertUnwindSafe(future))).await;
    caught.map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into())
    })
}

/// `catch_unwind` for a future, polled in place (no extra dependency for it).
struct CatchUnwind<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future<Output = ()> + std::panic::UnwindSafe> std::future::Future
    for CatchUnwind<F>
{
    type Output = Result<(), Box<dyn std::any::Any + Send>>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(())) => std::task::Poll::Ready(Ok(())),
            Err(panic) => std::task::Poll::Ready(Err(panic)),
        }
    }
}
