//! The README's example: move folder `/A/C` into `/B` under a lease, with a note, a file written
//! inside the move under its own token, and a look at who holds what; stopping if the lease is
//! lost. Run it against a server with the module: `cargo run -p pathlock-client --example
//! move_folder` (`REDIS_URL` defaults to redis://127.0.0.1/). `tests/newcomer.rs` runs it too.

use std::time::Duration;

use pathlock_client::{Error, LockRequest, PathLocks};

type Failure = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Failure> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    example(&url).await
}

pub async fn example(url: &str) -> Result<(), Failure> {
    let client = redis::Client::open(url)?;
    // One handle per project key; its clones and leases share one connection.
    let locks = PathLocks::new(client, "proj:42");

    // WRITE /A/C and WRITE /B/C, all or nothing; the note is what others are told.
    let moving = locks
        .move_into("/A/C", "/B")
        .note("alice: move /A/C into /B");
    let mut moving = match moving.await {
        Ok(lease) => lease,
        Err(Error::Busy { blockers, .. }) => {
            for b in &blockers {
                // "/A/C is locked (WRITE) by bob: rename /A/C to /A/D"
                let by = b.note.as_deref().unwrap_or(&b.token);
                println!("{} is locked ({}) by {by}", b.path, b.mode);
            }
            if blockers.is_empty() {
                // Nobody holds them now: they let go in between, or a waiting request goes first.
                // Or the check that names them failed (`check_error`): unknown, not nobody.
                println!("the folders were busy a moment ago; try again");
            }
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    // More locks under the move's own token: renewed and released with it.
    moving.lock([LockRequest::write("/B/C/new.txt")]).await?;
    tokio::select! {
        // The storage keeps the highest fence it has seen for each path it writes, and refuses
        // a write to that path with a lower one (a fence per path, never one global).
        done = move_folder("/A/C", "/B/C", moving.fence()) => done?,
        Some(reason) = moving.lost() => return Err(format!("the move stopped: {reason}").into()),
    }
    // Who holds what under /B, with their notes.
    for lock in locks.locks(Some("/B"), None).await? {
        println!("{} {} is held: {:?}", lock.mode, lock.path, lock.note);
    }
    moving.release().await?;
    println!("moved /A/C into /B");
    Ok(())
}

/// The top-level README's shorter Rust example, line for line (`tests/newcomer.rs` checks that
/// the README prints these lines, with the URL spelled out, and runs it), so rustfmt leaves it.
#[rustfmt::skip]
pub async fn overview(url: &str) -> Result<(), Failure> {
    let locks = PathLocks::new(redis::Client::open(url)?, "proj:42");
    let lease = match locks.move_into("/A/C", "/B").note("alice: move /A/C into /B").await {
        Ok(lease) => lease,
        Err(Error::Busy { blockers, .. }) => {
            // Who holds it, and why (none named: free again, try again).
            for b in &blockers {
                let by = b.note.as_deref().unwrap_or(&b.token);
                println!("{} is locked ({}) by {by}", b.path, b.mode);
            }
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    tokio::select! {
        done = move_folder("/A/C", "/B/C", lease.fence()) => done?,
        Some(reason) = lease.lost() => return Err(format!("the move stopped: {reason}").into()),
    }
    lease.release().await?;
    Ok(())
}

/// Stands in for the storage work, which would pass `fence` with each write.
async fn move_folder(from: &str, to: &str, fence: u64) -> Result<(), Failure> {
    println!("moving {from} to {to} with fence {fence}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}
