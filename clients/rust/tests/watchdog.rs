//! The watchdog against a real server: it keeps a short lease alive for as long as the holder
//! runs, reports a loss within one renewal period (token released elsewhere, key deleted,
//! server paused or stopped past the deadline), survives an outage shorter than the deadline,
//! and a release that meets a renewal in flight neither keeps the lock nor reports a loss.

mod common;

use std::time::Duration;

use common::proxy::{Behaviour, Proxy};
use common::*;
use pathlock_client::{Error, LostReason};

/// How late a loss may be reported past the moment it became knowable (one renewal period is
/// added by each test); generous, for a shared 2-core machine.
const SLACK: Duration = Duration::from_millis(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_300_ms_lease_for_3_s() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let locks = server.locks("proj").await.ttl(ms(300));
    let other = server.locks("proj").await;
    let renewals_before = info_number(&mut admin, "pathlock_total_renewals").await;

    let lease = locks.upload("/A/a.txt").await.expect("granted");
    for _ in 0..10 {
        tokio::time::sleep(ms(300)).await;
        assert!(!lease.is_lost());
        assert!(
            matches!(other.upload("/A/a.txt").await, Err(Error::Busy { .. })),
            "the lock outlived its TTL only while renewed"
        );
    }
    let held = locks_of(&mut admin, "proj").await;
    assert_eq!(
        held,
        vec![(
            "/A/a.txt".to_string(),
            "WRITE".to_string(),
            lease.token().to_string(),
            lease.fence()
        )]
    );
    // One RENEW per ttl/3: about 30 in 3 s.
    let renewals = info_number(&mut admin, "pathlock_total_renewals").await - renewals_before;
    assert!((24..=34).contains(&renewals), "{renewals} renewals in 3 s");

    lease.release().await.expect("released");
    assert!(locks_of(&mut admin, "proj").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_released_elsewhere_or_deleted_is_lost_within_one_renewal_period() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let ttl = ms(600);
    let period = ttl / 3;
    let locks = server.locks("proj").await.ttl(ttl);

    // Released by someone else who has the token.
    let lease = locks.delete("/A").await.expect("granted");
    tokio::time::sleep(ms(250)).await;
    run(&mut admin, &["PATHLOCK.RELEASE", "proj", lease.token()]).await;
    let took = time_to(ms(2000), "loss", lease.lost()).await;
    assert!(took <= period + SLACK, "reported after {took:?}");
    assert!(lease.is_lost());
    assert!(matches!(
        lease.check(),
        Err(Error::Lost {
            reason: LostReason::Gone
        })
    ));
    // Releasing a lost lease is not an error.
    lease.release().await.expect("released");

    // The key deleted.
    let lease = locks.delete("/A").await.expect("granted");
    tokio::time::sleep(ms(250)).await;
    run(&mut admin, &["DEL", "proj"]).await;
    let took = time_to(ms(2000), "loss", lease.lost()).await;
    assert!(took <= period + SLACK, "reported after {took:?}");
    assert!(lease.is_lost());
    drop(lease);

    // A lease that is fine is not reported lost, and its lost() stays pending after release.
    let lease = locks.delete("/A").await.expect("granted");
    let lost = lease.lost();
    lease.release().await.expect("released");
    assert!(tokio::time::timeout(ttl, lost).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_on_a_paused_server_is_lost_at_its_deadline() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let ttl = ms(600);
    let period = ttl / 3;
    let locks = server.locks("proj").await.ttl(ttl);
    let lease = locks.upload("/f").await.expect("granted");
    tokio::time::sleep(ms(250)).await;

    // Writes (RENEW among them) wait while the server is paused; the last successful renewal
    // was sent at most one period before the pause, so the deadline falls within
    // [ttl - period, ttl] after it.
    run(&mut admin, &["CLIENT", "PAUSE", "3000", "WRITE"]).await;
    let took = time_to(ms(3000), "loss", lease.lost()).await;
    run(&mut admin, &["CLIENT", "UNPAUSE"]).await;
    assert!(
        took + SLACK >= ttl - period && took <= ttl + SLACK,
        "reported after {took:?}"
    );
    assert_eq!(lease.lost_reason(), Some(LostReason::Expired));
    lease
        .release()
        .await
        .expect("releasing a lost lease is not an error");
    assert!(locks_of(&mut admin, "proj").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_on_a_stopped_server_is_lost_at_its_deadline() {
    let mut server = Server::start();
    let ttl = ms(600);
    let period = ttl / 3;
    let locks = server.locks("proj").await.ttl(ttl);
    let lease = locks.upload("/f").await.expect("granted");
    tokio::time::sleep(ms(250)).await;

    server.stop();
    let took = time_to(ms(3000), "loss", lease.lost()).await;
    assert!(
        took + SLACK >= ttl - period && took <= ttl + SLACK,
        "reported after {took:?}"
    );
    assert!(matches!(
        lease.check(),
        Err(Error::Lost {
            reason: LostReason::Expired
        })
    ));
    // The server is gone, yet releasing the lost lease is not an error.
    lease.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_shorter_than_the_deadline_loses_nothing() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let proxy = Proxy::start(server.port).await;
    let ttl = ms(900);
    let locks = locks_via(proxy.port, "proj").await.ttl(ttl);
    let lease = locks.upload("/f").await.expect("granted");

    // Every connection cut and new ones refused for a third of the TTL: renewals fail and are
    // retried until one gets through before the deadline.
    tokio::time::sleep(ms(100)).await;
    proxy.set(Behaviour::Refuse);
    proxy.cut();
    tokio::time::sleep(ms(300)).await;
    proxy.set(Behaviour::Forward);

    tokio::time::sleep(ttl * 2).await;
    assert!(!lease.is_lost());
    let held = locks_of(&mut admin, "proj").await;
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].2, lease.token());
    lease.release().await.expect("released");
    assert!(locks_of(&mut admin, "proj").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_meets_a_renewal_in_flight_neither_keeps_the_lock_nor_reports_a_loss() {
    let server = Server::start();
    let mut admin = server.admin().await;
    // Every request takes 30 ms to reach the server, and the lease is renewed every 50 ms, so
    // most releases are sent while a renewal is on its way.
    let proxy = Proxy::start(server.port).await;
    proxy.set(Behaviour::Delay(ms(30)));
    let ttl = ms(150);
    let locks = locks_via(proxy.port, "proj").await.ttl(ttl);
    let renewals_before = info_number(&mut admin, "pathlock_total_renewals").await;

    let mut lost = Vec::new();
    for i in 0..24u64 {
        let lease = locks.upload("/f").await.expect("granted");
        // Spread the releases over two renewal periods.
        tokio::time::sleep(ms(40 + (i * 11) % 100)).await;
        // A stall of the test machine longer than the deadline may lose a lease for real;
        // what must never happen is a loss reported after the release.
        if !lease.is_lost() {
            lost.push(lease.lost());
        }
        lease.release().await.expect("released");
        assert!(locks_of(&mut admin, "proj").await.is_empty());
    }
    assert!(lost.len() >= 20, "only {} of 24 leases held", lost.len());
    assert!(info_number(&mut admin, "pathlock_total_renewals").await > renewals_before);

    // Nothing comes back to life and nothing is reported lost once every renewal has landed.
    tokio::time::sleep(ttl * 2).await;
    assert!(locks_of(&mut admin, "proj").await.is_empty());
    for lost in lost {
        assert!(tokio::time::timeout(ms(1), lost).await.is_err());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_lease_releases_it_in_the_background() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let locks = server.locks("proj").await;
    {
        let _lease = locks.rename("/a", "/b").await.expect("granted");
        assert_eq!(locks_of(&mut admin, "proj").await.len(), 2);
    }
    let mut probe = admin.clone();
    wait_until(ms(2000), "the dropped lease to be released", || {
        let mut probe = probe.clone();
        async move { locks_of(&mut probe, "proj").await.is_empty() }
    })
    .await;
    let _ = &mut probe;
}
