//! Where a new project key's fences start, so that fences for a key name never go back: not
//! after `DEL`, `UNLINK`, eviction, `FLUSHALL`, a restart, a failover or a reshard.
//!
//! While a key exists, the engine gives each grant the previous fence + 1. When a master creates
//! a project key, its counter starts at the larger of two floors:
//!
//! - **The server's high-water mark**: the highest fence counter this server has seen on any
//!   project key, by granting, by applying a master's effects (a replica), by replaying its AOF
//!   or by loading a value (RDB, `RESTORE`). It lives in memory, is saved in the RDB as the
//!   type's aux data (and so reaches replicas with a full sync, and the AOF's RDB preamble), and
//!   every replayed or replicated grant raises it again. It makes fences monotonic on one server
//!   and its replicas whatever the clock does.
//! - **A floor from the clock**: [`PER_MS`] times the time in milliseconds. It covers what the
//!   high-water mark cannot see: an AOF without the RDB preamble rewritten after the last
//!   project key was deleted, and a key deleted on one shard and created again on another after
//!   a reshard. Fences handed out before time `t` stay below `PER_MS * t` as long as keys are
//!   granted fewer than [`PER_MS`] times per millisecond on average since their creation (a
//!   server answers a few hundred commands per millisecond); a new key created later, on any
//!   server whose clock is not behind, starts above them. With today's clock (1.8e12 ms) fences
//!   start near 1.8e15, and `PER_MS * t` stays below 2^53 until the year 2255.
//!
//! Replicas and AOF replay never compute a floor: the `GRANT` effect that creates the key on them
//! carries the master's fence, and applying it sets the counter to that fence + 1.
//!
//! **What is possible.** By the rule above, a key's counter that started at the clock floor of
//! a server whose clock read `t0`, and averaged fewer than [`PER_MS`] grants per ms since, is
//! below `PER_MS * t` by that server's clock at any later `t`; one that started at a mark started
//! at a counter of the same kind. No server grants [`PER_MS`] times per ms, so every counter of
//! a deployment whose clocks agree within [`SKEW_MS`] (a year) stays below [`admissible`],
//! `PER_MS * (clock + SKEW_MS)`, on whichever server holds it. So:
//!
//! - A `RESTORE` (and so `MIGRATE`) payload of a client, on a master, is refused above
//!   [`admissible`]. One value there moves the server's fences ahead by a year of clock at most
//!   (2^53 comes a year before 2255), and no sequence of values moves them further, because the
//!   bound follows the clock, not the mark.
//! - What a server takes from servers (its master's effects and full sync, its AOF and RDB
//!   files, a `RESTORE` on a replica, which its master sent) is refused above [`ceiling`],
//!   one more year ahead: a value admitted at the edge by one server, and the grants of the
//!   next milliseconds, are then still taken by a replica whose clock is behind that server's, or
//!   by the same server after its clock stepped back, by up to a year.
//!
//! Anything above the ceiling is damage or forgery: taken in, it would raise the mark and stop
//! every new key of the server (`fences reached 2^53`) for good. A mark or counter already above
//! it (left by a version that did not check) is lowered, only when the operator asks with
//! `pathlock.lower-impossible-fences` while loading, to [`admissible`], the most any payload
//! could have brought ([`lowered`]); a value under the ceiling is never lowered, so fences still
//! never go back.
//!
//! Level 0: imports nothing of the crate. Used by `store` (creation), `change` and `keytype`
//! (what is seen and loaded), `effects` (what is applied), the ACQUIRE handler (the 2^53 bound)
//! and the fuzz harness.

use std::sync::atomic::{AtomicU64, Ordering};

use pathlock_core::LockTable;

/// Fences a key may take per millisecond of its life before the clock floor no longer covers it.
pub const PER_MS: u64 = 1000;

/// Fences stay below 2^53, the largest integer JavaScript represents exactly.
pub const LIMIT: u64 = 1 << 53;

