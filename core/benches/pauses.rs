//! The longest single operation while one project grows to millions of locks, then empties
//! again: the pauses a Redis server would see, measured on the engine alone.
//!
//! `cargo bench -p pathlock-core --bench pauses` (`PAUSES_LOCKS`, default 4,000,000). Paths are
//! depth 3 (`/p<i%1000>/d<i/1000%1000>/f<i>`), one fresh UUID-like token each, as clients of a
//! busy project would send. Prints the worst acquire and release per size band; then, with half
//! the locks expired and none reclaimed yet, the worst of 10,000 commands made as the Redis
//! layer makes them (bounded lazy expiry, then the change), beside what reclaiming them all at
//! once costs (what every command paid before lazy expiry was bounded), and the worst step of
//! the expiry cycle. `PAUSES_LOCKS=10000000` leaves 5,000,000 expired.
//!
//! Then one token takes `PAUSES_FREE_LOCKS` locks (default 2,000,000; paths `/d<i % 1000>/f<i>`,
//! 50 a call, as `make bench-owners` takes them), releases them all at once, and the table frees
//! them in steps of 64, as the module's expiry cycle calls `free_some`: the median and worst
//! step, and their sum. The storage the last step gives up goes to a thread, as the module hands
//! it to its lazy-free thread. `PAUSES_LOCKS=0` runs this part alone.
//!
//! Each call is timed by the thread's CPU clock (user and kernel time, page faults included):
//! on a shared machine the wall clock mostly shows when the scheduler ran someone else.

mod common;

use std::time::Instant;

use common::{cpu_nanos, path, token};

use pathlock_core::{LockTable, Mode, Path, PathLimits, Project};

/// The worst time of one call per band of sizes, the bands doubling from 1,000.
struct Worst {
    bands: Vec<(usize, u128)>,
}

impl Worst {
    fn new() -> Worst {
        Worst { bands: Vec::new() }
    }

    fn record(&mut self, size: usize, nanos: u128) {
        let band = (size.max(1000) / 1000).ilog2() as usize;
        if self.bands.len() <= band {
            self.bands.resize(band + 1, (0, 0));
        }
        let slot = &mut self.bands[band];
        if nanos > slot.1 {
            *slot = (size, nanos);
        }
    }

    fn print(&self, what: &str) {
        let worst = self.bands.iter().map(|b| b.1).max().unwrap_or(0);
        println!("{what}: worst {:.3} ms", worst as f64 / 1e6);
        for (band, (size, nanos)) in self.bands.iter().enumerate() {
            println!(
                "  up to {:>9} locks: {:>8.3} ms (at {size})",
                1000usize << (band + 1),
                *nanos as f64 / 1e6
            );
        }
    }
}

/// A count from the environment, `default` when it is not set or not a number.
fn count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let locks = count("PAUSES_LOCKS", 4_000_000);
    if locks > 0 {
        grow_and_empty(locks);
    }
    let free_locks = count("PAUSES_FREE_LOCKS", 2_000_000);
    if free_locks > 0 {
        freeing_one_token(free_locks);
    }
}

