//! The mutual-exclusion checker over recorded histories, and how a client of a checked workload
//! keeps a grant and records it, shared by the stress tests on one server, the partition tests
//! and the reshard load on a cluster.
//!
//! Each client records, on one monotonic clock shared by all threads of the test, the interval
//! in which it certainly held its locks: from the moment the grant's reply arrived to the earlier
//! of the moment it sent its release and the moment its lease could first have lapsed (the
//! acquire's send time plus the TTL, moved by successful renews). That interval lies inside the
//! server's own, so if the servers ever held two conflicting locks of different owners in one
//! project at once, two recorded intervals overlap. The checker also checks that the fences of
//! the writers of each path only increase.

use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::cmd;

use super::Rng;

/// One certain hold of one owner's locks in one project.
#[derive(Clone, Debug)]
pub struct Hold {
    /// The project key.
    pub key: String,
    pub owner: String,
    /// `(mode, path)` pairs.
    pub items: Vec<(String, String)>,
    pub fence: i64,
    pub start: Instant,
    pub end: Instant,
}

/// How a client of a checked workload keeps what it was granted: a pause below `pause_ms`, and
/// one time in `renew_one_in` a renewal for `renew_ms` plus below `renew_spread_ms`, followed by
/// another pause.
pub struct Pace {
    pub pause_ms: u64,
    pub renew_one_in: u64,
    pub renew_ms: u64,
    pub renew_spread_ms: u64,
}

impl Hold {
    /// What a client certainly holds once a grant's reply arrived: from now until the lease
    /// could first lapse, `ttl_ms` after `sent`, when the client sent the acquire.
    pub fn granted(
        key: &str,
        owner: &str,
        items: Vec<(String, String)>,
        fence: i64,
        sent: Instant,
        ttl_ms: u64,
    ) -> Hold {
        Hold {
            key: key.to_string(),
            owner: owner.to_string(),
            items,
            fence,
            start: Instant::now(),
            end: sent + Duration::from_millis(ttl_ms),
        }
    }

    /// Keeps the hold for a while at `pace`, maybe renewing it, then ends it at the earlier of
    /// now (the release is sent next) and its lease's end. `RENEW` sets the lease to the
    /// server's now plus `ms`, shorter or longer than what was left, so a renewal that counted
    /// locks and that `confirmed` says took (with `WAIT`, say: a renewal a replica lacks is lost
    /// with its master) puts the certain end at its send time plus `ms`, earlier or later than
    /// before. One whose outcome is unknown (an error, or not confirmed) may have shortened the
    /// lease, so the end becomes the earlier of the two; one that counted nothing found the
    /// lease already gone, which leaves the end as it was. Returns whether the hold was renewed.
    pub fn keep<C: redis::ConnectionLike>(
        &mut self,
        con: &mut C,
        rng: &mut Rng,
        pace: &Pace,
        mut confirmed: impl FnMut(&mut C) -> bool,
    ) -> bool {
        sleep(Duration::from_millis(rng.below(pace.pause_ms)));
        let mut renewed = false;
        if rng.below(pace.renew_one_in) == 0 {
            let sent = Instant::now();
            let ms = pace.renew_ms + rng.below(pace.renew_spread_ms);
            let reply = cmd("PATHLOCK.RENEW")
                .arg(&[&self.key, &self.owner, &ms.to_string()])
                .query::<i64>(con);
            let renewed_end = sent + Duration::from_millis(ms);
            match reply {
                Ok(n) if n > 0 && confirmed(con) => {
                    self.end = renewed_end;
                    renewed = true;
                }
                Ok(0) => {}
                _ => self.end = self.end.min(renewed_end),
            }
            sleep(Duration::from_millis(rng.below(pace.pause_ms)));
        }
        self.end = self.end.min(Instant::now());
        renewed
    }
}

fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// Whether two owners holding `a` and `b` in one project conflict: one path equal to or an
/// ancestor of the other, and at least one of the two a `WRITE`.
pub fn items_conflict(a: &[(String, String)], b: &[(String, String)]) -> bool {
    a.iter().any(|(ma, pa)| {
        b.iter().any(|(mb, pb)| {
            let (sa, sb) = (segments(pa), segments(pb));
            (ma == "WRITE" || mb == "WRITE") && (sa.starts_with(&sb) || sb.starts_with(&sa))
        })
    })
}

/// The checker: the pairs of conflicting holds of different owners in one project that overlap
/// in time, and, for each project and each path some hold names, the times a writer covering the
/// path got a fence not above the previous such writer's. A path that no hold names has the same
/// writers as its deepest named ancestor, so probing only the named ones misses nothing.
///
/// Writers that cover one path are mutually exclusive, so ordering them by the start of their
/// holds orders them as the servers granted them, whichever node of a cluster did; a project's
/// fence counter travels with its value, so a move between nodes must not make it go back.
pub fn check(history: &[Hold]) -> (usize, usize) {
    let mut holds: Vec<&Hold> = history.iter().filter(|h| h.start < h.end).collect();
    holds.sort_by_key(|h| h.start);
    let mut overlaps = 0;
    let mut active: Vec<&Hold> = Vec::new();
    for hold in &holds {
        active.retain(|a| a.end > hold.start);
        for a in active.iter().filter(|a| {
            a.key == hold.key && a.owner != hold.owner && items_conflict(&a.items, &hold.items)
        }) {
            // A failure names the pair, so that a run that cannot be repeated still says which
            // grants met: their owners, items, fences and how far the two intervals overlap.
            eprintln!(
                "checker: overlap in {}: {} {:?} fence {} held {:?} after the first start, \
                 {} {:?} fence {} from {:?} to {:?} after it",
                hold.key,
                a.owner,
                a.items,
                a.fence,
                a.end - a.start,
                hold.owner,
                hold.items,
                hold.fence,
                hold.start - a.start,
                hold.end - a.start,
            );
            overlaps += 1;
        }
        active.push(hold);
    }
    let mut probes: Vec<(&str, &str)> = holds
        .iter()
        .flat_map(|h| h.items.iter().map(|(_, p)| (h.key.as_str(), p.as_str())))
        .collect();
    probes.sort_unstable();
    probes.dedup();
    let mut fence_errors = 0;
    for (key, path) in probes {
        let mut last = 0;
        for hold in holds.iter().filter(|h| {
            h.key == key
                && h.fence > 0
                && h.items
                    .iter()
                    .any(|(m, p)| m == "WRITE" && segments(path).starts_with(&segments(p)))
        }) {
            if hold.fence <= last {
                fence_errors += 1;
            }
            last = hold.fence;
        }
    }
    (overlaps, fence_errors)
}

/// One to three random `(mode, path)` items over `paths`, as the checked workloads request.
pub fn random_items(rng: &mut Rng, paths: &[&str]) -> Vec<(String, String)> {
    (0..=rng.below(2))
        .map(|_| {
            let mode = if rng.below(2) == 0 { "READ" } else { "WRITE" };
            (mode.to_string(), rng.pick(paths).to_string())
        })
        .collect()
}

/// `PATHLOCK.ACQUIRE key TOKEN token TTL ttl WAIT wait mode path ...`.
pub fn acquire_command(
    key: &str,
    token: &str,
    ttl: u64,
    wait: u64,
    items: &[(String, String)],
) -> redis::Cmd {
    let mut command = redis::cmd("PATHLOCK.ACQUIRE");
    command.arg(key).arg(&[
        "TOKEN",
        token,
        "TTL",
        &ttl.to_string(),
        "WAIT",
        &wait.to_string(),
    ]);
    for (mode, path) in items {
        command.arg(mode).arg(path);
    }
    command
}
