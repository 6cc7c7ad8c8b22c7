//! The watchdog beyond the shared contract (`tests/contract.rs`, which has its losses): it
//! survives an outage shorter than the deadline, a release that meets a renewal in flight
//! neither keeps the lock nor reports a loss, and dropping a lease releases it.

mod common;

use common::proxy::{Behaviour, Proxy};
use common::*;

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
    let renewals_before = info_pathlock(&mut admin, "pathlock_total_renewals").await;

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
    assert!(info_pathlock(&mut admin, "pathlock_total_renewals").await > renewals_before);

    // Nothing comes back to life and nothing is reported lost once every renewal has landed:
    // each loss wait ends, with no reason.
    tokio::time::sleep(ttl * 2).await;
    assert!(locks_of(&mut admin, "proj").await.is_empty());
    for lost in lost {
        assert_eq!(tokio::time::timeout(ms(1000), lost).await, Ok(None));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_lease_releases_it_in_the_background() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let locks = server.locks("proj").await;
    {
        let _lease = locks.rename("/a", "b").await.expect("granted");
        assert_eq!(locks_of(&mut admin, "proj").await.len(), 2);
    }
    let mut probe = admin.clone();
    until(ms(2000), "the dropped lease to be released", || {
        let mut probe = probe.clone();
        async move { locks_of(&mut probe, "proj").await.is_empty() }
    })
    .await;
    let _ = &mut probe;
}
