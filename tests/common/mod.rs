//! The harness of the integration tests: real `redis-server` processes with the module loaded,
//! each on a free loopback port and in a directory of its own, killed when the test ends.
//!
//! The server is `redis-server` from PATH unless `REDIS_SERVER` names another binary (a
//! `valkey-server`, a build of one's own); `REDIS_CLI` likewise names the `redis-cli` that the
//! Cluster tests use to create and reshard a cluster.

#![allow(dead_code)]

use std::ffi::OsString;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

pub use redis::{cmd, Connection, Value};

mod history;
#[allow(unused_imports)]
pub use history::*;
mod payload;
#[allow(unused_imports)]
pub use payload::*;

/// The built module: `PATHLOCK_MODULE`, or the release build in this checkout. The clients'
/// tests include this harness too (`clients/rust/tests/common/`), so the checkout is found from
/// the crate's folder upwards: the first folder with the workspace's `Cargo.lock`.
pub fn module_path() -> PathBuf {
    if let Some(path) = std::env::var_os("PATHLOCK_MODULE") {
        let path = PathBuf::from(path);
        assert!(
            path.exists(),
            "PATHLOCK_MODULE names no file: {}",
            path.display()
        );
        return path;
    }
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let workspace = crate_dir
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").exists())
        .unwrap_or(&crate_dir);
    let path = workspace.join("target/release/libpathlock.so");
    assert!(
        path.exists(),
        "module not built at {}: run `cargo build --release` (make test does)",
        path.display()
    );
    refuse_stale(&path, workspace);
    path
}

/// Refuses a module built before its sources last changed. `cargo test` builds the library for
/// the tests under `target/release/deps/` and leaves `target/release/libpathlock.so` as the last
/// `cargo build` left it, so a suite run after an edit and `cargo test` alone would test the old
/// module and pass or fail for the wrong reason. `make test` builds first (and names the module
/// in `PATHLOCK_MODULE`, which skips this look).
fn refuse_stale(module: &Path, workspace: &Path) {
    let built = std::fs::metadata(module).and_then(|m| m.modified());
    let Ok(built) = built else {
        return;
    };
    // The sources alone: a change to a manifest or to `Cargo.lock` may concern another crate of
    // the workspace, after which `cargo build --release` leaves the module as it was.
    let newer = ["src", "core/src"]
        .iter()
        .filter_map(|source| newest_change(&workspace.join(source)))
        .filter(|(changed, _)| *changed > built)
        .max_by_key(|(changed, _)| *changed);
    if let Some((_, file)) = newer {
        panic!(
            "{} is older than {}: run `cargo build --release` (make test does), or name a \
             module in PATHLOCK_MODULE",
            module.display(),
            file.display()
        );
    }
}

/// The latest modification under `path` (a file, or a folder walked whole) and the file it is.
fn newest_change(path: &Path) -> Option<(std::time::SystemTime, PathBuf)> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_dir() {
        return Some((meta.modified().ok()?, path.to_path_buf()));
    }
    std::fs::read_dir(path)
        .ok()?
        .filter_map(|entry| newest_change(&entry.ok()?.path()))
        .max_by_key(|(changed, _)| *changed)
}

/// The server binary the tests start: `REDIS_SERVER`, or `redis-server` from PATH.
pub fn server_binary() -> OsString {
    binary_from("REDIS_SERVER", "redis-server")
}

/// The command-line client the Cluster tests run: `REDIS_CLI`, or `redis-cli` from PATH. Redis
/// 7.0's `redis-cli --cluster` also manages a Valkey cluster, so one client serves every server.
pub fn cli_binary() -> OsString {
    binary_from("REDIS_CLI", "redis-cli")
}

/// A relative path is made absolute here, because servers start in directories of their own.
/// Symbolic links are kept, not resolved: Debian's `/usr/bin/redis-server` is a link to
/// `redis-check-rdb`, one binary that acts as the server or the checker by the name it is run by.
fn binary_from(variable: &str, default: &str) -> OsString {
    match std::env::var_os(variable).filter(|v| !v.is_empty()) {
        Some(given) if PathBuf::from(&given).components().count() > 1 => {
            let path =
                std::path::absolute(&given).unwrap_or_else(|e| panic!("{variable}={given:?}: {e}"));
            assert!(path.exists(), "{variable}={given:?}: no such file");
            path.into_os_string()
        }
        Some(given) => given,
        None => default.into(),
    }
}

