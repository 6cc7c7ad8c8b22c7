//! The application user of `docs/operations.md`'s ACL recipe (the lock commands on `proj:*` keys,
//! nothing else: the `pathlock` category where the server has module categories, the commands by
//! name on Redis 7.0) uses every feature of the client but `replicas`, which needs `WAIT`: a
//! plain acquire renewed past its TTL, a waiting acquire, and a dropped waiting acquire, which
//! leaves the server's queue when its connection closes. Without `WAIT`, an acquire with replicas
//! fails with the server's `NOPERM` and holds nothing.

#[path = "../../../tests/cluster_harness/mod.rs"]
mod cluster_harness;
mod common;

use cluster_harness::Cluster;
use common::*;
use pathlock_client::{Error, PathLocks};

/// Sets the recipe user `name` (password `pw`), plus `extra` rules, on the server behind `admin`:
/// the `pathlock` category where the server has module categories, the commands by name where it
/// has none (Redis 7.0), as `docs/operations.md` gives them.
async fn set_recipe_user(
    admin: &mut redis::aio::MultiplexedConnection,
    name: &str,
    extra: &[&str],
) {
    let categories: Vec<String> = redis::cmd("ACL")
        .arg("CAT")
        .query_async(admin)
        .await
        .expect("ACL CAT");
    let rules: &[&str] = if categories.iter().any(|c| c == "pathlock") {
        &["~proj:*", "+@pathlock"]
    } else {
        &[
            "~proj:*",
            "+pathlock.acquire",
            "+pathlock.release",
            "+pathlock.renew",
            "+pathlock.locks",
            "+pathlock.check",
            "+pathlock.waiters",
        ]
    };
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", name, "reset", "on", ">pw"])
        .arg(rules)
        .arg(extra)
        .query_async(admin)
        .await
        .expect("ACL SETUSER");
}

/// Makes the recipe user `app` (password `pw`) and answers a handle on `key` logged in as it.
async fn recipe_user(server: &Server, key: &str) -> PathLocks {
    set_recipe_user(&mut server.admin().await, "app", &[]).await;
    let client =
        redis::Client::open(format!("redis://app:pw@127.0.0.1:{}/", server.port)).expect("url");
    PathLocks::new(client, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recipe_user_locks_waits_gives_up_and_cannot_ask_for_replicas() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let locks = recipe_user(&server, "proj:rust").await.ttl(ms(300));

    // A plain acquire, renewed past its TTL.
    let holder = locks.delete("/A").await.expect("granted");
    tokio::time::sleep(ms(500)).await;
    assert!(!holder.is_lost(), "renewed past its TTL");

    // A waiting acquire, granted when the holder lets go.
    let releasing = tokio::spawn(async move {
        tokio::time::sleep(ms(300)).await;
        holder.release().await.expect("released");
    });
    let waited = locks
        .upload("/A/f")
        .wait(ms(5000))
        .await
        .expect("granted after the wait");
    releasing.await.expect("release task");

    // A waiting acquire dropped while it waits leaves the queue.
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.upload("/A/f").wait(ms(20_000)).await })
    };
    until(ms(3000), "the waiter to queue", || {
        let locks = locks.clone();
        async move { locks.waiters(None).await.expect("WAITERS").len() == 1 }
    })
    .await;
    waiter.abort();
    assert!(waiter.await.expect_err("dropped").is_cancelled());
    until(ms(3000), "the dropped waiter to leave the queue", || {
        let locks = locks.clone();
        async move { locks.waiters(None).await.expect("WAITERS").is_empty() }
    })
    .await;

    // Replicas need WAIT: refused, and the grant is released.
    match locks
        .upload("/B")
        .replicas(1)
        .replicas_timeout(ms(100))
        .await
    {
        Err(Error::Redis(e)) => assert_eq!(e.code(), Some("NOPERM"), "{e}"),
        other => panic!("want NOPERM, got {other:?}"),
    }
    until(ms(3000), "the refused grant to be released", || {
        let mut admin = admin.clone();
        async move { locks_of(&mut admin, "proj:rust").await.len() == 1 }
    })
    .await;
    waited.release().await.expect("released");
    assert!(locks_of(&mut admin, "proj:rust").await.is_empty());
}

