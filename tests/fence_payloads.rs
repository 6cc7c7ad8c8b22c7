//! No value of one key can harm another (issue 28): a payload whose fences no server can have
//! handed out (`docs/commands.md`, "Fences": above 1,000 × (the clock in ms + a year) for a client's
//! `RESTORE`, above 1,000 × (the clock + two years) for what servers send each other, never 2^53)
//! is refused with a clear error and changes nothing, through every way a value reaches the
//! server: `RESTORE` (which `MIGRATE` sends), an RDB file (a key's value and the fence mark in the
//! module's aux data), the AOF and the replication stream (`PATHLOCK.EFFECT` `GRANT` and
//! `FENCE`). A possible payload still raises the mark. A server whose files an older version let
//! such a value into loads them with `pathlock.lower-impossible-fences yes`, which lowers what is
//! impossible and nothing else.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;

const LIMIT: u64 = FENCE_LIMIT;
const PER_MS: u64 = FENCES_PER_MS;
/// The issue's counter.
const POISON: u64 = LIMIT + 5;
const LOWER: [&str; 2] = ["--pathlock.lower-impossible-fences", "yes"];

fn fence_mark(con: &mut Connection) -> u64 {
    info_number(con, "pathlock", "pathlock_fence_mark") as u64
}

fn exists(con: &mut Connection, key: &str) -> bool {
    let n: i64 = cmd("EXISTS").arg(key).query(con).expect("EXISTS");
    n == 1
}

/// A new key is granted, at a fence below 2^53 and within the rule; returns the fence.
fn a_new_key_grants(con: &mut Connection, key: &str) -> u64 {
    let granted = try_acquire(con, key, &["WRITE", "/new"])
        .unwrap_or_else(|e| panic!("ACQUIRE on the new key {key} failed: {e}"))
        .expect("the new key is granted");
    let fence = granted.1 as u64;
    let now = server_ms(con);
    assert!(
        fence < LIMIT && fence <= ceiling(now),
        "fence {fence} at {now}"
    );
    fence
}

/// The DUMP payload of a one-lock project, as the issue's report started from.
fn one_lock_payload(con: &mut Connection, key: &str) -> Vec<u8> {
    assert!(take(con, key, "t", &["TTL", "600000", "WRITE", "/A"]));
    cmd("DUMP").arg(key).query(con).expect("DUMP")
}

fn restore(
    con: &mut Connection,
    key: &str,
    payload: &[u8],
    replace: bool,
) -> redis::RedisResult<()> {
    let mut command = cmd("RESTORE");
    command.arg(key).arg(0).arg(payload);
    if replace {
        command.arg("REPLACE");
    }
    command.query(con)
}

#[test]
fn the_issues_restore_payload_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.conn();
    let payload = one_lock_payload(&mut con, "p");
    let hostile = with_counter(&payload, POISON);
    assert_eq!(counter_of(&hostile), POISON);
    assert_eq!(hostile.len(), payload.len(), "only the counter changed");
    let mark = fence_mark(&mut con);
    let digest = digest_of(&mut con, "p");

    let error = error_of(restore(&mut con, "evil", &hostile, false));
    assert!(error.contains("Bad data format"), "{error}");
    assert!(!exists(&mut con, "evil"));
    // Over an existing key, too: it stays as it was.
    let error = error_of(restore(&mut con, "p", &hostile, true));
    assert!(error.contains("Bad data format"), "{error}");
    assert_eq!(digest_of(&mut con, "p"), digest);
    assert_eq!(fence_mark(&mut con), mark, "the mark did not move");
    let log = server.log();
    assert!(
        log.contains(
            "refusing the path-lock value of key 'evil': fence counter 9007199254740997 above"
        ),
        "{log}"
    );

    // Any counter above the bound, not only past 2^53: ten seconds ahead of it.
    let above = admissible(server_ms(&mut con)) + 10_000 * PER_MS;
    assert!(restore(&mut con, "evil", &with_counter(&payload, above), false).is_err());
    assert!(!exists(&mut con, "evil"));

    // Every new key still gets a grant, also after FLUSHALL and DEBUG RELOAD.
    let mut last = a_new_key_grants(&mut con, "new1");
    for step in [["DEBUG", "RELOAD"], ["FLUSHALL", "SYNC"]] {
        let _: () = cmd(step[0]).arg(step[1]).query(&mut con).expect("the step");
        let fence = a_new_key_grants(&mut con, &format!("after {step:?}"));
        assert!(fence > last, "{fence} after {last}");
        last = fence;
    }
}