/// Grows one project to `locks` locks of a token each, releases half, lets the other half
/// lapse, and reclaims them.
fn grow_and_empty(locks: usize) {
    let mut table = LockTable::new();
    let mut acquire = Worst::new();
    let started = Instant::now();
    for i in 0..locks {
        let items = [(Mode::Write, path(i))];
        let token = token(i);
        // Half the locks expire at 1,000, the other half are released.
        let ttl = if i % 2 == 0 { 1000 } else { 1 << 40 };
        let t = cpu_nanos();
        let granted = table.acquire(0, &token, ttl, &items);
        let spent = cpu_nanos() - t;
        acquire.record(i, spent);
        if std::env::var("PAUSES_DEBUG").is_ok() && spent > 500_000 {
            println!("slow acquire {i}: {spent} ns");
        }
        assert!(granted.fence.is_some());
    }
    println!(
        "grew to {locks} locks in {:.1} s, {} bytes estimated",
        started.elapsed().as_secs_f64(),
        table.memory_estimate()
    );
    acquire.print("acquire");
    let mut release = Worst::new();
    for i in (1..locks).step_by(2) {
        let token = token(i);
        let t = cpu_nanos();
        table.release_decided(&token, None);
        release.record(table.len(), cpu_nanos() - t);
    }
    release.print("release");
    let mut table = commands_after_the_mass_expiry(table, locks);
    // The expiry cycle's steps (32 owners each), then what one lazy reclamation of them all
    // would have cost, measured on a copy.
    // PAUSES_STEPS_ONLY=1 leaves the copy out, so that freeing it cannot colour the steps.
    if std::env::var("PAUSES_STEPS_ONLY").is_err() {
        let mut whole = table.clone();
        let t = Instant::now();
        let reclaimed = whole.reclaim_expired(1000, false).locks;
        println!(
            "one reclaim_expired of {reclaimed} expired locks: {:.3} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let mut worst_step = 0;
    let mut steps = 0;
    loop {
        let t = cpu_nanos();
        let tokens = table.reclaim_some_expired(1000, 32, false).tokens;
        let spent = cpu_nanos() - t;
        worst_step = worst_step.max(spent);
        if std::env::var("PAUSES_DEBUG").is_ok() && spent > 1_000_000 {
            println!("slow step {steps}: {spent} ns, {} locks left", table.len());
        }
        if tokens.is_empty() {
            break;
        }
        steps += 1;
    }
    println!(
        "reclaim_some_expired, 32 owners a step: {steps} steps, worst {:.3} ms",
        worst_step as f64 / 1e6
    );
    assert!(table.is_empty());
}

/// Commands on the project right after its expired half lapsed at 1,000, each timed with the
/// share of lazy expiry the Redis layer runs before it (two owners, earliest first): a grant
/// of a new path, a grant of a path whose lease lapsed, and the renewal and release of a lapsed
/// lease by its owner. The locks they add are released again, so the table goes back as it came
/// but for the locks reclaimed, which the expiry cycle would otherwise have reclaimed.
fn commands_after_the_mass_expiry(table: LockTable, locks: usize) -> LockTable {
    const COMMANDS: usize = 10_000;
    let now = 1000;
    let mut project = Project::from_locks(table);
    let expired = project.locks().len();
    let mut worst = [0u128; 4];
    let mut reclaimed = 0;
    let mut added = Vec::new();
    for k in 0..COMMANDS {
        // Even locks are the ones that expired; step through them across the whole tree.
        let lapsed = (k * 7919 % (locks / 2)) * 2;
        let kind = k % 4;
        let t = cpu_nanos();
        project.reclaim_lazily(now, None, 2);
        let ok = match kind {
            0 => {
                let raw = format!("/new/n{k}");
                let path = Path::parse(raw.as_bytes(), &PathLimits::default()).expect("path");
                project
                    .acquire(now, &token(locks + k), 1000, &[(Mode::Write, path)])
                    .is_some()
            }
            1 => project
                .acquire(now, &token(locks + k), 1000, &[(Mode::Write, path(lapsed))])
                .is_some(),
            2 => project.renew(now, &token(lapsed), now + 1000).0 == 0,
            _ => project.release(now, &token(lapsed), None).0 == 0,
        };
        let spent = cpu_nanos() - t;
        assert!(ok, "command {k}");
        worst[kind] = worst[kind].max(spent);
        reclaimed += project.take_lapsed().locks;
        if kind < 2 {
            added.push(token(locks + k));
        }
    }
    println!(
        "{COMMANDS} commands on {expired} expired locks: worst {:.3} ms \
         (new path {:.3}, lapsed path {:.3}, renew of a lapsed lease {:.3}, its release {:.3}); \
         {reclaimed} locks reclaimed lazily",
        ms(worst.iter().copied().max().unwrap_or(0)),
        ms(worst[0]),
        ms(worst[1]),
        ms(worst[2]),
        ms(worst[3]),
    );
    for token in &added {
        project.release(now, token, None);
    }
    let mut table = LockTable::new();
    std::mem::swap(&mut table, project.locks_mut());
    table
}

/// Where the bench's table gives up large storage: a thread that drops it, as the module's
/// lazy-free thread does.
static GIVEN_UP: std::sync::OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<Box<dyn Send>>>> =
    std::sync::OnceLock::new();

fn give_up(storage: Box<dyn Send>) {
    if let Some(sender) = GIVEN_UP.get() {
        if let Ok(sender) = sender.lock() {
            // The thread outlives the bench's tables; were it gone, dropping here is the same.
            let _ = sender.send(storage);
        }
    }
}

/// One token's `locks` locks released at once and freed in steps of 64, as the expiry cycle
/// frees a released big owner's locks: the median and the worst step, by the thread's CPU
/// clock, and their sum.
fn freeing_one_token(locks: usize) {
    let (sender, receiver) = std::sync::mpsc::channel::<Box<dyn Send>>();
    if GIVEN_UP.set(std::sync::Mutex::new(sender)).is_ok() {
        std::thread::spawn(move || receiver.into_iter().for_each(drop));
        pathlock_core::lazyfree::set_hook(give_up);
    }
    let mut table = LockTable::new();
    let owner = token(0);
    for first in (0..locks).step_by(50) {
        let items: Vec<(Mode, Path)> = (first..(first + 50).min(locks))
            .map(|i| {
                let raw = format!("/d{}/f{i}", i % 1000);
                let path = Path::parse(raw.as_bytes(), &PathLimits::default()).expect("path");
                (Mode::Write, path)
            })
            .collect();
        assert!(table.acquire(0, &owner, 1 << 40, &items).fence.is_some());
    }
    let t = cpu_nanos();
    table.release_decided(&owner, None);
    let release = cpu_nanos() - t;
    let mut steps = Vec::new();
    while table.has_background_work() {
        let t = cpu_nanos();
        table.free_some(64);
        steps.push(cpu_nanos() - t);
    }
    assert!(table.is_empty());
    let total: u128 = steps.iter().sum();
    steps.sort_unstable();
    let over_1ms = steps.iter().filter(|&&n| n > 1_000_000).count();
    println!(
        "one token's {locks} locks: RELEASE {:.3} ms, then {} steps of 64 freeing them in {:.1} s: \
         median {:.3} ms, worst {:.3} ms, {over_1ms} over 1 ms",
        ms(release),
        steps.len(),
        total as f64 / 1e9,
        ms(steps.get(steps.len() / 2).copied().unwrap_or(0)),
        ms(steps.last().copied().unwrap_or(0)),
    );
}

fn ms(nanos: u128) -> f64 {
    nanos as f64 / 1e6
}
