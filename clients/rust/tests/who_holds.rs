//! Notes, nesting under a lease, inspection, a waiter sharing the holder's connection manager,
//! and the requests refused before or by the server, on a real server.

mod common;

use std::time::{Duration, Instant};

use common::*;
use pathlock_client::{Blocker, Error, LockRequest, LostReason, Mode, PathLocks};

fn notes(locks: &[Blocker]) -> Vec<(Mode, &str, Option<&str>)> {
    locks
        .iter()
        .map(|b| (b.mode, b.path.as_str(), b.note.as_deref()))
        .collect()
}

/// The scenario: one `ConnectionManager` and one handle; a move held for 5 s with a 3 s
/// TTL, and an upload into it that waits on a clone of the same handle. The move keeps its
/// lease for its whole run, and the upload is granted only after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_the_holders_connection_manager_never_holds_up_its_renewals() {
    let server = Server::start();
    let client = redis::Client::open(server.url()).expect("url");
    let manager = client
        .get_connection_manager()
        .await
        .expect("connection manager");
    let locks = PathLocks::with_connection(client, manager, "proj").ttl(ms(3000));

    let moving = locks.move_into("/A/C", "/B").await.expect("granted");
    let started = Instant::now();
    let upload = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let lease = locks
                .upload("/B/C/new.txt")
                .wait(Duration::from_secs(10))
                .await;
            (Instant::now(), lease)
        })
    };
    wait_until(ms(2000), "the upload to queue", || {
        let locks = locks.clone();
        async move { !locks.waiters(None).await.expect("waiters").is_empty() }
    })
    .await;
    // The move's work: 5 s, with its lease kept all along.
    let lost = tokio::time::timeout(ms(5000), moving.lost()).await;
    assert!(
        lost.is_err(),
        "the move was lost after {:?}",
        started.elapsed()
    );
    moving.check().expect("held for its whole run");
    assert!(
        !upload.is_finished(),
        "the upload was granted during the move"
    );
    let ended = Instant::now();
    moving.release().await.expect("released");
    let (granted_at, uploading) = upload.await.expect("task");
    let uploading = uploading.expect("granted after the move");
    assert!(granted_at >= ended);
    println!(
        "move held {:?} with a 3 s TTL; upload granted {:?} after its release",
        ended - started,
        granted_at - ended
    );
    uploading.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operation_notes_what_it_does_unless_told_otherwise() {
    let server = Server::start();
    let locks = server.locks("proj").await;
    let moving = locks.move_into("/A/C", "/B").await.expect("granted");
    assert_eq!(
        notes(&locks.locks(None, None).await.expect("locks")),
        vec![
            (Mode::Write, "/A/C", Some("move /A/C -> /B")),
            (Mode::Write, "/B/C", Some("move /A/C -> /B")),
        ]
    );
    assert_eq!(moving.note(), Some("move /A/C -> /B"));
    moving.release().await.expect("released");
    let cases = [
        (locks.upload("/D/f"), "upload /D/f"),
        (locks.create("/D/N"), "create /D/N"),
        (locks.read("/D/f"), "read /D/f"),
        (locks.rename("/D/f", "/D/g"), "rename /D/f -> /D/g"),
        (locks.copy("/A/a.txt", "/B"), "copy /A/a.txt -> /B"),
        (locks.delete("/A"), "delete /A"),
        (locks.purge(["/bin/1", "/bin/2"]), "purge /bin/1 /bin/2"),
        (
            locks.lock([(Mode::Read, "/X"), (Mode::Write, "/X/y")]),
            "lock READ /X, WRITE /X/y",
        ),
        (
            locks.upload("/E/f").note("alice: uploading f"),
            "alice: uploading f",
        ),
    ];
    for (acquire, note) in cases {
        let lease = acquire.await.expect("granted");
        let held = locks.locks(None, None).await.expect("locks");
        assert!(
            held.iter().all(|b| b.note.as_deref() == Some(note)),
            "{held:?}"
        );
        lease.release().await.expect("released");
    }
    // The handle's note replaces the operation's; the call's replaces both; "" sends none.
    let worker = server.locks("proj").await.note("worker-7");
    for (acquire, note) in [
        (worker.upload("/F/f"), Some("worker-7")),
        (worker.upload("/F/f").note("Алиса: f"), Some("Алиса: f")),
        (worker.upload("/F/f").note(""), None),
    ] {
        let lease = acquire.await.expect("granted");
        assert_eq!(
            notes(&locks.locks(None, None).await.expect("locks")),
            vec![(Mode::Write, "/F/f", note)]
        );
        lease.release().await.expect("released");
    }
    // A default note stays short, however long the path.
    let long = locks
        .upload(&format!("/{}", "é".repeat(300)))
        .await
        .expect("granted");
    let held = locks.locks(None, None).await.expect("locks");
    let note = held[0].note.as_deref().expect("a note");
    assert!(note.starts_with("upload /éé") && note.ends_with("...") && note.len() <= 100);
    long.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_names_the_blockers_with_their_notes_and_the_handle_inspects() {
    let server = Server::start();
    let locks = server.locks("proj").await;
    let other = server.locks("proj").await;
    let moving = locks
        .move_into("/A/C", "/B")
        .note("alice: move /A/C into /B")
        .await
        .expect("granted");
    match other.upload("/A/C/D/new.txt").await {
        Err(e @ Error::Busy { .. }) => {
            assert!(e.to_string().contains("(alice: move /A/C into /B)"), "{e}");
            let Error::Busy { blockers } = e else {
                unreachable!()
            };
            assert_eq!(
                notes(&blockers),
                vec![(Mode::Write, "/A/C", Some("alice: move /A/C into /B"))]
            );
            assert_eq!(blockers[0].token, moving.token());
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    let beside = other.upload("/A/CD/notes.txt").await.expect("granted");
    let paths = |locks: Vec<Blocker>| -> Vec<(String, String)> {
        locks.into_iter().map(|b| (b.path, b.token)).collect()
    };
    let (m, b) = (moving.token().to_string(), beside.token().to_string());
    assert_eq!(
        paths(locks.locks(None, None).await.expect("locks")),
        vec![
            ("/A/C".into(), m.clone()),
            ("/A/CD/notes.txt".into(), b.clone()),
            ("/B/C".into(), m.clone()),
        ]
    );
    assert_eq!(
        paths(locks.locks(Some("/A"), None).await.expect("locks")),
        vec![
            ("/A/C".into(), m.clone()),
            ("/A/CD/notes.txt".into(), b.clone())
        ]
    );
    assert_eq!(
        paths(locks.locks(None, Some(&m)).await.expect("locks")),
        vec![("/A/C".into(), m.clone()), ("/B/C".into(), m.clone())]
    );
    assert_eq!(
        paths(locks.locks(Some("/B"), Some(&m)).await.expect("locks")),
        vec![("/B/C".into(), m.clone())]
    );
    let blocking = locks
        .check([LockRequest::write("/A")], None)
        .await
        .expect("check");
    assert_eq!(paths(blocking).len(), 2);
    let blocking = locks
        .check([LockRequest::write("/A")], Some(&m))
        .await
        .expect("check");
    assert_eq!(paths(blocking), vec![("/A/CD/notes.txt".into(), b.clone())]);
    assert!(locks
        .check([(Mode::Read, "/Z")], None)
        .await
        .expect("check")
        .is_empty());
    assert!(locks.waiters(None).await.expect("waiters").is_empty());

    let waiting = {
        let other = other.clone();
        tokio::spawn(async move {
            other
                .upload("/B/C/x")
                .wait(ms(5000))
                .note("bob waits")
                .await
        })
    };
    wait_until(ms(2000), "the upload to queue", || {
        let locks = locks.clone();
        async move { !locks.waiters(None).await.expect("waiters").is_empty() }
    })
    .await;
    let queued = locks.waiters(Some("/B/C")).await.expect("waiters");
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].locks, vec![LockRequest::write("/B/C/x")]);
    assert_eq!(queued[0].note.as_deref(), Some("bob waits"));
    assert!(queued[0].left > Duration::ZERO && queued[0].left <= ms(5000));
    assert!(locks.waiters(Some("/A")).await.expect("waiters").is_empty());
    moving.release().await.expect("released");
    let granted = waiting
        .await
        .expect("task")
        .expect("granted after the move");
    assert_eq!(granted.token(), queued[0].token);
    granted.release().await.expect("released");
    beside.release().await.expect("released");
    assert!(locks.locks(None, None).await.expect("locks").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_locks_more_under_its_own_token_renews_and_releases_them() {
    let server = Server::start();
    let locks = server.locks("proj").await.ttl(ms(300));
    let bob = server.locks("proj").await;
    let mut moving = locks.move_into("/A/C", "/B").await.expect("granted");
    assert!(matches!(
        bob.upload("/B/C/new.txt").await,
        Err(Error::Busy { .. })
    ));
    let fence = moving
        .lock([LockRequest::write("/B/C/new.txt")])
        .await
        .expect("granted inside the move");
    assert!(fence > moving.fence());
    assert_eq!(
        moving.locks(),
        &[
            LockRequest::write("/A/C"),
            LockRequest::write("/B/C"),
            LockRequest::write("/B/C/new.txt")
        ]
    );
    assert_eq!(
        notes(
            &locks
                .locks(Some("/B/C/new.txt"), None)
                .await
                .expect("locks")
        ),
        vec![(Mode::Write, "/B/C/new.txt", Some("move /A/C -> /B"))]
    );
    // Beside it too; and again: an idempotent re-acquire, with a new fence and note.
    moving.lock([(Mode::Read, "/R")]).await.expect("granted");
    let again = moving
        .lock([LockRequest::write("/B/C/new.txt")])
        .note("move: writing new.txt")
        .await
        .expect("granted again");
    assert!(again > fence);
    let token = moving.token().to_string();
    assert_eq!(
        locks.locks(None, Some(&token)).await.expect("locks").len(),
        4
    );
    assert_eq!(moving.locks().len(), 4);
    assert_eq!(
        notes(
            &locks
                .locks(Some("/B/C/new.txt"), None)
                .await
                .expect("locks")
        ),
        vec![(Mode::Write, "/B/C/new.txt", Some("move: writing new.txt"))]
    );
    // Another owner in the way.
    let other = bob.upload("/S/x").await.expect("granted");
    match moving.lock([LockRequest::write("/S")]).await {
        Err(Error::Busy { blockers }) => assert_eq!(blockers[0].token, other.token()),
        other => panic!("expected Busy, got {other:?}"),
    }
    other.release().await.expect("released");
    // A nested lock that waits does so on a connection of its own.
    let other = bob.upload("/Q/x").await.expect("granted");
    let releasing = tokio::spawn(async move {
        tokio::time::sleep(ms(500)).await;
        other.release().await
    });
    let started = Instant::now();
    moving
        .lock([LockRequest::write("/Q")])
        .wait(ms(5000))
        .await
        .expect("granted once free");
    assert!(started.elapsed() > ms(400) && started.elapsed() < ms(3000));
    releasing.await.expect("task").expect("released");
    // The watchdog keeps every one of them alive well past the TTL.
    tokio::time::sleep(ms(1200)).await;
    moving.check().expect("held");
    let held = locks.locks(None, Some(&token)).await.expect("locks");
    assert_eq!(held.len(), 5);
    assert!(held
        .iter()
        .all(|b| b.ttl > Duration::ZERO && b.ttl <= ms(300)));
    // Releasing the lease frees everything its token holds.
    moving.release().await.expect("released");
    assert!(locks.locks(None, None).await.expect("locks").is_empty());
    bob.upload("/B/C/new.txt")
        .await
        .expect("free after the release")
        .release()
        .await
        .expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_takes_no_more_locks_and_a_lost_nested_lock_loses_the_lease() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let locks = server.locks("proj").await.ttl(ms(600));
    // The key deleted under the lease: lock() finds out before it would recreate the key.
    let mut lease = locks.move_into("/A/C", "/B").await.expect("granted");
    run(&mut admin, &["DEL", "proj"]).await;
    assert!(matches!(
        lease.lock([LockRequest::write("/B/C/x")]).await,
        Err(Error::Lost {
            reason: LostReason::Gone
        })
    ));
    assert!(lease.is_lost());
    let exists: i64 = redis::cmd("EXISTS")
        .arg("proj")
        .query_async(&mut admin)
        .await
        .expect("EXISTS");
    assert_eq!(exists, 0);
    lease.release().await.expect("released");
    // Locks of the lease released elsewhere while a nested lock still answers the renewals.
    let mut lease = locks.move_into("/A/C", "/B").await.expect("granted");
    lease
        .lock([LockRequest::write("/B/C/x")])
        .await
        .expect("granted");
    tokio::time::sleep(ms(500)).await; // a renewal has counted the lease's three locks
    run(
        &mut admin,
        &["PATHLOCK.RELEASE", "proj", lease.token(), "/A/C"],
    )
    .await;
    let took = time_to(ms(2000), "loss", lease.lost()).await;
    assert!(took <= ms(200) + SLACK, "reported after {took:?}");
    assert_eq!(lease.lost_reason(), Some(LostReason::Gone));
    lease.release().await.expect("released");
    assert!(locks_of(&mut admin, "proj").await.is_empty());
}

const SLACK: Duration = Duration::from_millis(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_checked_before_they_are_sent_and_a_wrong_key_is_named() {
    let server = Server::start();
    let mut admin = server.admin().await;
    let locks = server.locks("proj").await;
    let whole_project = |e: Result<_, Error>| match e {
        Err(Error::Invalid(why)) => why.contains("whole project"),
        _ => false,
    };
    assert!(whole_project(locks.upload("").await));
    assert!(whole_project(locks.upload("/").await));
    assert!(whole_project(locks.create("//").await));
    assert!(whole_project(locks.read("/./").await));
    assert!(whole_project(locks.delete("/").await));
    assert!(whole_project(locks.rename("/A", "").await));
    assert!(whole_project(locks.move_into("/", "/B").await));
    assert!(whole_project(locks.copy("", "/B").await));
    assert!(whole_project(locks.purge(["/bin/1", ""]).await));
    assert!(
        matches!(locks.move_into("/A/C", "").await, Err(Error::Invalid(why)) if why.contains("into_folder"))
    );
    assert!(
        matches!(locks.lock([LockRequest::write("")]).await, Err(Error::Invalid(why)) if why.contains("empty"))
    );
    assert!(locks_of(&mut admin, "proj").await.is_empty());
    let everything = locks.lock([(Mode::Write, "/")]).await.expect("granted");
    assert_eq!(
        notes(&locks.locks(None, None).await.expect("locks")),
        vec![(Mode::Write, "/", Some("lock WRITE /"))]
    );
    everything.release().await.expect("released");

    // TTLs the server would refuse (or read as no TTL) are refused with their units.
    for (acquire, shown) in [
        (
            locks.upload("/A").ttl(Duration::ZERO),
            "ttl must be at least 1 ms",
        ),
        (
            locks.upload("/A").ttl(Duration::from_micros(500)),
            "not 500µs",
        ),
        (
            locks.upload("/A").wait(Duration::from_micros(500)),
            "wait must be at least 1 ms",
        ),
        (
            locks
                .upload("/A")
                .replicas(1)
                .replicas_timeout(Duration::ZERO),
            "replicas_timeout must be at least 1 ms",
        ),
    ] {
        match acquire.await {
            Err(e @ Error::Invalid(_)) => assert!(e.to_string().contains(shown), "{e}"),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }
    assert!(locks_of(&mut admin, "proj").await.is_empty());

    // A key of another type.
    run(&mut admin, &["SET", "cache:1", "hello"]).await;
    let cache = server.locks("cache:1").await;
    let wrong = |e: Error| match e {
        Error::WrongType { key } => key == "cache:1",
        _ => false,
    };
    assert!(wrong(cache.upload("/A").await.expect_err("refused")));
    assert!(wrong(cache.locks(None, None).await.expect_err("refused")));
    assert!(wrong(
        cache
            .check([(Mode::Read, "/A")], None)
            .await
            .expect_err("refused")
    ));
    let refusal = cache.waiters(None).await.expect_err("refused");
    assert_eq!(
        refusal.to_string(),
        "key 'cache:1' is not a pathlock project: it holds another type of value (check the key name)"
    );
    // A project overwritten under a lease: the lease is lost, and says why.
    let lease = locks.ttl(ms(600)).upload("/A").await.expect("granted");
    run(&mut admin, &["SET", "proj", "not a project any more"]).await;
    assert_eq!(time_to_reason(lease.lost()).await, LostReason::Replaced);
    assert!(lease
        .check()
        .expect_err("lost")
        .to_string()
        .contains("another type of value"));
    lease.release().await.expect("released");
}

async fn time_to_reason(lost: impl std::future::Future<Output = LostReason>) -> LostReason {
    tokio::time::timeout(ms(2000), lost)
        .await
        .expect("lost within 2 s")
}
