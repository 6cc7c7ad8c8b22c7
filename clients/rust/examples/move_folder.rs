//! The README's example: move folder `/A/C` into `/B` under a lease, stopping if it is lost.
//! Run it against a server with the module: `cargo run -p pathlock-client --example move_folder`
//! (`REDIS_URL` defaults to redis://127.0.0.1/).

use std::time::Duration;

use pathlock_client::{Error, PathLocks};

type Failure = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Failure> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let client = redis::Client::open(url)?;
    let locks = PathLocks::new(client, "proj:42").ttl(Duration::from_secs(30));

    // Move folder /A/C into /B: WRITE /A/C and WRITE /B/C, all or nothing.
    let lease = match locks.move_into("/A/C", "/B").await {
        Ok(lease) => lease,
        Err(Error::Busy { blockers }) => {
            for b in &blockers {
                println!("{} is locked ({}) by {}", b.path, b.mode, b.token);
            }
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    tokio::select! {
        done = move_folder("/A/C", "/B/C", lease.fence()) => done?,
        _ = lease.lost() => return Err("the lease was lost; the move stopped".into()),
    }
    lease.release().await?;
    println!("moved /A/C into /B");
    Ok(())
}

/// Stands in for the storage work, which would pass `fence` with each write.
async fn move_folder(from: &str, to: &str, fence: u64) -> Result<(), Failure> {
    println!("moving {from} to {to} with fence {fence}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}