pub struct Server {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
    args: Vec<String>,
    /// Whether the module is loaded at start.
    module: bool,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn fresh_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "pathlock-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("test directory");
    dir
}

impl Server {
    /// A server with the module, no persistence, and `DEBUG` allowed.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// A server with extra `redis-server` arguments, e.g. `["--appendonly", "yes"]`.
    pub fn start_with(extra: &[&str]) -> Server {
        Server::launch(extra, true)
    }

    /// A server without the module (which `MODULE LOAD` may load later, with
    /// `--enable-module-command yes`).
    pub fn start_without_module(extra: &[&str]) -> Server {
        Server::launch(extra, false)
    }

    fn launch(extra: &[&str], module: bool) -> Server {
        let dir = fresh_dir();
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let (child, port) = spawn(&dir, &args, None, module);
        Server {
            child,
            port,
            dir,
            args,
            module,
        }
    }

    pub fn conn(&self) -> Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .and_then(|c| c.get_connection())
            .expect("connection to the test server")
    }

    /// Kills the server with SIGKILL, as a crash would, and starts it again on the same port
    /// and directory, so it reloads whatever it persisted there.
    pub fn crash_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (child, port) = spawn(&self.dir, &self.args, Some(self.port), self.module);
        self.child = child;
        self.port = port;
    }

    /// `crash_and_restart`, with `extra` as its arguments from now on (its module configs, say).
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.args = extra.iter().map(|s| s.to_string()).collect();
        self.crash_and_restart();
    }

    /// Kills the server with SIGKILL, as a crash would, and leaves it stopped.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's log, for assertion messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }
}

/// The command line of a test server on `port`, in `dir` and logging to `logfile` there: no
/// persistence unless `extra` asks for it, `DEBUG` allowed, and the module unless `module` is
/// false.
fn server_command(dir: &Path, port: u16, logfile: &str, module: bool, extra: &[&str]) -> Command {
    // A leading `*.conf` argument is a configuration file, which redis-server wants first.
    let (config, extra) = match extra.split_first() {
        Some((first, rest)) if first.ends_with(".conf") => (Some(*first), rest),
        _ => (None, extra),
    };
    let mut command = Command::new(server_binary());
    command
        .args(config)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
        ])
        .args(["--logfile", logfile])
        // Full syncs start at once instead of waiting for more replicas.
        .args(["--repl-diskless-sync-delay", "0"])
        .args(module.then_some("--loadmodule"))
        .args(module.then(module_path))
        .args(extra)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

fn spawn(dir: &Path, extra: &[String], fixed_port: Option<u16>, module: bool) -> (Child, u16) {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    // The last other process found answering on a port this child was given, for the message.
    let mut answered_by = None;
    for _ in 0..10 {
        let port = fixed_port.unwrap_or_else(free_port);
        let mut child = server_command(dir, port, "redis.log", module, &extra)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {:?} (set REDIS_SERVER, or let make test install redis-server): {e}",
                    server_binary()
                )
            });
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = child.try_wait() {
                break; // Exited: most likely the port was taken in the meantime.
            }
            // The server that answers must be this child: when two tests were given the same
            // free port, the one whose server lost the race could otherwise take the other's
            // server for its own before its child exits. A loading server refuses `PING`, which
            // keeps a restart waiting for its data.
            let ready = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut c| {
                    cmd("PING").query::<String>(&mut c)?;
                    Ok(info_field(&mut c, "server", "process_id"))
                });
            if let Ok(Some(pid)) = ready {
                if pid == child.id().to_string() {
                    return (child, port);
                }
                answered_by = Some((port, pid));
                break; // Another test's server holds the port.
            }
            sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        if fixed_port.is_some() {
            sleep(Duration::from_millis(200));
        }
    }
    let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
    // A `REDIS_SERVER` that is a script starting the server without `exec` always lands here:
    // the server's process id is not the script's.
    let other = answered_by.map_or(String::new(), |(port, pid)| {
        format!(" (last, process {pid} answered on port {port}, not the child started for it)")
    });
    panic!("redis-server did not start{other}; its log:\n{log}");
}

