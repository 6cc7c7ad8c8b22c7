//! The connections of a handle: one shared by every lease's watchdog, and one of its own for each
//! call that blocks on the server; and which errors are worth a retry.
//!
//! Level 0: imports nothing of the crate.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, RedisError, RedisFuture, RedisResult, ServerErrorKind,
    Value,
};
use tokio::sync::OnceCell;

/// A redis-rs async connection the client can share between the caller, the watchdogs and the
/// background releases: it is cloned for each of them, so it must be a handle onto one
/// multiplexed connection (`ConnectionManager`, `MultiplexedConnection`, cluster
/// `ClusterConnection`), not a connection that serialises its callers.
pub trait Connection: ConnectionLike + Clone + Send + Sync + 'static {
    /// Sends `cmd`, a command that names no key (`WAIT`), to the node that serves `key`. On one
    /// server that is the connection itself; in a cluster it is the master of `key`'s slot, whose
    /// replicas are the ones a grant on `key` must reach.
    fn send_for_key<'a>(&'a mut self, key: &'a [u8], cmd: &'a Cmd) -> RedisFuture<'a, Value>;
}

impl Connection for ConnectionManager {
    fn send_for_key<'a>(&'a mut self, _key: &'a [u8], cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.req_packed_command(cmd)
    }
}

impl Connection for MultiplexedConnection {
    fn send_for_key<'a>(&'a mut self, _key: &'a [u8], cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.req_packed_command(cmd)
    }
}

impl Connection for ClusterConnection {
    fn send_for_key<'a>(&'a mut self, key: &'a [u8], cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        // redis-rs would send a keyless WAIT to every master and keep the smallest count, which
        // asks the wrong nodes: only the replicas of the key's master carry the grant.
        let route = Route::with_key(key, SlotAddr::Master);
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        // redis-rs 1.x's `route_command` takes the command by value.
        Box::pin(async move { self.route_command(cmd.clone(), routing).await })
    }
}

/// A redis-rs client, which opens the connections of a handle: the one every lease of the handle
/// renews on, and one of its own for each call that blocks on the server (`ACQUIRE ... WAIT`,
/// `WAIT` for replicas), so that no renewal ever queues behind somebody's wait.
pub trait Connect: Send + Sync + 'static {
    /// The connection every lease of the handle shares.
    type Shared: Connection;
    /// The connection of one blocking call.
    type Blocking: Connection;
    /// Opens the shared connection, once, when the handle first needs it.
    fn connect(&self) -> impl Future<Output = RedisResult<Self::Shared>> + Send;
    /// Opens a connection for blocking calls (kept for later ones while a few are idle).
    fn connect_blocking(&self) -> impl Future<Output = RedisResult<Self::Blocking>> + Send;
}

/// One server: a `ConnectionManager` shared by the leases, which reconnects at once after a
/// failure (redis-rs otherwise waits between attempts, with a backoff that soon grows longer than
/// a short lease lives), and a `MultiplexedConnection` for each blocking call.
///
/// Neither has a response timeout or a connection timeout, as under redis-rs 0.27: redis-rs 1.x
/// gives its connections 500 ms to answer by default, which would fail every `ACQUIRE ... WAIT`
/// and replicas' `WAIT` that blocks longer on the server, and the watchdog already bounds each
/// renewal by the lease's deadline on its own clock.
impl Connect for redis::Client {
    type Shared = ConnectionManager;
    type Blocking = MultiplexedConnection;

    fn connect(&self) -> impl Future<Output = RedisResult<ConnectionManager>> + Send {
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_response_timeout(None)
            .set_connection_timeout(None);
        ConnectionManager::new_with_config(self.clone(), config)
    }

    fn connect_blocking(&self) -> impl Future<Output = RedisResult<MultiplexedConnection>> + Send {
        let client = self.clone();
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(None);
        async move {
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
        }
    }
}

/// A Redis Cluster: one `ClusterConnection` shared by the leases, and one of its own for each
/// blocking call.
impl Connect for ClusterClient {
    type Shared = ClusterConnection;
    type Blocking = ClusterConnection;