/// How far apart two servers' clocks may be, in ms, before what one created looks impossible to
/// the other: a year. Too small a margin refuses correct values (a replica that refuses its
/// master's effects diverges; a server whose clock stepped back refuses its own RDB); too large
/// a one only lets a forged value move fences further ahead, by the margin at most, out of about
/// 229 years left before 2^53.
pub const SKEW_MS: u64 = 365 * 24 * 3600 * 1000;

/// The highest fence counter (the fence the next grant would take) seen on any project key.
static HIGH: AtomicU64 = AtomicU64::new(1);

/// Records a project's fence counter; the mark never goes down.
pub fn observe(next_fence: u64) {
    HIGH.fetch_max(next_fence, Ordering::Relaxed);
}

/// The mark, for the RDB's aux data and for tests through `INFO`.
pub fn high() -> u64 {
    HIGH.load(Ordering::Relaxed)
}

/// The counter a project key created now by a master starts at.
pub fn first(now_ms: u64) -> u64 {
    start(high(), now_ms)
}

/// Where a new key starts on a server whose mark is `mark`: above both floors, never past 2^53.
pub fn start(mark: u64, now_ms: u64) -> u64 {
    mark.max(now_ms.saturating_mul(PER_MS)).min(LIMIT)
}

/// The highest counter a client's payload (`RESTORE`, `MIGRATE`) may bring into a master at
/// `now_ms` by this server's clock: the clock floor a year ahead, never past 2^53.
pub fn admissible(now_ms: u64) -> u64 {
    bound(now_ms, SKEW_MS)
}

/// The highest counter any server can have reached by `now_ms` on this server's clock, which
/// effects, files and full syncs may carry: the clock floor two years ahead, never past 2^53.
pub fn ceiling(now_ms: u64) -> u64 {
    bound(now_ms, 2 * SKEW_MS)
}

fn bound(now_ms: u64, ahead_ms: u64) -> u64 {
    now_ms
        .saturating_add(ahead_ms)
        .saturating_mul(PER_MS)
        .min(LIMIT)
}

/// A fence counter above a bound: what it was and what it may be at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Impossible {
    pub counter: u64,
    pub bound: u64,
}

/// Whether a fence counter (the fence the next grant would take) is at most `bound`
/// ([`admissible`] or [`ceiling`]).
pub fn check(counter: u64, bound: u64) -> Result<(), Impossible> {
    if counter > bound {
        return Err(Impossible { counter, bound });
    }
    Ok(())
}

/// What `pathlock.lower-impossible-fences` loads for a value or a mark of `counter` at `now_ms`:
/// the counter when it is under the ceiling, else the admissible one.
pub fn lowered_counter(counter: u64, now_ms: u64) -> u64 {
    match check(counter, ceiling(now_ms)) {
        Ok(()) => counter,
        Err(_) => admissible(now_ms),
    }
}