/// Starts a server with the module that must refuse to start (its configs, or the files in
/// `dir`) and exit; returns how it exited and its log. A fresh directory without `dir`. Panics
/// when the server is still running after 30 s.
pub fn start_refused(dir: Option<&Path>, extra: &[&str]) -> (ExitStatus, String) {
    let fresh = dir.is_none().then(fresh_dir);
    let dir = dir.or(fresh.as_deref()).expect("a directory");
    let mut child = server_command(dir, free_port(), "refused.log", true, extra)
        .spawn()
        .expect("the server starts");
    let started = Instant::now();
    // Redis runs its RDB check before it exits, and that check, which loads no module, may
    // find the file sound and exit with 0: the exit and the log tell together.
    let status = loop {
        if let Some(status) = child.try_wait().expect("its status") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server accepted what it was given and kept running");
        }
        sleep(Duration::from_millis(20));
    };
    let log = std::fs::read_to_string(dir.join("refused.log")).unwrap_or_default();
    let _ = std::fs::remove_file(dir.join("refused.log"));
    if let Some(fresh) = fresh {
        let _ = std::fs::remove_dir_all(fresh);
    }
    (status, log)
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `PATHLOCK.ACQUIRE key args...`: `Some((token, fence))` when granted, `None` when refused.
pub fn acquire(
    con: &mut impl redis::ConnectionLike,
    key: &str,
    args: &[&str],
) -> Option<(String, i64)> {
    try_acquire(con, key, args).unwrap_or_else(|e| panic!("ACQUIRE {args:?} failed: {e}"))
}

pub fn try_acquire(
    con: &mut impl redis::ConnectionLike,
    key: &str,
    args: &[&str],
) -> redis::RedisResult<Option<(String, i64)>> {
    cmd("PATHLOCK.ACQUIRE").arg(key).arg(args).query(con)
}

/// Acquire with a given token; true when granted.
pub fn take(
    con: &mut impl redis::ConnectionLike,
    key: &str,
    token: &str,
    requests: &[&str],
) -> bool {
    let mut args = vec!["TOKEN", token];
    args.extend_from_slice(requests);
    acquire(con, key, &args).is_some()
}

pub fn release(
    con: &mut impl redis::ConnectionLike,
    key: &str,
    token: &str,
    paths: &[&str],
) -> i64 {
    cmd("PATHLOCK.RELEASE")
        .arg(key)
        .arg(token)
        .arg(paths)
        .query(con)
        .expect("RELEASE")
}

pub fn renew(con: &mut impl redis::ConnectionLike, key: &str, token: &str, ms: u64) -> i64 {
    cmd("PATHLOCK.RENEW")
        .arg(key)
        .arg(token)
        .arg(ms)
        .query(con)
        .expect("RENEW")
}

/// The text of the error a command answers; panics when it succeeds.
pub fn error_of<T: std::fmt::Debug>(result: redis::RedisResult<T>) -> String {
    match result {
        Ok(value) => panic!("expected an error, got {value:?}"),
        Err(e) => match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            _ => e.to_string(),
        },
    }
}

/// Runs a raw command and returns its error text.
pub fn error_from(con: &mut Connection, args: &[&[u8]]) -> String {
    let mut command = cmd(std::str::from_utf8(args[0]).expect("command name"));
    for arg in &args[1..] {
        command.arg(*arg);
    }
    error_of(command.query::<Value>(con))
}

/// Sends each call and asserts that the server answers it with an error that starts with the
/// text beside it.
pub fn assert_errors(con: &mut Connection, cases: &[(&[&[u8]], &str)]) {
    for (args, expected) in cases {
        let error = error_from(con, args);
        assert!(error.starts_with(expected), "{args:?}: {error}");
    }
}

/// `assert_errors` with one beginning for every call's error (`NOPERM`, `MOVED`, ...).
pub fn assert_refused(con: &mut Connection, prefix: &str, calls: &[&[&[u8]]]) {
    for args in calls {
        let error = error_from(con, args);
        assert!(error.starts_with(prefix), "{args:?}: {error}");
    }
}

impl Server {
    /// A replica of `master`, started with the same module and synced before it returns.
    pub fn replica_of(master: &Server, extra: &[&str]) -> Server {
        let port = master.port.to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", port.as_str()];
        args.extend_from_slice(extra);
        let replica = Server::start_with(&args);
        let mut con = replica.conn();
        wait_until(Duration::from_secs(20), "the replica to sync", || {
            info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up")
        });
        replica
    }
}

/// Polls `condition` every 10 ms until it holds, panicking with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        sleep(Duration::from_millis(10));
    }
}

/// `blocked_clients` of `INFO clients`: the clients the server keeps blocked, waiters among them.
pub fn blocked_clients(con: &mut Connection) -> i64 {
    info_number(con, "clients", "blocked_clients")
}