    fn connect(&self) -> impl Future<Output = RedisResult<ClusterConnection>> + Send {
        let client = self.clone();
        async move { client.get_async_connection().await }
    }

    fn connect_blocking(&self) -> impl Future<Output = RedisResult<ClusterConnection>> + Send {
        self.connect()
    }
}

/// Any [`Connection`], boxed, so that handles and leases do not carry the connection's type.
pub(crate) struct Conn(Box<dyn Erased>);

trait Erased: Send + Sync {
    fn clone_box(&self) -> Box<dyn Erased>;
    fn request<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value>;
    fn request_for_key<'a>(&'a mut self, key: &'a [u8], cmd: &'a Cmd) -> RedisFuture<'a, Value>;
}

impl<C: Connection> Erased for C {
    fn clone_box(&self) -> Box<dyn Erased> {
        Box::new(self.clone())
    }

    fn request<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.req_packed_command(cmd)
    }

    fn request_for_key<'a>(&'a mut self, key: &'a [u8], cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.send_for_key(key, cmd)
    }
}

impl Clone for Conn {
    fn clone(&self) -> Conn {
        Conn(self.0.clone_box())
    }
}

impl Conn {
    pub(crate) fn new(conn: impl Connection) -> Conn {
        Conn(Box::new(conn))
    }

    /// Sends `cmd` and turns an error reply into an `Err`, as redis-rs's `query_async` does
    /// (`req_packed_command` hands error replies back as values).
    pub(crate) async fn send(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        self.0.request(cmd).await.and_then(Value::extract_error)
    }

    /// Sends a keyless `cmd` to the node that serves `key` (see [`Connection::send_for_key`]).
    pub(crate) async fn send_for_key(&mut self, key: &[u8], cmd: &Cmd) -> RedisResult<Value> {
        self.0
            .request_for_key(key, cmd)
            .await
            .and_then(Value::extract_error)
    }
}

type Opener =
    Box<dyn Fn() -> Pin<Box<dyn Future<Output = RedisResult<Conn>> + Send>> + Send + Sync>;

/// Idle connections kept for later blocking calls; more are closed when they come back.
const MAX_IDLE: usize = 4;

/// The connections of one handle, shared by its clones and its leases.
pub(crate) struct Links {
    shared: OnceCell<Conn>,
    open_shared: Opener,
    open_blocking: Opener,
    idle: Mutex<Vec<Conn>>,
}

impl Links {
    /// Connections opened by `client`; `shared`, when given, is the one the leases renew on.
    pub(crate) fn new<K: Connect>(client: K, shared: Option<Conn>) -> Arc<Links> {
        let client = Arc::new(client);
        let for_shared = client.clone();
        let open_shared: Opener = Box::new(move || {
            let client = for_shared.clone();
            Box::pin(async move { client.connect().await.map(Conn::new) })
        });
        let open_blocking: Opener = Box::new(move || {
            let client = client.clone();
            Box::pin(async move { client.connect_blocking().await.map(Conn::new) })
        });
        Arc::new(Links {
            shared: OnceCell::new_with(shared),
            open_shared,
            open_blocking,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// The connection the leases renew on, opened on first use.
    pub(crate) async fn shared(&self) -> RedisResult<Conn> {
        self.shared
            .get_or_try_init(|| (self.open_shared)())
            .await
            .cloned()
    }

    /// A connection for one blocking call: an idle one, or a new one.
    pub(crate) async fn blocking(&self) -> RedisResult<Conn> {
        let idle = self.idle.lock().map(|mut idle| idle.pop()).unwrap_or(None);
        match idle {
            Some(conn) => Ok(conn),
            None => (self.open_blocking)().await,
        }
    }

    /// Gives back a connection that answered its blocking call, for the next one.
    pub(crate) fn give_back(&self, conn: Conn) {
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
        }
    }
}

/// True for an error after which the command may or may not have run, or will run if sent
/// again: the connection failed, or the server or cluster is briefly unable to serve. A
/// command is retried after these and only these; any other error is the server's answer.
pub(crate) fn is_transient(e: &RedisError) -> bool {
    e.is_io_error()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::ReadOnly
            ) | ErrorKind::ClusterConnectionNotFound
        )
}
