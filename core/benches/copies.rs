//! What `COPY` of a big project costs the engine, and what the first writes after it cost:
//! the sharing copy (`LockTable::share`) side by side with a copy of every element (`clone`),
//! which is what `COPY` did before, in one run.
//!
//! `cargo bench -p pathlock-core --bench copies` (`COPIES_LOCKS`, default 1,000,000 and
//! 10,000,000, comma-separated). Paths and tokens as in the pauses bench: depth 3
//! (`/p<i%1000>/d<i/1000%1000>/f<i>`), one fresh UUID-like token each. After the copy, 4,000
//! writes alternate between the original and the copy: a release of a lock picked across the
//! whole project (so each lands in storage no write has touched since the copy, and copies it)
//! and an acquire of a new path. Every call is timed by the thread's CPU clock (page faults
//! included), which other processes of a shared machine do not disturb.

mod common;

use std::time::Instant;

use common::{cpu_nanos, path, token};

use pathlock_core::{LockTable, Mode, Path, PathLimits};

fn ms(nanos: u128) -> f64 {
    nanos as f64 / 1e6
}

/// Times `work` by the thread's CPU clock.
fn timed<R>(work: impl FnOnce() -> R) -> (R, u128) {
    let t = cpu_nanos();
    let result = work();
    (result, cpu_nanos() - t)
}

/// The first writes after a copy, alternating between the two sides. Returns the worst and
/// the median time of one call.
fn first_writes(original: &mut LockTable, copy: &mut LockTable, locks: usize) -> (u128, u128) {
    const WRITES: usize = 4_000;
    let step = (locks / (WRITES / 2)).max(1);
    let mut times = Vec::with_capacity(WRITES);
    for k in 0..WRITES / 2 {
        let side = if k % 2 == 0 {
            &mut *original
        } else {
            &mut *copy
        };
        let i = (k * step) % locks;
        let (freed, spent) = timed(|| side.release_decided(&token(i), None));
        assert_eq!(freed, 1);
        if std::env::var("COPIES_DEBUG").is_ok() && spent > 1_000_000 {
            println!("slow release {k} of {i}: {spent} ns");
        }
        times.push(spent);
        let new =
            Path::parse(format!("/new/{k}").as_bytes(), &PathLimits::default()).expect("path");
        let (granted, spent) =
            timed(|| side.acquire(0, &token(locks + k), 1 << 40, &[(Mode::Write, new)]));
        assert!(granted.fence.is_some());
        if std::env::var("COPIES_DEBUG").is_ok() && spent > 1_000_000 {
            println!("slow acquire {k}: {spent} ns");
        }
        times.push(spent);
    }
    times.sort_unstable();
    (times[times.len() - 1], times[times.len() / 2])
}

fn grow(locks: usize) -> LockTable {
    let mut table = LockTable::new();
    for i in 0..locks {
        let granted = table.acquire(0, &token(i), 1 << 40, &[(Mode::Write, path(i))]);
        assert!(granted.fence.is_some());
    }
    table
}

fn main() {
    let sizes: Vec<usize> = std::env::var("COPIES_LOCKS")
        .unwrap_or_else(|_| "1000000,10000000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    println!("| locks | share (COPY now) | clone (COPY before) | ratio | first writes after share: worst, median | after clone: worst, median | drop of the shared copy |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for locks in sizes {
        // Each copy on a table of its own, grown alike: a table once shared keeps the chunks no
        // write took back shared, and its `clone` would share them too. The element-wise copy
        // goes first, and both its tables are dropped before the next table grows, so that the
        // allocator's work after freeing them is not charged to the first writes after `share`.
        let mut table = grow(locks);
        let wall = Instant::now();
        let (mut cloned, clone_time) = timed(|| table.clone());
        let clone_wall = wall.elapsed();
        let (clone_worst, clone_median) = first_writes(&mut table, &mut cloned, locks);
        drop(cloned);
        drop(table);
        let mut table = grow(locks);
        let wall = Instant::now();
        let (mut shared, share_time) = timed(|| table.share());
        let share_wall = wall.elapsed();
        let (share_worst, share_median) = first_writes(&mut table, &mut shared, locks);
        let (_, drop_time) = timed(|| drop(shared));
        println!(
            "| {locks} | {:.3} ms (wall {:.3}) | {:.1} ms (wall {:.1}) | {:.0}x | {:.3} ms, {:.4} ms | {:.3} ms, {:.4} ms | {:.3} ms |",
            ms(share_time),
            share_wall.as_secs_f64() * 1e3,
            ms(clone_time),
            clone_wall.as_secs_f64() * 1e3,
            clone_time as f64 / share_time.max(1) as f64,
            ms(share_worst),
            ms(share_median),
            ms(clone_worst),
            ms(clone_median),
            ms(drop_time),
        );
    }
}