/// A user who may take locks but not run `PATHLOCK.CHECK`: a refusal is still `Busy`, with the
/// check's `NOPERM` as `check_error` and a message that says the blockers could not be read, never
/// that nothing holds the paths (the contract's `busy_unread`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_whose_check_is_refused_is_busy_with_the_check_error() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "nocheck",
            "reset",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-pathlock.check",
        ])
        .query_async(&mut admin)
        .await
        .expect("ACL SETUSER");
    let holder = PathLocks::new(client(server.port), "proj:nocheck")
        .delete("/A")
        .await
        .expect("granted");
    let client =
        redis::Client::open(format!("redis://nocheck:pw@127.0.0.1:{}/", server.port)).expect("url");
    let locks = PathLocks::new(client, "proj:nocheck");
    for wait in [None, Some(ms(200))] {
        let acquire = locks.upload("/A/f");
        let refused = match wait {
            Some(wait) => acquire.wait(wait).await,
            None => acquire.await,
        };
        match refused {
            Err(
                ref error @ Error::Busy {
                    ref blockers,
                    check_error: Some(ref check_error),
                    ..
                },
            ) => {
                assert!(blockers.is_empty());
                assert_eq!(check_error.code(), Some("NOPERM"), "{check_error}");
                let message = error.to_string();
                assert!(
                    message.contains("the locks in the way could not be read")
                        && !message.contains("nothing holds"),
                    "{message}"
                );
            }
            other => panic!("want Busy with the check's NOPERM, got {other:?}"),
        }
    }
    holder.release().await.expect("released");
}

/// Sets the recipe user `name` (password `pw`), plus `extra` rules, on every node of a cluster:
/// ACL users are per node.
async fn recipe_user_on_every_node(cluster: &Cluster, name: &str, extra: &[&str]) {
    for node in &cluster.nodes {
        set_recipe_user(&mut node.admin().await, name, extra).await;
    }
}

/// A cluster client of the recipe user, its user set on every node with `extra` rules.
async fn cluster_user(
    cluster: &Cluster,
    name: &str,
    extra: &[&str],
) -> redis::cluster::ClusterClient {
    recipe_user_on_every_node(cluster, name, extra).await;
    let urls: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("redis://{name}:pw@127.0.0.1:{}/", n.port))
        .collect();
    redis::cluster::ClusterClient::new(urls).expect("cluster client")
}

/// `docs/operations.md`'s cluster line: redis-rs reads the slot map with `CLUSTER SLOTS` and
/// sends `PING` on each node connection it opens (refused, it goes on, but each refusal fills the
/// node's `ACL LOG`); `CLUSTER NODES`, `CLUSTER INFO` and `COMMAND` are for the other drivers. Without the
/// additions every command fails on the refused `CLUSTER SLOTS`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recipe_user_with_the_cluster_rules_locks_and_waits_on_a_cluster() {
    let cluster = Cluster::start_with_replicas(0);
    let rules = [
        "+cluster|slots",
        "+cluster|nodes",
        "+cluster|info",
        "+command",
        "+ping",
    ];
    let client = cluster_user(&cluster, "app", &rules).await;
    for i in 0..4 {
        let locks = PathLocks::new(client.clone(), format!("proj:acl{i}")).ttl(ms(300));
        let holder = locks.delete("/A").await.expect("granted");
        let releasing = tokio::spawn(async move {
            tokio::time::sleep(ms(400)).await;
            assert!(!holder.is_lost(), "renewed past its TTL");
            holder.release().await.expect("released");
        });
        let waited = locks
            .upload("/A/f")
            .wait(ms(5000))
            .await
            .expect("granted after the wait");
        releasing.await.expect("the holder");
        waited.release().await.expect("released");
    }
    for node in &cluster.nodes {
        let mut admin = node.admin().await;
        let log: Vec<Vec<redis::Value>> = redis::cmd("ACL")
            .arg("LOG")
            .query_async(&mut admin)
            .await
            .expect("ACL LOG");
        // What each entry refused, but `CLIENT SETINFO`: redis-rs names its library with it on
        // servers that have it (Redis 7.2 and later, Valkey), and goes on when it is refused, as
        // docs/operations.md says; Redis 7.0 answers it as an unknown command, logged nowhere.
        let refused: Vec<String> = log
            .iter()
            .filter_map(|entry| {
                let at = entry
                    .iter()
                    .position(|field| field == &redis::Value::BulkString(b"object".to_vec()))?;
                match entry.get(at + 1)? {
                    redis::Value::BulkString(object) => {
                        Some(String::from_utf8_lossy(object).into_owned())
                    }
                    other => Some(format!("{other:?}")),
                }
            })
            .filter(|object| object != "client|setinfo")
            .collect();
        assert!(
            refused.is_empty(),
            "refused on {}: {refused:?} ({log:?})",
            node.port
        );
    }

    let bare = cluster_user(&cluster, "bare", &[]).await;
    let refused = PathLocks::new(bare, "proj:acl0").delete("/A").await;
    match refused {
        Err(Error::Redis(e)) if e.to_string().contains("'cluster|slots'") => {}
        other => panic!(
            "want the refusal of CLUSTER SLOTS, got {:?}",
            other.map(|_| ())
        ),
    }
}
