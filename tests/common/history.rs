//! The mutual-exclusion checker over recorded histories, shared by the stress tests on one server
//! and the reshard test on a cluster.
//!
//! Each client records, on one monotonic clock shared by all threads of the test, the interval
//! in which it certainly held its locks: from the moment the grant's reply arrived to the earlier
//! of the moment it sent its release and the moment its lease could first have lapsed (the
//! acquire's send time plus the TTL, moved by successful renews). That interval lies inside the
//! server's own, so if the servers ever held two conflicting locks of different owners in one
//! project at once, two recorded intervals overlap. The checker also checks that the fences of
//! the writers of each path only increase.

use std::time::Instant;

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
        overlaps += active
            .iter()
            .filter(|a| {
                a.key == hold.key && a.owner != hold.owner && items_conflict(&a.items, &hold.items)
            })
            .count();
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
