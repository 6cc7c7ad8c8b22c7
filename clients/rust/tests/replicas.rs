//! `replicas` against a real master and replica: a grant acknowledged by the replica is
//! returned (and is on the replica); with the replica stopped, the acquire fails with
//! `NotReplicated` and leaves no lock behind.

mod common;

use common::*;
use pathlock_client::Error;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_waits_for_its_replica_and_fails_without_it() {
    let master = Server::start();
    let mut replica = Server::replica_of(&master).await;
    let mut on_master = master.admin().await;
    let mut on_replica = replica.admin().await;
    let locks = master
        .locks("proj")
        .await
        .replicas(1)
        .replicas_timeout(ms(300));

    let lease = locks.upload("/A/a.txt").await.expect("acknowledged");
    // WAIT returned, so the replica has the grant already.
    assert_eq!(
        locks_of(&mut on_replica, "proj").await,
        locks_of(&mut on_master, "proj").await
    );
    assert_eq!(locks_of(&mut on_replica, "proj").await.len(), 1);
    lease.release().await.expect("released");

    replica.stop();
    match locks.upload("/B/b.txt").await {
        Err(Error::NotReplicated { acked, wanted }) => {
            assert_eq!((acked, wanted), (0, 1));
        }
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(locks_of(&mut on_master, "proj").await.is_empty());

    // Without replicas asked for, the same grant goes through.
    let lease = locks.upload("/B/b.txt").replicas(0).await.expect("granted");
    lease.release().await.expect("released");
}
