//! Acquiring through a proxy that cuts or refuses connections, beyond the shared contract
//! (`tests/contract.rs`): an acquire whose reply is lost with its connection is retried as the
//! same owner (one lock, not two), and when the retry cannot get through, the token is released
//! once the server is back; a cancelled acquire leaves no lock behind.

mod common;

use std::future::IntoFuture;

use common::proxy::{After, Behaviour, Proxy};
use common::*;
use pathlock_client::Error;

fn lock(path: &str, mode: &str, token: &str, fence: u64) -> Lock {
    (path.to_string(), mode.to_string(), token.to_string(), fence)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_is_lost_is_retried_as_the_same_owner() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let proxy = Proxy::start(server.port).await;
    let locks = locks_via(proxy.port, "proj").await.ttl(ms(600));
    let grants_before = info_pathlock(&mut admin, "pathlock_total_grants").await;

    // The server grants the first attempt; its reply is lost with the connection.
    proxy.set(Behaviour::CutAfterAcquire {
        then: After::Forward,
    });
    let lease = locks.upload("/A").await.expect("granted on the retry");
    assert_eq!(
        info_pathlock(&mut admin, "pathlock_total_grants").await - grants_before,
        2,
        "the first attempt was granted too"
    );
    // One owner, one lock, with the fence of the retry's grant.
    assert_eq!(
        locks_of(&mut admin, "proj").await,
        vec![lock("/A", "WRITE", lease.token(), lease.fence())]
    );
    // Kept alive by its watchdog like any other.
    tokio::time::sleep(ms(900)).await;
    assert!(!lease.is_lost());
    lease.release().await.expect("released");
    assert!(locks_of(&mut admin, "proj").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_refused_for_a_waiter_that_came_in_between_recovers_the_grant() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let proxy = Proxy::start(server.port).await;
    let locks = locks_via(proxy.port, "proj").await.ttl(ms(5000));

    // The grant's reply is lost, and the client cannot reconnect for a while.
    proxy.set(Behaviour::CutAfterAcquire {
        then: After::Refuse,
    });
    let acquiring = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.upload("/A").wait(ms(1000)).await })
    };
    let mut probe = admin.clone();
    until(ms(2000), "the first grant", || {
        let mut probe = probe.clone();
        async move { locks_of(&mut probe, "proj").await.len() == 1 }
    })
    .await;
    let _ = &mut probe;
    let granted = locks_of(&mut admin, "proj").await;

    // Meanwhile another owner queues for the same path. Nobody may overtake a waiter, so the
    // retry is refused although its token holds the lock.
    let waiter = {
        let mut other = server.admin().await;
        tokio::spawn(async move {
            redis::cmd("PATHLOCK.ACQUIRE")
                .arg(&["proj", "WAIT", "5000", "WRITE", "/A"])
                .query_async::<Option<(String, u64)>>(&mut other)
                .await
        })
    };
    let mut probe = admin.clone();
    until(ms(2000), "the waiter", || {
        let mut probe = probe.clone();
        async move { info_pathlock(&mut probe, "pathlock_clients_waiting").await == 1 }
    })
    .await;
    let _ = &mut probe;
    proxy.set(Behaviour::Forward);

    let lease = acquiring.await.expect("task").expect("the earlier grant");
    assert_eq!(lease.token(), granted[0].2);
    assert_eq!(lease.fence(), granted[0].3);
    assert!(!waiter.is_finished());
    lease.release().await.expect("released");
    let (_, fence) = waiter
        .await
        .expect("task")
        .expect("reply")
        .expect("the waiter is granted after the release");
    assert!(fence > granted[0].3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_that_cannot_get_through_fails_and_its_token_is_released_later() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let proxy = Proxy::start(server.port).await;
    let locks = locks_via(proxy.port, "proj").await.ttl(ms(10_000));

    proxy.set(Behaviour::CutAfterAcquire {
        then: After::Refuse,
    });
    match locks.upload("/A").await {
        Err(Error::Redis(e)) => assert!(e.is_io_error(), "{e}"),
        other => panic!("expected the connection error, got {other:?}"),
    }
    // The first attempt was granted: the lock is there until the client can release it.
    let granted = locks_of(&mut admin, "proj").await;
    assert_eq!(granted.len(), 1);

    tokio::time::sleep(ms(200)).await;
    proxy.set(Behaviour::Forward);
    let mut probe = admin.clone();
    until(ms(3000), "the background release", || {
        let mut probe = probe.clone();
        async move { locks_of(&mut probe, "proj").await.is_empty() }
    })
    .await;
    let _ = &mut probe;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_leaves_no_lock_behind() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let locks = server.locks("proj").await;
    let holder = locks.upload("/A").await.expect("granted");

    // A waiting acquire, given up by its caller while the server still queues it. It waited on
    // a connection of its own, which closes with it: the server forgets the waiter at once.
    let waiting = locks.upload("/A").wait(ms(3000));
    assert!(tokio::time::timeout(ms(100), waiting.into_future())
        .await
        .is_err());
    let mut probe = admin.clone();
    until(ms(2000), "the server to forget the waiter", || {
        let mut probe = probe.clone();
        async move { info_pathlock(&mut probe, "pathlock_clients_waiting").await == 0 }
    })
    .await;
    let _ = &mut probe;

    // So the holder's release grants nothing, and nothing is left behind.
    holder.release().await.expect("released");
    assert!(locks_of(&mut admin, "proj").await.is_empty());
    assert_eq!(
        info_pathlock(&mut admin, "pathlock_total_waits_granted").await,
        0
    );
}