/// Waits until the server keeps `n` clients blocked.
pub fn wait_for_blocked(con: &mut Connection, n: i64) {
    wait_until(
        Duration::from_secs(10),
        &format!("{n} blocked clients"),
        || blocked_clients(con) == n,
    );
}

/// Waits until `n` clients wait in the module's queues (`pathlock_clients_waiting`).
pub fn wait_for_waiters(con: &mut Connection, n: i64) {
    wait_until(Duration::from_secs(10), &format!("{n} waiters"), || {
        info_number(con, "pathlock", "pathlock_clients_waiting") == n
    });
}

/// Nothing is left waiting: no client blocked, and none in the module's queues.
pub fn assert_no_waiters(con: &mut Connection) {
    assert_eq!(blocked_clients(con), 0, "blocked clients");
    assert_eq!(
        info_number(con, "pathlock", "pathlock_clients_waiting"),
        0,
        "pathlock_clients_waiting"
    );
}

/// A master with the module and a replica synced to it, and a connection to each:
/// `(master, replica, m, r)`.
pub fn master_and_replica() -> (Server, Server, Connection, Connection) {
    let master = Server::start();
    let replica = Server::replica_of(&master, &[]);
    let (m, r) = (master.conn(), replica.conn());
    (master, replica, m, r)
}

/// `REPLICAOF NO ONE`: the server of `con` becomes a master, as a failover promotes it.
pub fn promote(con: &mut Connection) {
    let _: () = cmd("REPLICAOF")
        .arg(&["NO", "ONE"])
        .query(con)
        .expect("REPLICAOF NO ONE");
}

/// The arguments of an AOF written before each command is answered (`appendfsync always`, so
/// that a crash loses nothing acknowledged), with its RDB preamble or without (`"no"`: the file
/// then holds commands alone, and a rewrite writes the effects that rebuild each project).
pub fn aof_always(preamble: &str) -> [&str; 6] {
    [
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        preamble,
    ]
}

/// Runs `command key args...` (a listing: `LOCKS`, `CHECK`, `WAITERS`) five times after `CONFIG
/// RESETSTAT`, each reply read as entries of type `T` (`LockEntry` for `LOCKS` and `CHECK`): the
/// number of entries it returned, and the server's mean time per call in microseconds. Listings
/// timed one after another in a test are compared with each other.
pub fn timed_listing<T: redis::FromRedisValue>(
    con: &mut Connection,
    command: &str,
    key: &str,
    args: &[&str],
) -> (usize, f64) {
    let _: () = cmd("CONFIG")
        .arg("RESETSTAT")
        .query(con)
        .expect("RESETSTAT");
    let mut count = 0;
    for _ in 0..5 {
        let entries: Vec<T> = cmd(command)
            .arg(key)
            .arg(args)
            .query(con)
            .unwrap_or_else(|e| panic!("{command} {key} {args:?}: {e}"));
        count = entries.len();
    }
    (count, usec_per_call(con, command))
}

/// The server's clock (`TIME`), in ms.
pub fn server_ms(con: &mut Connection) -> u64 {
    let (secs, micros): (u64, u64) = cmd("TIME").query(con).expect("TIME");
    secs * 1000 + micros / 1000
}

/// One field of an `INFO` section.
pub fn info_field(con: &mut Connection, section: &str, field: &str) -> Option<String> {
    let text: String = cmd("INFO").arg(section).query(con).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .map(|value| value.trim().to_string())
}

