//! The harness of the client's tests: real `redis-server` processes with the module loaded, each
//! on a free loopback port and in a directory of its own, killed when the test ends; and a TCP
//! proxy in front of one to cut, refuse or delay the client's connections.

#![allow(dead_code)]

pub mod proxy;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pathlock_client::PathLocks;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::Value;

/// The built module: `PATHLOCK_MODULE`, or the release build of this workspace.
pub fn module_path() -> PathBuf {
    let path = std::env::var_os("PATHLOCK_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/libpathlock.so")
        });
    assert!(
        path.exists(),
        "module not built at {}: run `cargo build --release` (make test does)",
        path.display()
    );
    path
}

pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
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
        "pathlock-client-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("test directory");
    dir
}

impl Server {
    /// A server with the module and no persistence.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// A server with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Server {
        let dir = fresh_dir();
        let module = module_path();
        for _ in 0..10 {
            let port = free_port();
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(&dir)
                .args(["--save", "", "--appendonly", "no"])
                .args(["--logfile", "redis.log"])
                .args(["--repl-diskless-sync-delay", "0"])
                .arg("--loadmodule")
                .arg(&module)
                .args(extra)
                .current_dir(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server on PATH (make test installs it)");
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(20) {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // Exited: most likely the port was taken in the meantime.
                }
                let ready = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
                if ready.is_ok() {
                    return Server {
                        child: Some(child),
                        port,
                        dir,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
        panic!("redis-server did not start; its log:\n{log}");
    }

    /// A replica of `master`, synced before it returns.
    pub async fn replica_of(master: &Server) -> Server {
        let port = master.port.to_string();
        let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port]);
        let mut admin = replica.admin().await;
        let started = Instant::now();
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut admin)
                .await
                .unwrap_or_default();
            if info.contains("master_link_status:up") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the replica did not sync"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // After a diskless sync the master streams to the replica only once the replica has
        // acknowledged, up to a second later; until then a WAIT after a write answers 0.
        let mut on_master = master.admin().await;
        loop {
            run(&mut on_master, &["SET", "replica-probe", "1"]).await;
            let acked: i64 = redis::cmd("WAIT")
                .arg(1)
                .arg(50)
                .query_async(&mut on_master)
                .await
                .unwrap_or(0);
            if acked >= 1 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the replica did not ack"
            );
        }
        replica
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server with SIGKILL, as a crash would.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A connection for the test's own commands, separate from the client's.
    pub async fn admin(&self) -> MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("admin connection")
    }

    /// A handle whose leases share one reconnecting connection to this server.
    pub async fn locks(&self, key: &str) -> PathLocks {
        locks_via(self.port, key).await
    }
}

/// The client of a loopback port (a server's, or a proxy's in front of it).
pub fn client(port: u16) -> redis::Client {
    redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url")
}

/// A handle on a loopback port whose leases share one `ConnectionManager`; blocking calls open
/// connections of their own through the same port.
pub async fn locks_via(port: u16, key: &str) -> PathLocks {
    PathLocks::with_connection(client(port), manager(port).await, key)
}

/// A `ConnectionManager` to a loopback port that reconnects within 50 ms (redis-rs waits up to
/// a minute between attempts by default, far longer than a short lease lives).
pub async fn manager(port: u16) -> ConnectionManager {
    ConnectionManager::new_with_config(
        client(port),
        ConnectionManagerConfig::new().set_number_of_retries(0),
    )
    .await
    .expect("connection manager")
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `condition` every 10 ms until it holds, panicking with `what` after `limit`.
pub async fn wait_until<F, Fut>(limit: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !condition().await {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One entry of `PATHLOCK.LOCKS`: `(path, mode, token, fence)`, without the moving TTL.
pub type Lock = (String, String, String, u64);

/// Every live lock of `key`.
pub async fn locks_of(con: &mut impl redis::aio::ConnectionLike, key: &str) -> Vec<Lock> {
    let entries: Vec<(String, String, String, i64, u64, Option<String>)> =
        redis::cmd("PATHLOCK.LOCKS")
            .arg(key)
            .query_async(con)
            .await
            .expect("LOCKS");
    entries
        .into_iter()
        .map(|(path, mode, token, _, fence, _)| (path, mode, token, fence))
        .collect()
}

/// Runs a command on the admin connection, panicking on an error.
pub async fn run(con: &mut MultiplexedConnection, args: &[&str]) -> Value {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(con)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// How long `future` takes to resolve, failing after `limit`.
pub async fn time_to<F: std::future::Future>(limit: Duration, what: &str, future: F) -> Duration {
    let started = Instant::now();
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {limit:?}"));
    started.elapsed()
}

/// A numeric field of `INFO pathlock`.
pub async fn info_number(con: &mut MultiplexedConnection, field: &str) -> i64 {
    let text: String = redis::cmd("INFO")
        .arg("pathlock")
        .query_async(con)
        .await
        .expect("INFO pathlock");
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO pathlock has no numeric {field}"))
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
