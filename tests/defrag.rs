//! Active defragmentation moves pathlock's memory as it moves a hash's (issue 40, item 2).
//!
//! The pattern, run on a server built with its own jemalloc (Redis 8.2's, Redis 8.0's): 400,000
//! entries written, three of four removed, `activedefrag yes`, then up to 60 seconds for the
//! defrag cycle to end. It runs twice, in the same test: with small projects (four locks in each
//! of 100,000 keys, three keys of four deleted: the compact form) and with large ones (50,000
//! locks in each of 8 keys, three locks of four released: the tree form), each beside hashes of
//! as many fields deleted alike, on a server of its own with the same settings, so that the
//! figures compare side by side. The hashes show what the allocator can reach; pathlock must
//! reach as much (with a margin), the cycle must end, the defragmenter must have moved its
//! memory (hits), every lock left must still be held and enforced, and `DEBUG DIGEST` must not
//! change.
//!
//! A server that cannot defragment (Debian's Redis links the system's jemalloc; Valkey's wheels
//! use the C library's malloc) refuses `activedefrag yes`: the test says so in a banner on
//! stderr and passes, except under CI (`CI` set) on a Redis 8.2, where it fails.

use std::time::{Duration, Instant};

use crate::common::*;

/// The settings of Redis's own defrag tests (`tests/unit/memefficiency.tcl`), low enough that a
/// few megabytes start a cycle: it runs while more than 2 MB and 5% of the allocator's memory are
/// fragmented.
const DEFRAG: [&str; 12] = defrag_from("2mb", "5");

/// The same with a cycle that starts at 1 MB and 2% fragmented, for the large projects: their
/// hash tables' segments, sized to their entries and given room to double when they split, are
/// not reallocated as they fill, so the pattern leaves pathlock some 1.5 MB and 4% fragmented
/// (hashbrown's segments, doubling, left 4 MB and 10%), under `DEFRAG`'s threshold; the cycle
/// must still run for the test to see it move the tree's memory. The small projects keep
/// `DEFRAG`: at 2% the hashes' cycle there does not end within the minute.
const DEFRAG_TIGHT: [&str; 12] = defrag_from("1mb", "2");

/// A server's defrag settings: the cycle runs while more than `ignore_bytes` and `lower_percent`
/// of the allocator's memory are fragmented; it starts off, so that a test turns it on once
/// filled.
const fn defrag_from(
    ignore_bytes: &'static str,
    lower_percent: &'static str,
) -> [&'static str; 12] {
    [
        "--activedefrag",
        "no",
        "--active-defrag-ignore-bytes",
        ignore_bytes,
        "--active-defrag-threshold-lower",
        lower_percent,
        "--active-defrag-cycle-min",
        "65",
        "--active-defrag-cycle-max",
        "75",
        "--lazyfree-lazy-user-del",
        "no",
    ]
}

/// What one run measured.
#[derive(Debug)]
struct Run {
    before: f64,
    before_bytes: i64,
    after: f64,
    after_bytes: i64,
    hits: i64,
    running: bool,
    seconds: f64,
}

fn float(con: &mut Connection, field: &str) -> f64 {
    info_field(con, "memory", field)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO memory has no {field}"))
}