#[test]
fn a_possible_payload_still_raises_the_mark_so_fences_never_go_back() {
    let server = Server::start();
    let mut con = server.conn();
    let payload = one_lock_payload(&mut con, "p");
    // High, far above the clock floor, but a minute under the bound: possible.
    let high = admissible(server_ms(&mut con)) - 60_000 * PER_MS;
    restore(&mut con, "q", &with_counter(&payload, high), false).expect("RESTORE");
    assert_eq!(fence_mark(&mut con), high);
    assert_eq!(
        acquire(&mut con, "q", &["WRITE", "/B"]).expect("granted").1 as u64,
        high
    );
    let _: () = cmd("DEBUG")
        .arg("RELOAD")
        .query(&mut con)
        .expect("DEBUG RELOAD");
    let _: i64 = cmd("DEL").arg("q").query(&mut con).expect("DEL");
    assert_eq!(
        a_new_key_grants(&mut con, "q"),
        high + 1,
        "a new key starts above the mark"
    );
}

/// The test that stood here showed that a key whose counter reached 2^53 grants no more; the
/// effect it appended to reach it is now refused, as no server can have reached 2^53 for two
/// centuries. So are the other effects that would set an impossible counter, while the AOF goes
/// on replaying what follows them.
#[test]
fn aof_effects_with_impossible_fences_are_refused_and_the_rest_replays() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.conn();
    let last = acquire(&mut con, "p", &["WRITE", "/A"]).expect("granted").1 as u64;
    let deadline = (server_ms(&mut con) + 600_000).to_string();
    let effect = |words: &[&str]| {
        let words: Vec<&[u8]> = std::iter::once("PATHLOCK.EFFECT")
            .chain(words.iter().copied())
            .map(str::as_bytes)
            .collect();
        resp(&words)
    };
    let (limit_less_one, poisoned, max) = (
        (LIMIT - 1).to_string(),
        (POISON - 1).to_string(),
        u64::MAX.to_string(),
    );
    let possible = (last + 100).to_string();
    let appended = [
        effect(&["p", "FENCE", &limit_less_one]),
        effect(&["q", "GRANT", "t", &deadline, &poisoned, "WRITE", "/a"]),
        effect(&["r", "FENCE", &max]),
        effect(&["s", "GRANT", "t", &deadline, &possible, "WRITE", "/a"]),
    ]
    .concat();
    append_to_aof(&server, &appended);
    server.crash_and_restart();
    let mut con = server.conn();
    assert_eq!(
        acquire(&mut con, "p", &["WRITE", "/B"]).expect("granted").1 as u64,
        last + 1,
        "p continues at its own next fence"
    );
    assert!(
        !exists(&mut con, "q") && !exists(&mut con, "r"),
        "refused effects created keys"
    );
    let held = lock_set(&mut con, "s");
    assert_eq!(
        held,
        vec![(
            b"/a".to_vec(),
            "WRITE".into(),
            b"t".to_vec(),
            last as i64 + 100
        )]
    );
    assert_eq!(fence_mark(&mut con), last + 101);
    a_new_key_grants(&mut con, "new");
    let log = server.log();
    for counter in [
        "9007199254740991",
        "9007199254740997",
        "18446744073709551615",
    ] {
        assert!(
            log.contains(&format!("ERR impossible fence counter {counter}")),
            "{counter} not refused; log:\n{log}"
        );
    }
}

