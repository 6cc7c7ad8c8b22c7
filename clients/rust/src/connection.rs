//! The redis-rs connections a handle can use, and which of their errors are worth a retry.

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{get_slot, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, RedisError, RedisFuture, RedisResult, Value};

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
        let route = Route::new(get_slot(key), SlotAddr::Master);
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        Box::pin(async move { self.route_command(cmd, routing).await })
    }
}

/// True for an error after which the command may or may not have run, or will run if sent
/// again: the connection failed, or the server or cluster is briefly unable to serve. A
/// command is retried after these and only these; any other error is the server's answer.
pub(crate) fn is_transient(e: &RedisError) -> bool {
    e.is_io_error()
        || matches!(
            e.kind(),
            ErrorKind::TryAgain
                | ErrorKind::ClusterDown
                | ErrorKind::MasterDown
                | ErrorKind::BusyLoadingError
                | ErrorKind::ReadOnly
                | ErrorKind::ClusterConnectionNotFound
        )
}

/// Sends `cmd` and turns an error reply into an `Err`, as redis-rs's `query_async` does (its
/// `req_packed_command` hands error replies back as values).
pub(crate) async fn send<C: ConnectionLike + ?Sized>(
    conn: &mut C,
    cmd: &Cmd,
) -> RedisResult<Value> {
    conn.req_packed_command(cmd)
        .await
        .and_then(Value::extract_error)
}