/// Turns defrag on, waits for its cycle to end (at most `limit`), and reads the figures.
fn defragment(con: &mut Connection, limit: Duration) -> Run {
    // Let the lazy frees and the allocator's purge settle, as Redis's own tests do.
    let _: () = cmd("MEMORY").arg("PURGE").query(con).expect("MEMORY PURGE");
    sleep_ms(300);
    let before = float(con, "allocator_frag_ratio");
    let before_bytes = info_number(con, "memory", "allocator_frag_bytes");
    let hits_before = info_number(con, "stats", "active_defrag_hits");
    let _: () = cmd("CONFIG")
        .arg(&["SET", "activedefrag", "yes"])
        .query(con)
        .expect("CONFIG SET activedefrag yes");
    let start = Instant::now();
    // The cycle starts at the server's next cron (every 100 ms), so look only after it could.
    sleep_ms(1000);
    // Ended: not running on 8 looks in a row, 200 ms apart, so that the pause between two
    // cycles (a new one starts at the next cron while fragmentation stays above the threshold)
    // is not taken for the end.
    let mut running = true;
    let mut idle = 0;
    while start.elapsed() < limit {
        if info_number(con, "memory", "active_defrag_running") == 0 {
            idle += 1;
            if idle == 8 {
                running = false;
                break;
            }
        } else {
            idle = 0;
        }
        sleep_ms(200);
    }
    let seconds = start.elapsed().as_secs_f64();
    let _: () = cmd("CONFIG")
        .arg(&["SET", "activedefrag", "no"])
        .query(con)
        .expect("CONFIG SET activedefrag no");
    let _: () = cmd("MEMORY").arg("PURGE").query(con).expect("MEMORY PURGE");
    // INFO's allocator figures are refreshed by the server's cron.
    sleep_ms(300);
    Run {
        before,
        before_bytes,
        after: float(con, "allocator_frag_ratio"),
        after_bytes: info_number(con, "memory", "allocator_frag_bytes"),
        hits: info_number(con, "stats", "active_defrag_hits") - hits_before,
        running,
        seconds,
    }
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Whether this server defragments: `activedefrag yes` is refused where it cannot. Announces
/// a server that cannot, and fails under CI on a Redis 8.2, which must.
fn defrag_supported(con: &mut Connection) -> bool {
    let supported = cmd("CONFIG")
        .arg(&["SET", "activedefrag", "yes"])
        .query::<()>(con)
        .is_ok();
    let _ = cmd("CONFIG")
        .arg(&["SET", "activedefrag", "no"])
        .query::<()>(con);
    if !supported {
        let version = info_field(con, "server", "redis_version").unwrap_or_default();
        let under_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
        eprintln!(
            "\n========================================================================\n\
             SKIPPED: active defragmentation is not supported by this server ({version}):\n\
             it needs a build with its own jemalloc (.deps/redis-8.2/redis-server).\n\
             ========================================================================\n"
        );
        assert!(
            !(under_ci && version.starts_with("8.2")),
            "under CI, Redis {version} must defragment"
        );
    }
    supported
}

const KEYS: usize = 100_000;
const PER_KEY: usize = 4;

/// The path of lock `j` of key `k`: a few folders, as applications lock them.
fn small_path(k: usize, j: usize) -> String {
    format!("/team{}/doc{k}/part{j}", k % 16)
}

/// Writes the small projects (or hashes) and deletes three keys of four.
fn fill_small(con: &mut Connection, hashes: bool) {
    for keys in (0..KEYS).collect::<Vec<_>>().chunks(500) {
        let mut pipe = redis::pipe();
        for &k in keys {
            for j in 0..PER_KEY {
                let path = small_path(k, j);
                if hashes {
                    pipe.cmd("HSET")
                        .arg(format!("h{k}"))
                        .arg(&path)
                        .arg(format!("owner-{k}-{j}"))
                        .ignore();
                } else {
                    pipe.cmd("PATHLOCK.ACQUIRE")
                        .arg(format!("p{k}"))
                        .arg(&["TOKEN", &format!("owner-{k}-{j}"), "TTL", "3600000"])
                        .arg(&["WRITE", &path])
                        .ignore();
                }
            }
        }
        let _: () = pipe.query(con).expect("pipelined writes");
    }
    for keys in (0..KEYS)
        .filter(|k| k % 4 != 0)
        .collect::<Vec<_>>()
        .chunks(1000)
    {
        let prefix = if hashes { "h" } else { "p" };
        let names: Vec<String> = keys.iter().map(|k| format!("{prefix}{k}")).collect();
        let _: () = cmd("DEL").arg(names).query(con).expect("DEL");
    }
}

const BIG_KEYS: usize = 8;
const PER_BIG_KEY: usize = 50_000;

fn big_path(i: usize) -> String {
    format!("/d{}/f{i}", i % 200)
}

/// The token of lock `i`: half of those left are longer than the 19 bytes a table keeps inline,
/// so that the defragmenter moves the tokens kept aside too (and the hash's values are the same).
fn big_token(i: usize) -> String {
    if i.is_multiple_of(8) {
        format!("owner-{i}-with-a-token-kept-aside")
    } else {
        format!("owner-{i}")
    }
}

/// Writes the large projects (or hashes) and removes three entries of four.
fn fill_big(con: &mut Connection, hashes: bool) {
    for k in 0..BIG_KEYS {
        for chunk in (0..PER_BIG_KEY).collect::<Vec<_>>().chunks(1000) {
            let mut pipe = redis::pipe();
            for &i in chunk {
                if hashes {
                    pipe.cmd("HSET")
                        .arg(format!("h{k}"))
                        .arg(big_path(i))
                        .arg(big_token(i))
                        .ignore();
                } else {
                    pipe.cmd("PATHLOCK.ACQUIRE")
                        .arg(format!("p{k}"))
                        .arg(&["TOKEN", &big_token(i), "TTL", "3600000"])
                        .arg(&["WRITE", &big_path(i)])
                        .ignore();
                }
            }
            let _: () = pipe.query(con).expect("pipelined writes");
        }
    }
    for k in 0..BIG_KEYS {
        for chunk in (0..PER_BIG_KEY)
            .filter(|i| i % 4 != 0)
            .collect::<Vec<_>>()
            .chunks(1000)
        {
            let mut pipe = redis::pipe();
            for &i in chunk {
                if hashes {
                    pipe.cmd("HDEL")
                        .arg(format!("h{k}"))
                        .arg(big_path(i))
                        .ignore();
                } else {
                    pipe.cmd("PATHLOCK.RELEASE")
                        .arg(format!("p{k}"))
                        .arg(big_token(i))
                        .ignore();
                }
            }
            let _: () = pipe.query(con).expect("pipelined removals");
        }
    }
}

/// Every lock left is still held and enforced: `CHECK` shows its owner, and a conflicting
/// `ACQUIRE` of another owner is refused. Returns how many were checked.
fn assert_held(con: &mut Connection, locks: &[(String, String, String)]) -> usize {
    for chunk in locks.chunks(1000) {
        let mut pipe = redis::pipe();
        for (key, token, path) in chunk {
            pipe.cmd("PATHLOCK.CHECK").arg(key).arg(&["WRITE", path]);
            pipe.cmd("PATHLOCK.ACQUIRE")
                .arg(key)
                .arg(&["TOKEN", "intruder", "WRITE", path]);
            let _ = token;
        }
        let replies: Vec<Value> = pipe.query(con).expect("pipelined checks");
        for ((key, token, path), pair) in chunk.iter().zip(replies.chunks(2)) {
            let shown = format!("{:?}", pair[0]);
            assert!(
                shown.contains(&format!("{token:?}")) || shown.contains(token.as_str()),
                "CHECK {key} WRITE {path} does not show {token}: {shown}"
            );
            assert!(
                matches!(pair[1], Value::Nil),
                "a conflicting ACQUIRE on {key} {path} was not refused: {:?}",
                pair[1]
            );
        }
    }
    locks.len()
}

/// Prints one row of the figures.
fn report(what: &str, run: &Run) {
    eprintln!(
        "{what:<28} frag {:.2} ({:.1} MB) -> {:.2} ({:.1} MB), hits {}, cycle {} after {:.1} s",
        run.before,
        run.before_bytes as f64 / 1e6,
        run.after,
        run.after_bytes as f64 / 1e6,
        run.hits,
        if run.running {
            "still running"
        } else {
            "ended"
        },
        run.seconds
    );
}

/// One side of a pattern: fills a fresh server, defragments it, and for pathlock checks the
/// locks left and the digest.
fn run_pattern(
    settings: &[&str],
    fill: fn(&mut Connection, bool),
    hashes: bool,
    left: &[(String, String, String)],
) -> Option<Run> {
    let server = Server::start_with(settings);
    let mut con = server.conn();
    if !defrag_supported(&mut con) {
        return None;
    }
    fill(&mut con, hashes);
    let digest = dataset_digest(&mut con);
    let run = defragment(&mut con, Duration::from_secs(60));
    assert_eq!(
        dataset_digest(&mut con),
        digest,
        "DEBUG DIGEST changed across defragmentation"
    );
    if !hashes {
        assert_held(&mut con, left);
    }
    Some(run)
}

/// The margin pathlock's fragmentation may stay above the hashes' in the same run.
const MARGIN: f64 = 0.05;

fn assert_like_hashes(what: &str, hashes: &Run, pathlock: &Run) {
    report(&format!("{what}: hashes"), hashes);
    report(&format!("{what}: pathlock"), pathlock);
    assert!(!hashes.running, "the hashes' defrag cycle did not end");
    assert!(
        pathlock.hits > 0,
        "{what}: defrag moved nothing of pathlock's"
    );
    assert!(
        !pathlock.running,
        "{what}: pathlock's defrag cycle did not end"
    );
    assert!(
        pathlock.after <= (hashes.after + MARGIN).max(1.1),
        "{what}: fragmentation stayed at {:.2}, hashes fell to {:.2}",
        pathlock.after,
        hashes.after
    );
}

#[test]
fn defrag_moves_small_projects_as_it_moves_hashes() {
    let left: Vec<(String, String, String)> = (0..KEYS)
        .filter(|k| k % 4 == 0)
        .flat_map(|k| (0..PER_KEY).map(move |j| (k, j)))
        .map(|(k, j)| (format!("p{k}"), format!("owner-{k}-{j}"), small_path(k, j)))
        .collect();
    let Some(hashes) = run_pattern(&DEFRAG, fill_small, true, &left) else {
        return;
    };
    let pathlock =
        run_pattern(&DEFRAG, fill_small, false, &left).expect("the same server defragments");
    assert_like_hashes("100,000 keys of 4", &hashes, &pathlock);
}

#[test]
fn defrag_moves_large_projects_as_it_moves_hashes() {
    let left: Vec<(String, String, String)> = (0..BIG_KEYS)
        .flat_map(|k| (0..PER_BIG_KEY).filter(|i| i % 4 == 0).map(move |i| (k, i)))
        .map(|(k, i)| (format!("p{k}"), big_token(i), big_path(i)))
        .collect();
    let Some(hashes) = run_pattern(&DEFRAG_TIGHT, fill_big, true, &left) else {
        return;
    };
    let pathlock =
        run_pattern(&DEFRAG_TIGHT, fill_big, false, &left).expect("the same server defragments");
    assert_like_hashes("8 keys of 50,000", &hashes, &pathlock);
}
