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

/// A waiter dropped just as the holder lets go: the server may grant the queued request before
/// it reads the close of the waiter's connection, and the client's background RELEASE, sent on
/// another connection, must not go out before that late grant. Repeated with random timing;
/// each round must end with neither a lock nor a waiter left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_as_the_holder_releases_leaves_no_lock_behind() {
    let server = Server::start();
    let admin = server.admin().await;
    // A long TTL: a lock left behind outlives the round's deadline rather than expiring.
    let locks = server.locks("proj").await.ttl(ms(30_000));
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .subsec_nanos()
        | 1;
    let mut random = move |below: u32| {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed % below
    };
    let mut dropped = 0;
    for _ in 0..200 {
        let holder = locks.upload("/A").await.expect("granted");
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move { locks.upload("/A").wait(ms(10_000)).await })
        };
        let probe = admin.clone();
        until(ms(2000), "the waiter to queue", || {
            let mut probe = probe.clone();
            async move { info_pathlock(&mut probe, "pathlock_clients_waiting").await == 1 }
        })
        .await;
        let (release_turns, abort_turns) = (random(40), random(40));
        let releasing = tokio::spawn(async move {
            for _ in 0..release_turns {
                tokio::task::yield_now().await;
            }
            holder.release().await.expect("released");
        });
        for _ in 0..abort_turns {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        releasing.await.expect("release task");
        match waiter.await {
            Ok(granted) => granted.expect("granted").release().await.expect("released"),
            Err(e) if e.is_cancelled() => dropped += 1,
            Err(e) => panic!("waiter task: {e}"),
        }
        let probe = admin.clone();
        until(ms(3000), "no lock and no waiter left", || {
            let mut probe = probe.clone();
            async move {
                let waiters: Vec<redis::Value> = redis::cmd("PATHLOCK.WAITERS")
                    .arg("proj")
                    .query_async(&mut probe)
                    .await
                    .expect("WAITERS");
                locks_of(&mut probe, "proj").await.is_empty() && waiters.is_empty()
            }
        })
        .await;
    }
    eprintln!("{dropped} of 200 waiters were dropped before their grant came back");
}

/// A refusal whose `PATHLOCK.CHECK` fails with a connection error: the `Busy` carries that error
/// and says that the locks in the way could not be read, never that nothing holds them (someone
/// does); a check that gets through names the holder and carries no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_whose_check_failed_says_the_blockers_are_unknown() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let holder = server.locks("proj").await;
    let held = holder.upload("/F/x").await.expect("the holder's lease");
    let proxy = Proxy::start(server.port).await;
    let locks = locks_via(proxy.port, "proj").await;

    // Without a wait the ACQUIRE and the CHECK share the handle's connection; with one, the
    // ACQUIRE runs on a connection of its own and the CHECK on the shared one.
    for wait in [ms(0), ms(50)] {
        proxy.set(Behaviour::Forward);
        match locks.upload("/F/x").wait(wait).await {
            Err(Error::Busy {
                blockers,
                check_error: None,
                ..
            }) => {
                let tokens: Vec<&str> = blockers.iter().map(|b| b.token.as_str()).collect();
                assert_eq!(tokens, [held.token()], "wait {wait:?}");
            }
            other => panic!("expected busy with the holder, got {other:?}"),
        }

        proxy.set(Behaviour::CutOnCheck);
        let error = locks
            .upload("/F/x")
            .wait(wait)
            .await
            .expect_err("the path is held");
        let message = error.to_string();
        let source = std::error::Error::source(&error).map(ToString::to_string);
        let Error::Busy {
            blockers,
            check_error: Some(check_error),
            ..
        } = error
        else {
            panic!("expected busy with the check's error, got {error:?}");
        };
        assert!(blockers.is_empty(), "{blockers:?}");
        assert!(check_error.is_io_error(), "{check_error}");
        assert_eq!(source, Some(check_error.to_string()));
        assert_eq!(
            message,
            format!(
                "busy: WRITE /F/x in \"proj\": the locks in the way could not be read \
                 ({check_error}); try again"
            )
        );
        assert!(!message.contains("nothing holds"), "{message}");
    }
    // The refused requests left nothing behind: the holder's lock alone.
    proxy.set(Behaviour::Forward);
    let tokens: Vec<String> = locks_of(&mut admin, "proj")
        .await
        .into_iter()
        .map(|(_, _, token, _)| token)
        .collect();
    assert_eq!(tokens, [held.token()]);
    held.release().await.expect("released");
}