/// `table` with an impossible counter lowered ([`lowered_counter`]), and how many locks went
/// with it: a lock whose own fence is at or above the lowered counter cannot stay under it (the
/// next grant would reuse its fence), so it is dropped. A table whose counter is under the
/// ceiling comes back as it is.
pub fn lowered(table: LockTable, now_ms: u64) -> (LockTable, usize) {
    let counter = lowered_counter(table.next_fence(), now_ms);
    if counter == table.next_fence() {
        return (table, 0);
    }
    let mut kept = LockTable::new();
    let mut dropped = 0;
    for lock in table.iter() {
        if lock.fence < counter {
            kept.grant(
                &lock.token,
                lock.deadline,
                lock.fence,
                &[(lock.mode, lock.path)],
            );
        } else {
            dropped += 1;
        }
    }
    kept.raise_next_fence(counter);
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_starts_above_both_floors() {
        observe(5);
        assert_eq!(first(0), high());
        assert_eq!(first(1_800_000_000_000), 1_800_000_000_000_000);
        observe(2_000_000_000_000_000);
        assert_eq!(first(1_800_000_000_000), 2_000_000_000_000_000);
        observe(3);
        assert_eq!(high(), 2_000_000_000_000_000, "the mark never goes down");
        assert_eq!(first(u64::MAX), LIMIT);
    }

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn the_bounds_are_the_clock_floor_one_and_two_years_ahead_and_never_past_two_to_the_53() {
        assert_eq!(admissible(NOW), (NOW + SKEW_MS) * PER_MS);
        assert_eq!(ceiling(NOW), (NOW + 2 * SKEW_MS) * PER_MS);
        assert!(ceiling(NOW) < LIMIT);
        assert_eq!((admissible(u64::MAX), ceiling(u64::MAX)), (LIMIT, LIMIT));
        assert_eq!(check(ceiling(NOW), ceiling(NOW)), Ok(()));
        assert_eq!(
            check(ceiling(NOW) + 1, ceiling(NOW)),
            Err(Impossible {
                counter: ceiling(NOW) + 1,
                bound: ceiling(NOW)
            })
        );
        // The payload: a counter of 2^53 + 5, whatever the clock.
        assert!(check(LIMIT + 5, ceiling(NOW)).is_err());
        assert!(check(LIMIT + 5, ceiling(u64::MAX)).is_err());
        // A key created by a server whose clock is a day ahead, granted a thousand times a
        // millisecond for an hour, may still be restored here.
        let hour = 3_600_000;
        let created = start(1, NOW + 86_400_000);
        assert_eq!(check(created + PER_MS * hour, admissible(NOW)), Ok(()));
        // A value admitted at the edge, granted on for a while at a burst rate, is still under
        // the ceiling of a server whose clock is a month behind.
        let month = 30 * 86_400_000;
        assert_eq!(
            check(admissible(NOW) + 10 * PER_MS * hour, ceiling(NOW - month)),
            Ok(())
        );
        // Whatever value was admitted, a new key starts where it can still grant.
        assert!(start(ceiling(NOW), NOW) < LIMIT);
    }

    fn table_of(locks: &[(&str, u64)], counter: u64) -> LockTable {
        use pathlock_core::{Mode, Path, PathLimits, Token};
        let mut table = LockTable::new();
        for (path, fence) in locks {
            let path = Path::parse(path.as_bytes(), &PathLimits::default()).expect("a path");
            let token = Token::new(path.to_bytes().as_slice()).expect("a token");
            table.grant(&token, 5, *fence, &[(Mode::Write, path)]);
        }
        table.raise_next_fence(counter);
        table
    }

    #[test]
    fn lowering_touches_only_a_counter_above_the_ceiling_and_the_locks_above_its_new_value() {
        let (admissible, ceiling) = (admissible(NOW), ceiling(NOW));
        assert_eq!(lowered_counter(ceiling, NOW), ceiling);
        assert_eq!(lowered_counter(ceiling + 1, NOW), admissible);
        assert_eq!(lowered_counter(u64::MAX, NOW), admissible);
        let possible = table_of(&[("/a", 7), ("/b", ceiling - 1)], ceiling);
        let before: Vec<_> = possible.iter().collect();
        let (same, dropped) = lowered(possible, NOW);
        assert_eq!((same.next_fence(), dropped), (ceiling, 0));
        assert_eq!(same.iter().collect::<Vec<_>>(), before);

        let poisoned = table_of(
            &[("/a", 7), ("/b", admissible), ("/c", LIMIT + 4)],
            LIMIT + 5,
        );
        let (repaired, dropped) = lowered(poisoned, NOW);
        assert_eq!((repaired.next_fence(), dropped), (admissible, 2));
        let kept: Vec<u64> = repaired.iter().map(|lock| lock.fence).collect();
        assert_eq!(kept, vec![7]);
        repaired.check_integrity().expect("consistent");
    }
}
