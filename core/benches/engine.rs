//! Micro-benchmark of the engine: one acquire plus one release of a fresh path, at path depths
//! 2, 8 and 32, with 0 and 1,000,000 locks already held, through `Project`, the calls the
//! module makes for `ACQUIRE` and `RELEASE`. No Redis, no allocator but the system's.
//!
//! `cargo bench -p pathlock-core` (part of `make bench`). Each figure is the best of several
//! rounds, which is the least disturbed by the other processes of a shared machine.

use std::hint::black_box;
use std::time::Instant;

use pathlock_core::{Mode, Path, PathLimits, Project, Token};

fn path_at_depth(depth: usize, leaf: &str) -> Path {
    let mut raw = String::new();
    for level in 1..depth {
        raw.push_str(&format!("/level{level}"));
    }
    raw.push('/');
    raw.push_str(leaf);
    Path::parse(raw.as_bytes(), &PathLimits::default()).expect("path")
}

fn setting(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

fn main() {
    // Overridable for profiling runs, e.g. ENGINE_BENCH_OPS=2000 under callgrind.
    let rounds = setting("ENGINE_BENCH_ROUNDS", "5")[0];
    let ops = setting("ENGINE_BENCH_OPS", "100000")[0];
    println!("| depth | locks held | acquire + release (ns) |");
    println!("|---:|---:|---:|");
    for depth in setting("ENGINE_BENCH_DEPTHS", "2,8,32") {
        for held in setting("ENGINE_BENCH_HELD", "0,1000000") {
            let mut project = Project::new();
            for i in 0..held {
                let token = Token::new(format!("h{i}").as_bytes()).expect("token");
                let path = path_at_depth(depth, &format!("held{i}"));
                project.acquire(0, &token, 1 << 40, &[(Mode::Write, path)]);
            }
            let requests: Vec<(Token, Vec<(Mode, Path)>)> = (0..ops)
                .map(|i| {
                    let token = Token::new(format!("n{i}").as_bytes()).expect("token");
                    (
                        token,
                        vec![(Mode::Write, path_at_depth(depth, &format!("new{i}")))],
                    )
                })
                .collect();
            let mut best = f64::MAX;
            for _ in 0..rounds {
                let started = Instant::now();
                for (token, items) in &requests {
                    black_box(project.acquire(1, token, 1 << 40, items));
                    black_box(project.release(1, token, None));
                }
                best = best.min(started.elapsed().as_nanos() as f64 / ops as f64);
            }
            assert_eq!(project.locks().len(), held);
            println!("| {depth} | {held} | {best:.0} |");
        }
    }
}
