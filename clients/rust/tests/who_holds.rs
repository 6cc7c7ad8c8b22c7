//! What this client does beyond the shared contract (`tests/contract.rs`): how long a default
//! note gets. Which note each operation sends, nesting, inspection and refusals are scenarios.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_note_stays_short_however_long_the_path() {
    let server = Server::start();
    let locks = server.locks("proj:notes").await;
    let long = locks
        .upload(&format!("/{}", "é".repeat(300)))
        .await
        .expect("granted");
    let held = locks.locks(None, None).await.expect("locks");
    let note = held[0].note.as_deref().expect("a note");
    assert!(note.starts_with("upload /éé") && note.ends_with("...") && note.len() <= 100);
    long.release().await.expect("released");
}