pub fn info_number(con: &mut Connection, section: &str, field: &str) -> i64 {
    info_field(con, section, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no numeric {field}"))
}

/// Waits until the server has no value queued for its lazy-free thread. The gauges of `INFO
/// pathlock` count a project until its memory is freed, and where `DEL`, `FLUSHALL` or `DEBUG
/// RELOAD` hand a large value to that thread (Valkey 8 and later default `lazyfree-lazy-user-del`
/// and `-user-flush` to yes, and Valkey 9.1 reloads that way), the free runs just after the
/// command returns. Redis decrements `lazyfree_pending_objects` only once a free has finished.
pub fn wait_for_lazy_frees(con: &mut Connection) {
    wait_until(Duration::from_secs(20), "the lazy-free thread", || {
        info_number(con, "memory", "lazyfree_pending_objects") == 0
    });
}

/// `(pathlock_locks, pathlock_keys)` once every pending lazy free has run.
pub fn settled_gauges(con: &mut Connection) -> (i64, i64) {
    wait_for_lazy_frees(con);
    (
        info_number(con, "pathlock", "pathlock_locks"),
        info_number(con, "pathlock", "pathlock_keys"),
    )
}

/// `DEBUG DIGEST-VALUE key`: equal on two servers exactly when the values are.
pub fn digest_of(con: &mut Connection, key: &str) -> String {
    let values: Vec<String> = cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query(con)
        .expect("DEBUG DIGEST-VALUE");
    values.into_iter().next().unwrap_or_default()
}

/// `DEBUG DIGEST`: the whole dataset.
pub fn dataset_digest(con: &mut Connection) -> String {
    cmd("DEBUG").arg("DIGEST").query(con).expect("DEBUG DIGEST")
}

/// One entry of LOCKS or CHECK: `(path, mode, token, ttl-ms, fence, note)`.
pub type LockEntry = (Vec<u8>, String, Vec<u8>, i64, i64, Option<Vec<u8>>);

/// How many entries a listing answers (`LOCKS`, `CHECK`, `WAITERS`; `args` with the command
/// first). Panics on an error, with the command in the message.
pub fn count_entries(con: &mut impl redis::ConnectionLike, args: &[&str]) -> usize {
    let entries: Vec<Value> = cmd(args[0])
        .arg(&args[1..])
        .query(con)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    entries.len()
}

/// Every lock of a key as `(path, mode, token, fence)`, without the moving TTL.
pub fn lock_set(con: &mut Connection, key: &str) -> Vec<(Vec<u8>, String, Vec<u8>, i64)> {
    let entries: Vec<LockEntry> = cmd("PATHLOCK.LOCKS").arg(key).query(con).expect("LOCKS");
    entries
        .into_iter()
        .map(|(path, mode, token, _, fence, _)| (path, mode, token, fence))
        .collect()
}

/// The server's mean time per call of `command`, in microseconds, since `CONFIG RESETSTAT`.
pub fn usec_per_call(con: &mut Connection, command: &str) -> f64 {
    let text: String = cmd("INFO").arg("commandstats").query(con).expect("INFO");
    text.lines()
        .find(|l| {
            l.to_ascii_uppercase()
                .starts_with(&format!("CMDSTAT_{}:", command.to_ascii_uppercase()))
        })
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no stats for {command}"))
}

/// A small deterministic generator, so a failing workload can be replayed from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// Grants `n` locks in `key`, pipelined: `mode` on `/d{i % folders}/f{i}` for token `h{i}`, with
/// a 10-minute lease.
pub fn hold_many(con: &mut Connection, key: &str, n: usize, mode: &str, folders: usize) {
    hold_many_for(con, key, n, mode, folders, 600_000);
}

/// `hold_many` with leases of `ttl_ms`.
pub fn hold_many_for(
    con: &mut Connection,
    key: &str,
    n: usize,
    mode: &str,
    folders: usize,
    ttl_ms: u64,
) {
    let ttl = ttl_ms.to_string();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("PATHLOCK.ACQUIRE")
                .arg(&[key, "TOKEN", &format!("h{i}"), "TTL", &ttl, mode])
                .arg(format!("/d{}/f{i}", i % folders))
                .ignore();
        }
        let _: () = pipe.query(con).expect("pipelined acquires");
    }
}

/// Grants one token (`big`, a big owner) `n` write locks in `key`, pipelined: `/d{i % 100}/f{i}`
/// with a 10-minute lease.
pub fn big_owner_holds(con: &mut Connection, key: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("PATHLOCK.ACQUIRE")
                .arg(&[key, "TOKEN", "big", "TTL", "600000", "WRITE"])
                .arg(format!("/d{}/f{i}", i % 100))
                .ignore();
        }
        let _: () = pipe.query(con).expect("pipelined acquires");
    }
}

/// Stops a master's writes (its expiry cycle included, which avoids replica traffic while
/// clients are paused) and waits until one replica has acknowledged everything it sent, so that
/// master and replica can be compared. `resume_writes` undoes it.
pub fn pause_and_sync(master: &mut Connection) {
    let _: () = cmd("CLIENT")
        .arg(&["PAUSE", "10000", "WRITE"])
        .query(master)
        .expect("PAUSE");
    let acked: i64 = cmd("WAIT").arg(1).arg(5000).query(master).expect("WAIT");
    assert_eq!(acked, 1, "the replica acknowledged the stream");
}

pub fn resume_writes(master: &mut Connection) {
    let _: () = cmd("CLIENT").arg("UNPAUSE").query(master).expect("UNPAUSE");
}
