//! The mutual-exclusion checker over recorded histories of holds.
//!
//! A client records, on one monotonic clock shared by all threads, the interval in which it
//! certainly held its locks: from the moment the grant's reply arrived (or the moment a replica
//! confirmed it, when the client waits for that) to the earlier of the moment it sent its release
//! and the moment its lease could first have lapsed. That interval lies inside the server's own,
//! so if two owners ever held conflicting locks at once, two recorded intervals overlap. The
//! checker also checks that the fences of the writers of each path only increase.

use std::time::Instant;

/// One interval in which `owner` certainly held `items`, `(mode, path)` pairs, with `fence`.
#[derive(Clone, Debug)]
pub struct Hold {
    pub owner: String,
    pub items: Vec<(String, String)>,
    pub fence: i64,
    pub start: Instant,
    pub end: Instant,
}

fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// Two requests conflict when one writes a path that the other locks, an ancestor or a
/// descendant of it included.
pub fn items_conflict(a: &[(String, String)], b: &[(String, String)]) -> bool {
    a.iter().any(|(ma, pa)| {
        b.iter().any(|(mb, pb)| {
            let (sa, sb) = (segments(pa), segments(pb));
            (ma == "WRITE" || mb == "WRITE") && (sa.starts_with(&sb) || sb.starts_with(&sa))
        })
    })
}

/// The checker: the pairs of conflicting holds of different owners that overlap in time, and
/// the paths whose writers' fences did not increase.
pub fn check(history: &[Hold]) -> (usize, usize) {
    let mut holds: Vec<&Hold> = history.iter().filter(|h| h.start < h.end).collect();
    holds.sort_by_key(|h| h.start);
    let mut overlaps = 0;
    let mut active: Vec<&Hold> = Vec::new();
    for hold in &holds {
        active.retain(|a| a.end > hold.start);
        overlaps += active
            .iter()
            .filter(|a| a.owner != hold.owner && items_conflict(&a.items, &hold.items))
            .count();
        active.push(hold);
    }
    // Every path some hold names is probed. A path that no hold names has the same writers as
    // its deepest named ancestor, so probing only the named ones misses nothing.
    let mut paths: Vec<&str> = holds
        .iter()
        .flat_map(|h| h.items.iter().map(|(_, p)| p.as_str()))
        .collect();
    paths.sort_unstable();
    paths.dedup();
    let mut fence_errors = 0;
    for path in paths {
        let mut last = 0;
        for hold in holds.iter().filter(|h| {
            h.fence > 0
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
