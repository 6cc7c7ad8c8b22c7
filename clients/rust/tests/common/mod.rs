//! The harness of the client's tests: the module's own (`tests/common/` at the repository's
//! root: real `redis-server` processes with the module loaded, each on a free loopback port and in
//! a directory of its own, killed when the test ends, on `REDIS_SERVER` if set), with what the
//! client's async tests add to it: async admin connections, handles on a server or a proxy in
//! front of it, and a TCP proxy to cut, refuse or delay the client's connections.

#![allow(dead_code)]

#[path = "../../../../tests/common/mod.rs"]
mod module;
pub mod proxy;

pub use module::*;

use std::time::{Duration, Instant};

use pathlock_client::PathLocks;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::AsyncConnectionConfig;

/// What the client's tests ask of a server beyond the module's harness (used within the tests
/// only, so the futures need not be `Send`).
#[allow(async_fn_in_trait)]
pub trait ClientSide {
    fn url(&self) -> String;
    /// A connection for the test's own commands, separate from the client's.
    async fn admin(&self) -> MultiplexedConnection;
    /// A handle whose leases share one reconnecting connection to this server.
    async fn locks(&self, key: &str) -> PathLocks;
}

impl ClientSide for Server {
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    async fn admin(&self) -> MultiplexedConnection {
        admin_of(self.port).await
    }

    async fn locks(&self, key: &str) -> PathLocks {
        locks_via(self.port, key).await
    }
}

/// A replica of `master`, synced, and acknowledging writes before it returns: after a diskless
/// sync the master streams to the replica only once the replica has acknowledged, up to a second
/// later, and until then a `WAIT` after a write answers 0.
pub async fn acknowledging_replica_of(master: &Server) -> Server {
    let replica = Server::replica_of(master, &[]);
    let mut on_master = master.admin().await;
    let started = Instant::now();
    loop {
        run(&mut on_master, &["SET", "replica-probe", "1"]).await;
        let acked: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(50)
            .query_async(&mut on_master)
            .await
            .unwrap_or(0);
        if acked >= 1 {
            return replica;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the replica did not ack"
        );
    }
}

/// A connection for a test's own commands to a loopback port, which waits for any reply as
/// long as it takes: redis-rs 1.x gives up on a reply after 500 ms by default, less than the
/// tests' own blocking commands (`ACQUIRE ... WAIT`) and a busy machine may take.
pub async fn admin_of(port: u16) -> MultiplexedConnection {
    let config = AsyncConnectionConfig::new().set_response_timeout(None);
    client(port)
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("admin connection")
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

/// A `ConnectionManager` to a loopback port that reconnects at once (redis-rs backs off between
/// attempts by default, soon longer than a short lease lives), and waits for any reply as long as
/// it takes (see [`admin_of`]).
pub async fn manager(port: u16) -> ConnectionManager {
    ConnectionManager::new_with_config(
        client(port),
        ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_response_timeout(None),
    )
    .await
    .expect("connection manager")
}

/// Polls `condition` every 10 ms until it holds, panicking with `what` after `limit`.
pub async fn until<F, Fut>(limit: Duration, what: &str, mut condition: F)
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
pub async fn info_pathlock(con: &mut MultiplexedConnection, field: &str) -> i64 {
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
