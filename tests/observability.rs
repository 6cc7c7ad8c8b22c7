//! What operators and applications see: keyspace events, module configs (from a config file and
//! at run time), and inspection of a large project. COMMAND DOCS is checked in `command_docs.rs`,
//! ACL users in `acl.rs`.

use std::time::{Duration, Instant};

use crate::common::*;

fn events_for(
    server: &Server,
    key: &str,
    keyspace_events: &str,
    actions: impl FnOnce(&mut Connection),
) -> Vec<String> {
    let mut con = server.conn();
    let _: () = cmd("CONFIG")
        .arg(&["SET", "notify-keyspace-events", keyspace_events])
        .query(&mut con)
        .expect("CONFIG SET");
    let mut subscriber = server.conn();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.psubscribe("__keyspace@*__:*").expect("PSUBSCRIBE");
    pubsub
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    actions(&mut con);
    let mut events = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        if let Ok(message) = pubsub.get_message() {
            assert_eq!(message.get_channel_name(), format!("__keyspace@0__:{key}"));
            events.push(message.get_payload::<String>().expect("event name"));
        }
    }
    events
}

#[test]
fn changes_raise_module_keyspace_events() {
    let server = Server::start();
    let events = events_for(&server, "proj:9", "Kd", |con| {
        assert!(take(con, "proj:9", "a", &["WRITE", "/A"]));
        assert!(
            !take(con, "proj:9", "b", &["WRITE", "/A"]),
            "a refusal raises nothing"
        );
        assert_eq!(renew(con, "proj:9", "a", 60_000), 1);
        assert_eq!(renew(con, "proj:9", "nobody", 60_000), 0);
        assert_eq!(release(con, "proj:9", "a", &[]), 1);
        assert_eq!(release(con, "proj:9", "a", &[]), 0);
        assert!(take(con, "proj:9", "brief", &["TTL", "50", "WRITE", "/B"]));
    });
    assert_eq!(
        events,
        [
            "pathlock.acquire",
            "pathlock.renew",
            "pathlock.release",
            "pathlock.acquire",
            "pathlock.expired"
        ]
    );
    // Without the module class enabled, subscribers hear nothing.
    let events = events_for(&server, "proj:9", "Kg", |con| {
        assert!(take(con, "proj:9", "c", &["WRITE", "/C"]));
    });
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn the_example_config_sets_every_module_config_to_its_default() {
    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/redis.conf.example"))
            .expect("redis.conf.example");
    let settings: Vec<(String, String)> = example
        .lines()
        .filter(|l| l.starts_with("pathlock."))
        .map(|l| {
            let (name, value) = l.split_once(' ').expect("name value");
            (name.to_string(), value.trim().to_string())
        })
        .collect();
    let plain = Server::start();
    let mut con = plain.conn();
    // The example names every config the module declares, and nothing else.
    let declared: Vec<String> = cmd("CONFIG")
        .arg(&["GET", "pathlock.*"])
        .query(&mut con)
        .expect("GET");
    let mut declared: Vec<&String> = declared.iter().step_by(2).collect();
    let mut named: Vec<&String> = settings.iter().map(|(name, _)| name).collect();
    declared.sort();
    named.sort();
    assert_eq!(
        named, declared,
        "redis.conf.example against CONFIG GET pathlock.*"
    );
    for (name, value) in &settings {
        let got: Vec<String> = cmd("CONFIG")
            .arg(&["GET", name])
            .query(&mut con)
            .expect("CONFIG GET");
        assert_eq!(&got[1], value, "{name}: the example shows the default");
    }
    // The example itself loads, with the module path it names replaced by this build's.
    let dir = std::env::temp_dir().join(format!("pathlock-conf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let conf = dir.join("example.conf");
    let text: String = example
        .lines()
        .filter(|l| !l.starts_with("loadmodule"))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace("pathlock.max-depth 256", "pathlock.max-depth 3");
    std::fs::write(&conf, text).expect("write conf");
    let server = Server::start_with(&[conf.to_str().expect("utf-8 path")]);
    let mut con = server.conn();
    let depth: Vec<String> = cmd("CONFIG")
        .arg(&["GET", "pathlock.max-depth"])
        .query(&mut con)
        .expect("GET");
    assert_eq!(depth[1], "3");
    let error = error_of(try_acquire(&mut con, "p", &["WRITE", "/a/b/c/d"]));
    assert!(
        error.starts_with("ERR path too deep: at most 3 segments"),
        "{error}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn configs_are_validated_and_changed_at_run_time() {
    let server = Server::start_with(&["--pathlock.default-ttl", "150"]);
    let mut con = server.conn();
    let all: Vec<String> = cmd("CONFIG")
        .arg(&["GET", "pathlock.*"])
        .query(&mut con)
        .expect("GET");
    assert_eq!(all.len(), 16, "eight configs: {all:?}");
    for (name, bad) in [
        ("pathlock.max-ttl", "0"),
        ("pathlock.default-ttl", "-1"),
        ("pathlock.max-depth", "lots"),
        ("pathlock.max-depth", "4097"),
        ("pathlock.max-path-bytes", "0"),
        ("pathlock.max-paths-per-call", "99999999"),
        ("pathlock.max-note-bytes", "-1"),
        ("pathlock.max-note-bytes", "1048577"),
    ] {
        let error = error_of(cmd("CONFIG").arg(&["SET", name, bad]).query::<()>(&mut con));
        assert!(error.contains(name), "{name} {bad}: {error}");
    }
    let ttl: Vec<String> = cmd("CONFIG")
        .arg(&["GET", "pathlock.default-ttl"])
        .query(&mut con)
        .expect("GET");
    assert_eq!(
        ttl[1], "150",
        "set from the command line, untouched by refused changes"
    );
    let _: () = cmd("CONFIG")
        .arg(&["SET", "pathlock.max-paths-per-call", "1"])
        .query(&mut con)
        .expect("SET");
    let error = error_of(try_acquire(&mut con, "p", &["READ", "/a", "READ", "/b"]));
    assert!(
        error.starts_with("ERR too many paths: at most 1 per call"),
        "{error}"
    );
}

#[test]
fn a_server_refuses_to_start_with_a_bad_config() {
    let (status, log) = start_refused(None, &["--pathlock.max-depth", "0"]);
    assert!(!status.success(), "{status:?}; its log:\n{log}");
}

fn config_get(con: &mut Connection, name: &str) -> String {
    let pair: Vec<String> = cmd("CONFIG")
        .arg(&["GET", name])
        .query(con)
        .expect("CONFIG GET");
    pair.get(1).cloned().unwrap_or_default()
}

/// The arguments after the module's path (`loadmodule /path/libpathlock.so max-ttl 60000`) are
/// the settings' defaults, checked as `CONFIG SET` checks a value: the server took `max-ttl 0`
/// there, and every lease it then granted had lapsed at once.
#[test]
fn a_server_refuses_to_start_with_bad_module_arguments() {
    for (args, reason) in [
        (
            &["max-ttl", "0"][..],
            "max-ttl '0' is not an integer from 1 to",
        ),
        (&["bogus", "5"][..], "'bogus' names no pathlock setting"),
        (&["max-depth"][..], "'max-depth' has no value"),
        (
            &["accept-eviction", "true"][..],
            "accept-eviction 'true' is not yes or no",
        ),
    ] {
        let (status, log) = start_refused(None, args);
        assert!(!status.success(), "{args:?}: {status:?}; its log:\n{log}");
        assert!(
            log.contains(reason),
            "{args:?}: no {reason:?} in its log:\n{log}"
        );
    }
    let server = Server::start_with(&["max-ttl", "60000", "pathlock.accept-eviction", "yes"]);
    let mut con = server.conn();
    assert_eq!(config_get(&mut con, "pathlock.max-ttl"), "60000");
    assert_eq!(config_get(&mut con, "pathlock.accept-eviction"), "yes");
    let error = error_of(try_acquire(&mut con, "p", &["TTL", "60001", "WRITE", "/a"]));
    assert!(error.contains("from 1 to 60000"), "{error}");
}

/// `MODULE LOADEX` with a value the server refuses: the module is not loaded and the server runs
/// on. The module used to ignore what applying its settings answered, which left it loaded
/// with its defaults on Redis 7.0 and crashed Valkey 9.1 as the server unloaded it again.
#[test]
fn a_refused_module_loadex_leaves_the_server_running_without_the_module() {
    let server = Server::start_without_module(&["--enable-module-command", "yes"]);
    let mut con = server.conn();
    let path = module_path();
    let path = path.to_str().expect("a UTF-8 path");
    let refused: redis::RedisResult<()> = cmd("MODULE")
        .arg(&["LOADEX", path, "CONFIG", "pathlock.default-ttl", "0"])
        .query(&mut con);
    assert!(refused.is_err(), "{refused:?}");
    let pong: String = cmd("PING").query(&mut con).expect("the server runs on");
    assert_eq!(pong, "PONG");
    let modules: Vec<Vec<redis::Value>> = cmd("MODULE").arg("LIST").query(&mut con).expect("LIST");
    assert!(
        !format!("{modules:?}").contains("pathlock"),
        "the module stayed loaded: {modules:?}"
    );
    let _: () = cmd("MODULE")
        .arg(&["LOADEX", path, "CONFIG", "pathlock.default-ttl", "5000"])
        .arg(&["ARGS", "max-ttl", "70000"])
        .query(&mut con)
        .expect("a LOADEX with sound values");
    assert_eq!(config_get(&mut con, "pathlock.default-ttl"), "5000");
    assert_eq!(config_get(&mut con, "pathlock.max-ttl"), "70000");
    assert!(try_acquire(&mut con, "p", &["WRITE", "/a"])
        .expect("ACQUIRE")
        .is_some());
}

#[test]
fn inspecting_a_narrow_subtree_of_a_large_project_is_cheap() {
    let server = Server::start();
    let mut con = server.conn();
    let n = 100_000;
    hold_many(&mut con, "big", n, "READ", 1000);
    let time = |con: &mut Connection, command: &str, args: &[&str]| {
        timed_listing::<LockEntry>(con, command, "big", args)
    };
    let (narrow, narrow_us) = time(&mut con, "PATHLOCK.LOCKS", &["/d7"]);
    let (all, all_us) = time(&mut con, "PATHLOCK.LOCKS", &[]);
    assert_eq!((narrow, all), (100, n));
    let (blockers, check_narrow_us) = time(&mut con, "PATHLOCK.CHECK", &["WRITE", "/d7"]);
    let (none, check_read_us) = time(&mut con, "PATHLOCK.CHECK", &["READ", "/"]);
    let (every, check_all_us) = time(&mut con, "PATHLOCK.CHECK", &["WRITE", "/"]);
    assert_eq!((blockers, none, every), (100, 0, n));
    println!(
        "100k locks: LOCKS /d7 {narrow_us} us, LOCKS all {all_us} us; CHECK WRITE /d7 {check_narrow_us} us, \
         CHECK READ / {check_read_us} us, CHECK WRITE / {check_all_us} us"
    );
    // Work follows what is returned, not what is held.
    assert!(narrow_us * 50.0 < all_us, "{narrow_us} vs {all_us}");
    assert!(
        check_narrow_us * 50.0 < check_all_us,
        "{check_narrow_us} vs {check_all_us}"
    );
    assert!(
        check_read_us * 50.0 < check_all_us,
        "{check_read_us} vs {check_all_us}"
    );
}

/// A project holding one lock costs what it holds, not a chunk of arena: most projects are
/// small, and a server holds many (the engine's arenas grow a chunk at a time only once they
/// pass one chunk).
#[test]
fn a_small_project_costs_a_few_kilobytes() {
    let server = Server::start();
    let mut con = server.conn();
    let used = |con: &mut Connection| info_number(con, "memory", "used_memory");
    let before = used(&mut con);
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.cmd("PATHLOCK.ACQUIRE")
            .arg(&[
                format!("small:{i}").as_str(),
                "TOKEN",
                "t",
                "TTL",
                "600000",
                "WRITE",
                "/A/C",
            ])
            .ignore();
    }
    let _: () = pipe.query(&mut con).expect("1,000 projects");
    let per_project = (used(&mut con) - before) / 1000;
    assert!(
        per_project < 8 * 1024,
        "{per_project} bytes per one-lock project"
    );
}
