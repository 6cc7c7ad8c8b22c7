//! The client on a real Redis Cluster of 3 masters through redis-rs's async cluster connection:
//! projects on every master are locked, refused with blockers, renewed past their TTL, reported
//! lost when their key is deleted, and `replicas` asks the key's own master (which has none).

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use pathlock_client::{Error, PathLocks};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

struct Cluster {
    nodes: Vec<Server>,
}

impl Cluster {
    async fn start() -> Cluster {
        let nodes: Vec<Server> = (0..3)
            .map(|_| {
                Server::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            created.status.success(),
            "{}",
            String::from_utf8_lossy(&created.stdout)
        );
        for node in &nodes {
            let mut admin = node.admin().await;
            let started = std::time::Instant::now();
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(&mut admin)
                    .await
                    .unwrap_or_default();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "cluster_state:ok"
                );
                tokio::time::sleep(ms(20)).await;
            }
        }
        Cluster { nodes }
    }

    fn client(&self) -> ClusterClient {
        let urls: Vec<String> = self.nodes.iter().map(|n| n.url()).collect();
        ClusterClient::new(urls).expect("cluster client")
    }

    async fn connection(&self) -> ClusterConnection {
        self.client()
            .get_async_connection()
            .await
            .expect("cluster connection")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_locks_renews_and_loses_projects_across_a_cluster() {
    let cluster = Cluster::start().await;
    let client = cluster.client();
    let mut admin = cluster.connection().await;
    let ttl = ms(300);

    // Enough projects that every master owns some.
    let keys: Vec<String> = (0..12).map(|i| format!("proj:{i}")).collect();
    let mut leases = Vec::new();
    for key in &keys {
        let locks = PathLocks::new(client.clone(), key.as_str()).ttl(ttl);
        let lease = locks.move_into("/A/C", "/B").await.expect("granted");
        match locks.upload("/B/C/x").await {
            Err(Error::Busy { blockers }) => {
                assert_eq!(blockers.len(), 1);
                assert_eq!(blockers[0].path, "/B/C");
                assert_eq!(blockers[0].token, lease.token());
            }
            other => panic!("expected Busy on {key}, got {other:?}"),
        }
        leases.push((locks, lease));
    }

    // Every master holds some of the projects.
    for node in &cluster.nodes {
        let mut direct = node.admin().await;
        let keys: i64 = redis::cmd("DBSIZE")
            .query_async(&mut direct)
            .await
            .expect("DBSIZE");
        assert!(keys > 0, "a master without projects");
    }

    // Renewed on every master well past the TTL.
    tokio::time::sleep(ttl * 3).await;
    for (locks, lease) in &leases {
        assert!(!lease.is_lost());
        assert_eq!(locks_of(&mut admin, locks.key()).await.len(), 2);
    }

    // Deleting a key is noticed through the cluster connection too.
    let (locks, lease) = leases.pop().expect("a lease");
    let _: () = redis::cmd("DEL")
        .arg(locks.key())
        .query_async(&mut admin)
        .await
        .expect("DEL");
    time_to(ttl, "loss", lease.lost()).await;
    drop(lease);

    for (locks, lease) in leases {
        lease.release().await.expect("released");
        let again = locks.upload("/B/C/x").await.expect("granted after release");
        again.release().await.expect("released");
        assert!(locks_of(&mut admin, locks.key()).await.is_empty());
    }

    // WAIT goes to the key's master, which has no replica to acknowledge.
    let locks = PathLocks::new(client.clone(), "proj:0");
    match locks
        .upload("/A")
        .replicas(1)
        .replicas_timeout(ms(100))
        .await
    {
        Err(Error::NotReplicated {
            acked: 0,
            wanted: 1,
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(locks_of(&mut admin, "proj:0").await.is_empty());
}
