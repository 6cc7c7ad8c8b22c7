//! Project keys under `maxmemory` eviction (`docs/operations.md`, "Memory limits and eviction"), with the scenario: a
//! 20 MB server used as a cache too, projects holding live locks, then 200,000 `SET cache:<i>`
//! of 200 bytes. Locking is refused while an `allkeys-*` policy can evict projects, unless the
//! operator accepts the risk; then a lost project is loud (log, INFO, the `evicted` event, the
//! holder's `RENEW` answering 0) and its next fences still go up.

use std::time::Duration;

use crate::common::*;

fn config_set(con: &mut Connection, name: &str, value: &str) {
    let _: () = cmd("CONFIG")
        .arg(&["SET", name, value])
        .query(con)
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

/// Fills the server with `count` cache entries of 200 bytes, in pipelined batches.
fn fill_cache(con: &mut Connection, count: usize) {
    let value = vec![b'x'; 200];
    for start in (0..count).step_by(10_000) {
        let mut pipe = redis::pipe();
        for i in start..(start + 10_000).min(count) {
            pipe.cmd("SET")
                .arg(format!("cache:{i}"))
                .arg(&value)
                .ignore();
        }
        let _: () = pipe.query(con).expect("SET cache entries");
    }
}

fn evicted_keys(con: &mut Connection) -> i64 {
    info_number(con, "stats", "evicted_keys")
}

#[test]
fn locking_is_refused_while_the_policy_can_evict_projects_unless_the_risk_is_accepted() {
    let server = Server::start_with(&["--maxmemory", "20mb", "--maxmemory-policy", "allkeys-lru"]);
    let mut con = server.conn();
    assert!(
        server.log().contains("maxmemory-policy allkeys-lru"),
        "a warning at load:\n{}",
        server.log()
    );
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_eviction_risk"),
        1
    );
    let error = error_of(try_acquire(&mut con, "proj:1", &["WRITE", "/A"]));
    assert!(
        error.contains("allkeys-lru") && error.contains("pathlock.accept-eviction"),
        "{error}"
    );
    // Safe policies, or no limit at all, grant.
    for (name, value) in [
        ("maxmemory-policy", "noeviction"),
        ("maxmemory-policy", "volatile-lru"),
        ("maxmemory-policy", "volatile-ttl"),
    ] {
        config_set(&mut con, name, value);
        assert_eq!(
            info_number(&mut con, "pathlock", "pathlock_eviction_risk"),
            0
        );
        assert!(acquire(&mut con, "proj:1", &["WRITE", &format!("/{value}")]).is_some());
    }
    config_set(&mut con, "maxmemory-policy", "allkeys-lfu");
    assert!(try_acquire(&mut con, "proj:1", &["WRITE", "/lfu"]).is_err());
    config_set(&mut con, "maxmemory", "0");
    assert!(acquire(&mut con, "proj:1", &["WRITE", "/unlimited"]).is_some());
    // Setting a policy or a limit that can evict warns again, each time.
    let warnings = |server: &Server| server.log().matches("can evict project keys").count();
    let before = warnings(&server);
    config_set(&mut con, "maxmemory", "20mb");
    wait_until(Duration::from_secs(5), "the warning", || {
        warnings(&server) == before + 1
    });
    config_set(&mut con, "maxmemory-policy", "allkeys-random");
    config_set(&mut con, "maxmemory-policy", "allkeys-lfu");
    wait_until(Duration::from_secs(5), "two more warnings", || {
        warnings(&server) == before + 3
    });
    assert!(try_acquire(&mut con, "proj:1", &["WRITE", "/lfu"]).is_err());
    config_set(&mut con, "pathlock.accept-eviction", "yes");
    assert!(acquire(&mut con, "proj:1", &["WRITE", "/lfu"]).is_some());
    // The locks granted before stay manageable whatever the policy.
    config_set(&mut con, "pathlock.accept-eviction", "no");
    assert_eq!(release(&mut con, "proj:1", "nobody", &[]), 0);
    let listed: Vec<Value> = cmd("PATHLOCK.LOCKS")
        .arg("proj:1")
        .query(&mut con)
        .expect("LOCKS");
    assert_eq!(listed.len(), 5);
}

/// The scenario with the risk accepted: each project either keeps its lock or its loss
/// is logged, counted, announced and seen by the holder; never silent, and fences go up.
fn scenario(policy: &str) -> (usize, usize) {
    scenario_with(policy, "proj:", "proj:")
}

