//! The README's example (`examples/move_folder.rs`), and what a newcomer writes from the README
//! alone: one handle whose clones share its connection, a waiting upload into a folder being
//! moved, more locks under the move, who holds what, an empty path and a wrong TTL.

mod common;

#[path = "../examples/move_folder.rs"]
#[allow(dead_code)]
mod move_folder;

use std::time::Duration;

use common::*;
use pathlock_client::{Error, LockRequest, PathLocks};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_example_runs() {
    let server = Server::start();
    let mut admin = server.admin().await;
    move_folder::example(&server.url())
        .await
        .expect("the example runs");
    assert!(locks_of(&mut admin, "proj:42").await.is_empty());
    // With the folder taken by someone else, the example says by whom and stops.
    let bob = server
        .locks("proj:42")
        .await
        .rename("/A/C", "D")
        .note("bob: rename /A/C to /A/D")
        .await
        .expect("granted");
    move_folder::example(&server.url())
        .await
        .expect("the example runs");
    assert_eq!(locks_of(&mut admin, "proj:42").await.len(), 2);
    bob.release().await.expect("released");
}

/// The top-level README's Rust example is `move_folder::overview`'s body, line for line (the
/// URL spelled out), so it compiles; and it runs, free or blocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_top_readme_example_compiles_and_runs() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let after = &readme[readme.find("**Rust**").expect("the Rust section")..];
    let block = &after[after.find("```rust\n").expect("its example") + 8..];
    let block = &block[..block.find("```").expect("the example's end")];
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/move_folder.rs"
    ))
    .expect("example");
    let body = &example[example.find("pub async fn overview").expect("overview")..];
    let body: Vec<&str> = body.lines().skip(1).map(str::trim).collect();
    for line in block.lines().map(str::trim) {
        let line = line.replace("\"redis://127.0.0.1/\"", "url");
        assert!(
            body.iter().any(|l| *l == line),
            "README.md's Rust example line {line:?} is not in move_folder::overview"
        );
    }

    let server = Server::start();
    let mut admin = server.admin().await;
    move_folder::overview(&server.url())
        .await
        .expect("the example runs");
    assert!(locks_of(&mut admin, "proj:42").await.is_empty());
    let bob = server
        .locks("proj:42")
        .await
        .upload("/B/C")
        .await
        .expect("granted");
    move_folder::overview(&server.url())
        .await
        .expect("the example stops, saying who holds /B/C");
    // Refused, it took nothing: only Bob's upload is held.
    assert_eq!(locks_of(&mut admin, "proj:42").await.len(), 1);
    bob.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_newcomer_writes() {
    let server = Server::start();
    let client = redis::Client::open(server.url()).expect("url");
    let locks = PathLocks::new(client, "proj").ttl(Duration::from_secs(3));
    let mut said = Vec::new();

    let mut moving = locks
        .move_into("/A/C", "/B")
        .note("alice: move /A/C into /B")
        .await
        .expect("granted");
    moving
        .lock([LockRequest::write("/B/C/new.txt")])
        .await
        .expect("granted");
    // Bob is willing to wait up to 10 s for the move to finish.
    let bob = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .upload("/B/C/bob.txt")
                .wait(Duration::from_secs(10))
                .note("bob: upload")
                .await
        }
    });
    while locks.waiters(None).await.expect("waiters").is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for waiter in locks.waiters(None).await.expect("waiters") {
        said.push(format!(
            "{} waits for {:?}",
            waiter.note.unwrap_or_default(),
            waiter.locks
        ));
    }
    for lock in locks
        .locks(None, Some(moving.token()))
        .await
        .expect("locks")
    {
        said.push(format!("{}: {}", lock.path, lock.note.unwrap_or_default()));
    }
    if let Err(Error::Busy { blockers, .. }) = locks.upload("/B/C/new.txt").await {
        said.push(format!(
            "busy: {}",
            blockers[0].note.clone().unwrap_or_default()
        ));
    }
    // Longer than the TTL: the move is still held, bob still waits.
    tokio::time::sleep(Duration::from_secs(4)).await;
    moving.check().expect("still held");
    assert!(!bob.is_finished());
    let fence = moving.fence();
    moving.release().await.expect("released");
    let upload = bob.await.expect("task").expect("granted after the move");
    assert!(upload.fence() > fence);
    upload.release().await.expect("released");
    assert_eq!(
        said,
        [
            "bob: upload waits for [LockRequest { mode: Write, path: \"/B/C/bob.txt\" }]",
            "/A/C: alice: move /A/C into /B",
            "/B/C: alice: move /A/C into /B",
            "/B/C/new.txt: alice: move /A/C into /B",
            "busy: alice: move /A/C into /B",
        ]
    );
    assert!(locks.locks(None, None).await.expect("locks").is_empty());

    // Mistakes a newcomer makes are told what to do instead.
    let empty = locks.upload("").await.expect_err("refused");
    assert!(
        empty.to_string().contains("lock([(Mode::Write, \"/\")])"),
        "{empty}"
    );
    // Half a millisecond? A TTL is at least one.
    let ttl = locks
        .upload("/A")
        .ttl(Duration::from_micros(500))
        .await
        .expect_err("refused");
    assert!(ttl.to_string().contains("at least 1 millisecond"), "{ttl}");
    // A whole path as the new name, as 0.1 took it: rename takes a name.
    let renamed = locks.rename("/A/C", "/A/C2").await.expect_err("refused");
    assert!(
        renamed.to_string().contains("rename takes a name"),
        "{renamed}"
    );
    let mut admin = server.admin().await;
    run(&mut admin, &["SET", "settings", "{}"]).await;
    let wrong = server
        .locks("settings")
        .await
        .upload("/A")
        .await
        .expect_err("refused");
    assert!(
        wrong
            .to_string()
            .contains("\"settings\" is not a pathlock project"),
        "{wrong}"
    );
}