/// A master that is this test: it answers a replica's handshake, sends `rdb` as the full sync
/// and then whatever the test writes to the returned stream.
fn fake_master(replica: &mut Connection, rdb: &[u8]) -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    let port = listener.local_addr().expect("its address").port();
    listener.set_nonblocking(true).expect("non-blocking accept");
    let _: () = cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(port)
        .query(replica)
        .expect("REPLICAOF");
    let started = Instant::now();
    let stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(_) if started.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("the replica never connected: {e}"),
        }
    };
    stream.set_nonblocking(false).expect("blocking");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("a read timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
    let mut writer = stream;
    loop {
        let words = read_command(&mut reader);
        let name = words
            .first()
            .map(|w| w.to_ascii_uppercase())
            .unwrap_or_default();
        match name.as_slice() {
            b"PING" => writer.write_all(b"+PONG\r\n").expect("reply"),
            b"PSYNC" | b"SYNC" => {
                let replid = "0123456789abcdef0123456789abcdef01234567";
                writer
                    .write_all(format!("+FULLRESYNC {replid} 0\r\n${}\r\n", rdb.len()).as_bytes())
                    .expect("reply");
                writer.write_all(rdb).expect("the RDB");
                writer.write_all(&resp(&[b"SELECT", b"0"])).expect("SELECT");
                return writer;
            }
            _ => writer.write_all(b"+OK\r\n").expect("reply"),
        }
    }
}

/// One command of the replica's handshake, as RESP.
fn read_command(reader: &mut impl BufRead) -> Vec<Vec<u8>> {
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .expect("a command from the replica");
    let count: usize = line
        .trim_end()
        .strip_prefix('*')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a RESP array: {line:?}"));
    (0..count)
        .map(|_| {
            line.clear();
            reader.read_line(&mut line).expect("a bulk length");
            let len: usize = line.trim_end()[1..].parse().expect("a length");
            let mut word = vec![0; len + 2];
            reader.read_exact(&mut word).expect("the word");
            word.truncate(len);
            word
        })
        .collect()
}

#[test]
fn a_master_streaming_impossible_fences_is_refused_by_its_replica() {
    let source = Server::start();
    let mut s = source.conn();
    let module_id = module_id(&one_lock_payload(&mut s, "p"));
    let replica = Server::start();
    let mut con = replica.conn();
    let mut master = fake_master(&mut con, &rdb_file(module_id, Some(1), &[]));
    let deadline = (server_ms(&mut con) + 600_000).to_string();
    let now = server_ms(&mut con);
    let fine = (now * PER_MS).to_string();
    // What a master whose clock is a day ahead may send after it admitted a value at its edge.
    let edge = admissible(now + 86_400_000);
    let poisoned = (POISON - 1).to_string();
    let above = (ceiling(now) + 10_000 * PER_MS).to_string();
    let grant = |key: &str, fence: &str| {
        resp(&[
            b"PATHLOCK.EFFECT",
            key.as_bytes(),
            b"GRANT",
            b"t",
            deadline.as_bytes(),
            fence.as_bytes(),
            b"WRITE",
            b"/a",
        ])
    };
    let stream: Vec<Vec<u8>> = vec![
        grant("evil1", &poisoned),
        resp(&[b"PATHLOCK.EFFECT", b"evil2", b"FENCE", above.as_bytes()]),
        grant("good", &fine),
        grant("edge", &edge.to_string()),
    ];
    master.write_all(&stream.concat()).expect("the stream");
    wait_until(
        Duration::from_secs(20),
        "the replica to apply the stream",
        || exists(&mut con, "edge"),
    );
    assert!(exists(&mut con, "good"));
    assert!(!exists(&mut con, "evil1") && !exists(&mut con, "evil2"));
    assert_eq!(
        fence_mark(&mut con),
        edge + 1,
        "only possible grants moved the mark"
    );
    let log = replica.log();
    assert!(
        log.contains("ERR impossible fence counter 9007199254740997"),
        "the replica's log:\n{log}"
    );
    drop(master);
    promote(&mut con);
    assert!(a_new_key_grants(&mut con, "new") > edge);
}