/// `scenario` with project keys named `prefix<p>`, which the server's log shows as `logged<p>`.
fn scenario_with(policy: &str, prefix: &str, logged: &str) -> (usize, usize) {
    let server = Server::start_with(&[
        "--maxmemory",
        "20mb",
        "--maxmemory-policy",
        policy,
        "--notify-keyspace-events",
        "Ke",
    ]);
    let mut con = server.conn();
    config_set(&mut con, "pathlock.accept-eviction", "yes");
    let projects = 20;
    let mut fences = Vec::new();
    for p in 0..projects {
        let key = format!("{prefix}{p}");
        let (_, fence) = acquire(
            &mut con,
            &key,
            &["TOKEN", "t", "TTL", "600000", "WRITE", "/A/C"],
        )
        .expect("granted");
        fences.push(fence);
    }
    let mut events = server.conn();
    let mut pubsub = events.as_pubsub();
    pubsub
        .psubscribe("__keyspace@0__:proj:*")
        .expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    fill_cache(&mut con, 200_000);
    assert!(evicted_keys(&mut con) > 100_000);
    // The scenario is the fill; the checks below re-create projects, and with the limit still
    // set each of their writes could evict a project not yet checked, after its announcement
    // was read. So eviction ends here, and what the checks see is what the fill did.
    config_set(&mut con, "maxmemory", "0");
    let mut announced = Vec::new();
    while let Ok(message) = pubsub.get_message() {
        let payload: String = message.get_payload().unwrap_or_default();
        if payload == "evicted" {
            announced.push(message.get_channel_name().to_string());
        }
    }
    let mut lost = 0;
    for (p, fence) in fences.iter().enumerate() {
        let key = format!("{prefix}{p}");
        let shown = format!("{logged}{p}");
        let exists: i64 = cmd("EXISTS").arg(&key).query(&mut con).expect("EXISTS");
        if exists == 1 {
            assert!(
                try_acquire(&mut con, &key, &["TOKEN", "u", "WRITE", "/A/C/x"])
                    .expect("ACQUIRE")
                    .is_none(),
                "{key}: the live lock still holds"
            );
            continue;
        }
        lost += 1;
        assert!(
            server
                .log()
                .contains(&format!("evicted project key '{shown}' holding 1 locks")),
            "{key}: logged:\n{}",
            server.log()
        );
        assert!(
            announced.contains(&format!("__keyspace@0__:{key}")),
            "{key}: {announced:?}"
        );
        assert_eq!(renew(&mut con, &key, "t", 600_000), 0, "{key}");
        let (_, again) = acquire(&mut con, &key, &["TOKEN", "u", "WRITE", "/A/C/x"])
            .expect("granted to the next owner");
        assert!(again > *fence, "{key}: fence {again} after {fence}");
    }
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_total_evicted_projects"),
        lost as i64
    );
    (lost, projects)
}

#[test]
fn under_allkeys_lru_an_evicted_project_is_never_lost_silently() {
    let (lost, projects) = scenario("allkeys-lru");
    println!("allkeys-lru: {lost} of {projects} projects evicted, each reported");
    // LRU only sees when a key was last used, to the second; the cache keys written in the same
    // seconds look as recent, so projects go too.
    assert!(lost > 0, "the scenario evicts projects under LRU");
}

#[test]
fn under_allkeys_lfu_projects_marked_as_most_used_are_kept() {
    let (lost, projects) = scenario("allkeys-lfu");
    println!("allkeys-lfu: {lost} of {projects} projects evicted");
    assert_eq!(lost, 0, "the highest LFU counter keeps projects");
}

#[test]
fn under_allkeys_random_an_evicted_project_is_never_lost_silently() {
    let (lost, projects) = scenario("allkeys-random");
    println!("allkeys-random: {lost} of {projects} projects evicted, each reported");
    assert!(lost > 0);
}

/// A project key whose name holds what a log format or a C string cannot take (`%s%n`, NUL, a
/// byte beyond ASCII) is logged escaped when it is evicted, and the server lives on.
#[test]
fn an_evicted_project_with_a_hostile_name_is_logged_escaped() {
    let (lost, projects) = scenario_with(
        "allkeys-random",
        "proj:%s%n\0\u{100}:",
        "proj:%s%n\\x00\\xc4\\x80:",
    );
    println!("allkeys-random, hostile names: {lost} of {projects} projects evicted, each reported");
    assert!(lost > 0, "no project was evicted, so nothing was shown");
}