/// Puts `rdb` in place of the server's RDB file, with the server stopped.
fn replace_rdb(server: &Server, rdb: &[u8]) {
    let mut con = server.conn();
    let _ = cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut con);
    wait_until(Duration::from_secs(20), "the server to stop", || {
        TcpStream::connect(("127.0.0.1", server.port)).is_err()
    });
    std::fs::write(server.dir.join("dump.rdb"), rdb).expect("the RDB file");
}

/// An RDB that an older version saved with a forged value in it (the issue's payload restored,
/// or the mark alone), refused at start with the way out named in the log, then loaded with
/// `pathlock.lower-impossible-fences yes`: what is impossible comes down to the ceiling, a new
/// key is granted, and the server's own next RDB loads without the config.
#[test]
fn an_rdb_with_an_impossible_mark_or_key_is_refused_until_the_operator_lowers_it() {
    let mut server = Server::start();
    let mut con = server.conn();
    let payload = one_lock_payload(&mut con, "p");
    let fence = lock_set(&mut con, "p")[0].3 as u64;
    let module_id = module_id(&payload);
    let hostile = with_counter(&payload, POISON);
    let cases: [(&str, Vec<u8>, &str); 3] = [
        (
            "the mark",
            rdb_file(module_id, Some(POISON), &[]),
            "refusing the RDB: its fence mark 9007199254740997 is impossible",
        ),
        (
            "a key and the mark",
            rdb_file(module_id, Some(POISON), &[(b"evil", &hostile)]),
            "refusing the RDB: its fence mark 9007199254740997 is impossible",
        ),
        (
            "a key",
            rdb_file(module_id, Some(1), &[(b"evil", &hostile)]),
            "refusing the path-lock value of key 'evil': fence counter 9007199254740997",
        ),
    ];
    for (what, rdb, refusal) in cases {
        replace_rdb(&server, &rdb);
        let log = start_refused(Some(&server.dir), &[]).1;
        assert!(log.contains(refusal), "{what}: {log}");
        assert!(
            log.contains("pathlock.lower-impossible-fences yes"),
            "{what}: {log}"
        );

        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("the clock")
            .as_millis() as u64;
        server.restart_with(&LOWER);
        let mut con = server.conn();
        let after = server_ms(&mut con);
        let mark = fence_mark(&mut con);
        assert!(
            (admissible(before)..=admissible(after)).contains(&mark),
            "{what}: the mark {mark} is not the admissible one"
        );
        assert!(server.log().contains("lowered the"), "{what}");
        if what.contains("key") {
            // The key is kept with its possible lock, and its counter lowered.
            let held = lock_set(&mut con, "evil");
            assert_eq!(
                held,
                vec![(b"/A".to_vec(), "WRITE".into(), b"t".to_vec(), fence as i64)]
            );
            let next = acquire(&mut con, "evil", &["WRITE", "/B"])
                .expect("granted")
                .1 as u64;
            assert!(next >= admissible(before) && next < LIMIT, "{what}: {next}");
        }
        let first = a_new_key_grants(&mut con, "new");
        assert!(first >= mark, "{what}: {first} below the mark {mark}");
        // What the server saves now is possible: it loads without the config.
        let _: () = cmd("CONFIG")
            .arg(&["SET", "pathlock.lower-impossible-fences", "no"])
            .query(&mut con)
            .expect("CONFIG SET");
        let _: () = cmd("DEBUG")
            .arg("RELOAD")
            .query(&mut con)
            .expect("DEBUG RELOAD");
        assert!(a_new_key_grants(&mut con, "after reload") > first);
        server.restart_with(&[]);
    }
}

/// The file a build of the previous version saved (Redis 7.0.15) right after the issue's
/// `RESTORE` of a one-lock project with its counter set to 2^53 + 5: its mark and that key both
/// hold 9007199254740997. `tests/data/README.md` says how it was made.
#[test]
fn the_rdb_the_previous_version_saved_after_the_issues_restore_recovers() {
    let mut server = Server::start();
    let rdb = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/poisoned-by-restore.rdb"),
    )
    .expect("the fixture");
    replace_rdb(&server, &rdb);
    let log = start_refused(Some(&server.dir), &[]).1;
    assert!(
        log.contains("fence mark 9007199254740997 is impossible"),
        "{log}"
    );
    server.restart_with(&LOWER);
    let mut con = server.conn();
    let now = server_ms(&mut con);
    assert!(fence_mark(&mut con) <= ceiling(now));
    // Its one lock had the impossible fence and was dropped: a project with nothing left is no
    // key, and the expiry cycle deletes it.
    wait_until(Duration::from_secs(10), "the emptied key to go", || {
        !exists(&mut con, "evil")
    });
    a_new_key_grants(&mut con, "new");
    let fence = acquire(&mut con, "evil", &["WRITE", "/B"])
        .expect("granted")
        .1 as u64;
    assert!(fence < LIMIT);
}

/// The config lowers only what is impossible: a mark a minute under the admissible one (saved
/// by the server after a `RESTORE`), or a day under the ceiling (as a file may hold it), comes
/// back as it was, and a new key starts there.
#[test]
fn lowering_never_lowers_a_possible_mark() {
    let mut server = Server::start();
    let mut con = server.conn();
    let payload = one_lock_payload(&mut con, "p");
    let now = server_ms(&mut con);
    let high = admissible(now) - 60_000 * PER_MS;
    restore(&mut con, "q", &with_counter(&payload, high), false).expect("RESTORE");
    let _: i64 = cmd("DEL").arg(&["p", "q"]).query(&mut con).expect("DEL");
    let _: () = cmd("SAVE").query(&mut con).expect("SAVE");
    server.restart_with(&LOWER);
    let mut con = server.conn();
    assert_eq!(fence_mark(&mut con), high);
    assert_eq!(a_new_key_grants(&mut con, "new"), high);

    let higher = ceiling(now) - 86_400_000 * PER_MS;
    replace_rdb(&server, &rdb_file(module_id(&payload), Some(higher), &[]));
    server.restart_with(&LOWER);
    let mut con = server.conn();
    assert_eq!(fence_mark(&mut con), higher);
    assert_eq!(a_new_key_grants(&mut con, "new"), higher);
    assert!(!server.log().contains("lowered the"));
}

/// `MIGRATE` hands its payload to the target's `RESTORE`, so the target holds it to the bound of
/// a client's payload: a key whose counter is above it (here from a file, which may hold up to
/// the ceiling) is refused there and stays where it was, and both servers go on granting.
#[test]
fn migrate_is_held_to_the_bound_of_a_restore() {
    let mut source = Server::start();
    let target = Server::start();
    let mut s = source.conn();
    let mut t = target.conn();
    let payload = one_lock_payload(&mut s, "p");
    let above = ceiling(server_ms(&mut s)) - 86_400_000 * PER_MS;
    let high = with_counter(&payload, above);
    replace_rdb(
        &source,
        &rdb_file(module_id(&payload), Some(1), &[(b"k", &high)]),
    );
    source.restart_with(&[]);
    let mut s = source.conn();
    assert_eq!(fence_mark(&mut s), above, "a file may hold it");
    let mark = fence_mark(&mut t);
    let port = target.port.to_string();
    let migrated = cmd("MIGRATE")
        .arg(&["127.0.0.1", &port, "k", "0", "5000"])
        .query::<String>(&mut s);
    let error = error_of(migrated);
    assert!(error.contains("Bad data format"), "{error}");
    assert!(exists(&mut s, "k") && !exists(&mut t, "k"));
    assert_eq!(fence_mark(&mut t), mark);
    a_new_key_grants(&mut t, "new");
    assert!(a_new_key_grants(&mut s, "new") >= above);
}
