//! A black-box fuzzer against live servers: random PATHLOCK commands with arguments drawn from
//! every byte value and hostile UTF-8, in every position, alone, inside `MULTI`/`EXEC` and
//! inside `EVAL`, sent to a master with a replica. After each batch:
//!
//! * the master answers `PING` (nothing a client sent took it down);
//! * `LOCKS` of every key touched never shows two conflicting live locks of different tokens;
//! * the master's and the replica's `DEBUG DIGEST` are equal.
//!
//! It runs a fixed seed, so CI always covers the same ground, and one fresh seed per run, printed,
//! so that a failure can be replayed with `PATHLOCK_FUZZ_SEED=<seed> cargo test --release --test
//! fuzz_live`.
//!
//! The payload surfaces are fuzzed for issue 28's property, that no value of one key can harm
//! another: mutated DUMP payloads, sealed with a valid checksum, through `RESTORE` (what
//! `MIGRATE` sends), and mutated `PATHLOCK.EFFECT` streams replayed from the AOF (what a replica
//! applies). After every accepted payload a key never used before is granted, below 2^53 and
//! within the fence ceiling, and the server reloads what it took (`DEBUG RELOAD`). Set
//! `PATHLOCK_FUZZ_ROUNDS` to run more rounds than CI does.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::*;

const FIXED_SEED: u64 = 0x5eed_2026_1122;
const BATCHES: usize = 12;
const COMMANDS_PER_BATCH: usize = 250;

/// Words that have broken servers, or could: characters whose low byte is 0 (U+0100, U+0400,
/// U+FF00), NUL, line breaks, format directives, invalid UTF-8, a lone continuation byte, an
/// overlong encoding, and words of the command's own grammar in the wrong place.
const HOSTILE: &[&[u8]] = &[
    "\u{100}".as_bytes(),
    "\u{400}".as_bytes(),
    "\u{ff00}".as_bytes(),
    "\u{10ffff}".as_bytes(),
    b"\x00",
    b"a\x00b",
    b"\r\n",
    b"%s%n%x",
    b"\xff\xfe",
    b"\x80",
    b"\xc0\x80",
    b"\x1b[2J",
    b"..",
    b"/A/../B",
    b"",
    b"/",
    b"-1",
    b"18446744073709551616",
    b"TOKEN",
    b"WAIT",
    b"READ",
];

const MODES: &[&[u8]] = &[b"READ", b"WRITE", b"read", b"Write"];
const PATHS: &[&[u8]] = &[
    b"/",
    b"/A",
    b"/A/C",
    b"/A/CD",
    b"/A/C/d.txt",
    b"/B",
    b"A//C/",
    b"/p-%/f1",
    "/文件/ö".as_bytes(),
];
const TOKENS: &[&[u8]] = &[b"t1", b"t2", b"t3", "тт".as_bytes()];
const KEYS: &[&[u8]] = &[b"fz:1", b"fz:2", "fz:\u{100}".as_bytes(), b"fz:\x00"];
/// Small numbers only: a WAIT that blocks would stall the fuzzer's own connection.
const NUMBERS: &[&[u8]] = &[b"0", b"1", b"5", b"20", b"100", b"3000", b"x"];

struct Fuzzer {
    rng: Rng,
}

impl Fuzzer {
    fn word(&mut self, kind: &[&[u8]]) -> Vec<u8> {
        match self.rng.below(10) {
            // One word in ten is hostile, or random bytes of any value.
            0 => self.hostile(),
            _ => self.rng.pick(kind).to_vec(),
        }
    }

    fn hostile(&mut self) -> Vec<u8> {
        if self.rng.below(2) == 0 {
            return self.rng.pick(HOSTILE).to_vec();
        }
        let len = self.rng.below(9);
        (0..len).map(|_| self.rng.below(256) as u8).collect()
    }

    fn mode_paths(&mut self, words: &mut Vec<Vec<u8>>) {
        for _ in 0..=self.rng.below(3) {
            words.push(self.word(MODES));
            words.push(self.word(PATHS));
        }
    }

    /// One command: a well-formed one of a random PATHLOCK command, then each word replaced
    /// by a hostile one with some probability, and sometimes words cut or added.
    fn command(&mut self) -> Vec<Vec<u8>> {
        let mut words: Vec<Vec<u8>> = Vec::new();
        let key = self.word(KEYS);
        match self.rng.below(6) {
            0 => {
                words.extend([b"PATHLOCK.ACQUIRE".to_vec(), key]);
                if self.rng.below(2) == 0 {
                    words.extend([b"TOKEN".to_vec(), self.word(TOKENS)]);
                }
                if self.rng.below(2) == 0 {
                    words.extend([b"TTL".to_vec(), self.word(NUMBERS)]);
                }
                if self.rng.below(4) == 0 {
                    words.extend([b"WAIT".to_vec(), self.word(&[b"0", b"1", b"10"])]);
                }
                if self.rng.below(3) == 0 {
                    words.extend([b"NOTE".to_vec(), self.word(TOKENS)]);
                }
                self.mode_paths(&mut words);
            }
            1 => {
                words.extend([b"PATHLOCK.RELEASE".to_vec(), key, self.word(TOKENS)]);
                for _ in 0..self.rng.below(3) {
                    words.push(self.word(PATHS));
                }
            }
            2 => words.extend([
                b"PATHLOCK.RENEW".to_vec(),
                key,
                self.word(TOKENS),
                self.word(NUMBERS),
            ]),
            3 if self.rng.below(4) == 0 => {
                words.extend([b"PATHLOCK.WAITERS".to_vec(), key]);
                if self.rng.below(2) == 0 {
                    words.push(self.word(PATHS));
                }
            }
            3 => {
                words.extend([b"PATHLOCK.LOCKS".to_vec(), key]);
                if self.rng.below(2) == 0 {
                    words.push(self.word(PATHS));
                }
                if self.rng.below(3) == 0 {
                    words.extend([b"TOKEN".to_vec(), self.word(TOKENS)]);
                }
            }
            4 => {
                words.extend([b"PATHLOCK.CHECK".to_vec(), key]);
                if self.rng.below(2) == 0 {
                    words.extend([b"TOKEN".to_vec(), self.word(TOKENS)]);
                }
                self.mode_paths(&mut words);
            }
            _ => {
                // Clients may not send the replication-only command, whatever it carries.
                words.extend([b"PATHLOCK.EFFECT".to_vec(), key, b"GRANT".to_vec()]);
                words.extend([self.word(TOKENS), b"99999999999999".to_vec(), b"7".to_vec()]);
                self.mode_paths(&mut words);
            }
        }
        // Sometimes a word goes missing or an extra one arrives, in any position but the name.
        match self.rng.below(8) {
            0 if words.len() > 1 => {
                let at = 1 + self.rng.below(words.len() as u64 - 1) as usize;
                words.remove(at);
            }
            1 => {
                let at = 1 + self.rng.below(words.len() as u64) as usize;
                let word = self.hostile();
                words.insert(at.min(words.len()), word);
            }
            _ => {}
        }
        words
    }
}

fn command_of(words: &[Vec<u8>]) -> redis::Cmd {
    let mut command = cmd(std::str::from_utf8(&words[0]).unwrap_or("PATHLOCK.LOCKS"));
    for word in &words[1..] {
        command.arg(word.as_slice());
    }
    command
}

/// Any reply is fine, an error included, as long as it is a reply: the connection must not have
/// broken, and an error's text must be printable ASCII (client bytes escaped).
fn answered(result: redis::RedisResult<Value>, what: &str) {
    if let Err(error) = result {
        assert!(
            !error.is_io_error() && !error.is_connection_dropped(),
            "the server did not answer {what}: {error}"
        );
        let text = error.to_string();
        assert!(
            text.chars().all(|c| c.is_ascii() && !c.is_ascii_control()),
            "an error reply with raw bytes for {what}: {text:?}"
        );
    }
}

fn is_ancestor_or_same(a: &[u8], b: &[u8]) -> bool {
    a == b || a == b"/" || (b.starts_with(a) && b.get(a.len()) == Some(&b'/'))
}

/// Two live locks of different tokens on related paths, one of them WRITE, must never coexist.
fn assert_exclusive(con: &mut Connection, key: &[u8], seed: u64) {
    let entries: Vec<LockEntry> = cmd("PATHLOCK.LOCKS")
        .arg(key)
        .query(con)
        .expect("LOCKS of a fuzzed key");
    for (i, a) in entries.iter().enumerate() {
        for b in &entries[i + 1..] {
            let related = is_ancestor_or_same(&a.0, &b.0) || is_ancestor_or_same(&b.0, &a.0);
            let conflicting = a.1 == "WRITE" || b.1 == "WRITE";
            assert!(
                a.2 == b.2 || !related || !conflicting,
                "seed {seed}: conflicting live locks in {:?}: {a:?} and {b:?}",
                String::from_utf8_lossy(key)
            );
        }
    }
}

fn run_seed(seed: u64) -> usize {
    let master = Server::start();
    let replica = Server::replica_of(&master, &[]);
    let mut con = master.conn();
    con.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    let mut replica_con = replica.conn();
    // A key of another type, so that WRONGTYPE paths are fuzzed too.
    let _: () = cmd("SET")
        .arg("fz:s")
        .arg("x")
        .query(&mut con)
        .expect("SET");
    let mut fuzzer = Fuzzer {
        rng: Rng::new(seed),
    };
    let mut sent = 0;
    for batch in 0..BATCHES {
        let mut n = 0;
        while n < COMMANDS_PER_BATCH {
            match fuzzer.rng.below(10) {
                // A transaction of a few commands: inside it nothing blocks.
                0 => {
                    let commands: Vec<_> = (0..4).map(|_| fuzzer.command()).collect();
                    let mut pipe = redis::pipe();
                    pipe.atomic();
                    for words in &commands {
                        pipe.add_command(command_of(words));
                    }
                    answered(pipe.query::<Value>(&mut con), "a MULTI/EXEC");
                    n += commands.len();
                }
                // A script that passes the command on, with its key declared.
                1 => {
                    let words = fuzzer.command();
                    let mut eval = cmd("EVAL");
                    eval.arg("return redis.pcall(ARGV[1], KEYS[1], unpack(ARGV, 2))")
                        .arg(1)
                        .arg(words.get(1).map_or(&b"fz:1"[..], Vec::as_slice))
                        .arg(words[0].as_slice());
                    for word in words.iter().skip(2) {
                        eval.arg(word.as_slice());
                    }
                    answered(eval.query::<Value>(&mut con), "an EVAL");
                    n += 1;
                }
                _ => {
                    let words = fuzzer.command();
                    let shown: Vec<String> = words
                        .iter()
                        .map(|w| String::from_utf8_lossy(w).into_owned())
                        .collect();
                    answered(
                        command_of(&words).query::<Value>(&mut con),
                        &format!("{shown:?} (seed {seed})"),
                    );
                    n += 1;
                }
            }
        }
        sent += n;
        let pong: String = cmd("PING").query(&mut con).expect("PING after a batch");
        assert_eq!(pong, "PONG");
        for key in KEYS {
            assert_exclusive(&mut con, key, seed);
        }
        pause_and_sync(&mut con);
        let (on_master, on_replica) = (dataset_digest(&mut con), dataset_digest(&mut replica_con));
        resume_writes(&mut con);
        assert_eq!(
            on_master, on_replica,
            "seed {seed}, batch {batch}: master and replica differ"
        );
    }
    sent
}

#[test]
fn random_commands_with_hostile_bytes_never_break_the_server_or_its_promises() {
    let fresh = std::env::var("PATHLOCK_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    for seed in [FIXED_SEED, fresh] {
        eprintln!("fuzz_live: seed {seed} (replay with PATHLOCK_FUZZ_SEED={seed})");
        let sent = run_seed(seed);
        eprintln!("fuzz_live: seed {seed}: {sent} commands, every check held");
    }
}

/// Every hostile word in every argument position of every command: each gets a reply, and the
/// server is still there after it.
#[test]
fn every_hostile_word_in_every_position_is_answered() {
    let server = Server::start();
    let mut con = server.conn();
    let templates: &[&[&[u8]]] = &[
        &[
            b"PATHLOCK.ACQUIRE",
            b"k",
            b"TOKEN",
            b"t",
            b"TTL",
            b"100",
            b"WRITE",
            b"/a",
        ],
        &[
            b"PATHLOCK.ACQUIRE",
            b"k",
            b"WAIT",
            b"0",
            b"READ",
            b"/a",
            b"WRITE",
            b"/b",
        ],
        &[b"PATHLOCK.RELEASE", b"k", b"t", b"/a"],
        &[b"PATHLOCK.RENEW", b"k", b"t", b"100"],
        &[b"PATHLOCK.LOCKS", b"k", b"/a"],
        &[b"PATHLOCK.CHECK", b"k", b"TOKEN", b"t", b"READ", b"/a"],
        &[
            b"PATHLOCK.EFFECT",
            b"k",
            b"GRANT",
            b"t",
            b"1",
            b"1",
            b"WRITE",
            b"/a",
        ],
    ];
    let mut sent = 0;
    for template in templates {
        for position in 1..template.len() {
            for hostile in HOSTILE {
                let words: Vec<Vec<u8>> = template
                    .iter()
                    .enumerate()
                    .map(|(i, w)| {
                        if i == position {
                            hostile.to_vec()
                        } else {
                            w.to_vec()
                        }
                    })
                    .collect();
                answered(
                    command_of(&words).query::<Value>(&mut con),
                    &format!("{:?}", String::from_utf8_lossy(&words.concat())),
                );
                sent += 1;
            }
        }
    }
    let pong: String = cmd("PING").query(&mut con).expect("PING");
    assert_eq!(pong, "PONG");
    assert!(sent > 500, "only {sent} commands sent");
}

/// The command that aborted the server: a mode word of two bytes, U+0100, whose low byte is 0.
#[test]
fn a_mode_of_u0100_is_an_escaped_error_not_an_abort() {
    let server = Server::start();
    let mut con = server.conn();
    for (word, shown) in [
        ("\u{100}", "\\xc4\\x80"),
        ("\u{400}", "\\xd0\\x80"),
        ("\u{ff00}", "\\xef\\xbc\\x80"),
    ] {
        let error = error_from(
            &mut con,
            &[b"PATHLOCK.ACQUIRE", b"k", word.as_bytes(), b"/a"],
        );
        assert_eq!(
            error,
            format!(
                "ERR unknown option or mode '{shown}': expected TOKEN, TTL, WAIT, NOTE, READ or WRITE"
            )
        );
        let error = error_from(&mut con, &[b"PATHLOCK.CHECK", b"k", word.as_bytes(), b"/a"]);
        assert_eq!(
            error,
            format!("ERR invalid mode '{shown}': must be READ or WRITE")
        );
    }
    let error = error_from(&mut con, &[b"PATHLOCK.CHECK", b"k", b"a\x00\n\\", b"/a"]);
    assert_eq!(
        error,
        "ERR invalid mode 'a\\x00\\n\\\\': must be READ or WRITE"
    );
    let pong: String = cmd("PING").query(&mut con).expect("PING");
    assert_eq!(pong, "PONG");
}

/// Rounds of the payload fuzzers: `PATHLOCK_FUZZ_ROUNDS`, or what CI runs.
fn rounds(ci: usize) -> usize {
    std::env::var("PATHLOCK_FUZZ_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ci)
}

/// The fixed seed and a fresh one, or `PATHLOCK_FUZZ_SEED` alone.
fn seeds() -> Vec<u64> {
    match std::env::var("PATHLOCK_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => vec![seed],
        None => vec![
            FIXED_SEED,
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64),
        ],
    }
}

/// Counters worth trying: the edges of the rule at `now_ms`, 2^53 and around it, the clock
/// floor, the extremes of 64 bits, and random ones below and above the ceiling.
fn interesting_counter(rng: &mut Rng, now_ms: u64) -> u64 {
    let floor = now_ms * FENCES_PER_MS;
    let picks = [
        0,
        1,
        2,
        floor,
        admissible(now_ms) - 1,
        admissible(now_ms),
        admissible(now_ms) + 1,
        ceiling(now_ms),
        ceiling(now_ms) + 1,
        FENCE_LIMIT - 1,
        FENCE_LIMIT,
        FENCE_LIMIT + 5,
        u64::MAX,
        u64::MAX - 1,
        1 << 63,
        floor + rng.below(ceiling(now_ms) - floor),
        rng.next(),
    ];
    *rng.pick(&picks)
}

/// One to three mutations of a DUMP payload, then a fresh checksum: the shape (the
/// counter replaced, re-encoded), an 8-byte big-endian window overwritten (where locks keep
/// their fences and deadlines), a bit flipped, a byte set, bytes cut or repeated.
fn mutate(rng: &mut Rng, payload: &[u8], now_ms: u64) -> Vec<u8> {
    let mut out = payload.to_vec();
    for _ in 0..=rng.below(3) {
        // The body: after the type byte and the module id, before the RDB version and checksum.
        let end = out.len().saturating_sub(10);
        if end <= 10 {
            break;
        }
        let at = 10 + rng.below((end - 10) as u64) as usize;
        let len = 1 + rng.below(8) as usize;
        match rng.below(6) {
            0 if read_rdb_len(&out, COUNTER_AT).is_some() => {
                out = with_counter(&out, interesting_counter(rng, now_ms));
            }
            1 if at + 8 <= end => {
                let value = interesting_counter(rng, now_ms);
                out[at..at + 8].copy_from_slice(&value.to_be_bytes());
            }
            2 => out[at] ^= 1 << rng.below(8),
            3 => out[at] = rng.below(256) as u8,
            4 => {
                out.drain(at..(at + len).min(end));
            }
            _ => {
                let copy = out[at..(at + len).min(end)].to_vec();
                out.splice(at..at, copy);
            }
        }
    }
    reseal(&mut out);
    out
}

/// The property after a payload was taken in: the mark is within the ceiling, and a key never
/// used before is granted, at a fence below 2^53 and within the ceiling. (The mark is read
/// first: a grant at the ceiling takes the mark one past it until the clock moves on.)
fn a_new_key_grants(con: &mut Connection, key: &str, what: &str) {
    let mark = info_number(con, "pathlock", "pathlock_fence_mark") as u64;
    assert!(mark <= ceiling(server_ms(con)), "{what}: fence mark {mark}");
    let granted = try_acquire(con, key, &["WRITE", "/"])
        .unwrap_or_else(|e| panic!("{what}: a new key was refused: {e}"))
        .unwrap_or_else(|| panic!("{what}: a new key was not granted"));
    let fence = granted.1 as u64;
    assert!(
        fence < FENCE_LIMIT && fence <= ceiling(server_ms(con)),
        "{what}: fence {fence}"
    );
}

/// Projects of every shape to take payloads from: one lock (the issue's), shared and exclusive
/// locks of many owners, binary and deep paths, and a project whose locks were all released.
fn source_payloads(con: &mut Connection) -> Vec<Vec<u8>> {
    assert!(take(con, "src:1", "t", &["TTL", "600000", "WRITE", "/A"]));
    for (i, mode) in ["READ", "READ", "WRITE"].iter().enumerate() {
        let path = if *mode == "READ" { "/docs/a" } else { "/B/c" };
        assert!(take(
            con,
            "src:2",
            &format!("o{i}"),
            &["TTL", "600000", mode, path]
        ));
    }
    assert!(take(
        con,
        "src:2",
        "o0",
        &["READ", "/docs/a/x", "WRITE", "/C"]
    ));
    let binary = "/\u{100}/\u{0}x/%s";
    assert!(take(
        con,
        "src:3",
        "\u{400}",
        &["TTL", "1", "WRITE", binary]
    ));
    let deep = "/d".repeat(40);
    assert!(take(con, "src:4", "t", &["READ", &deep]));
    assert!(take(con, "src:5", "t", &["WRITE", "/gone"]));
    assert_eq!(release(con, "src:5", "t", &[]), 1);
    (1..=5)
        .map(|i| {
            cmd("DUMP")
                .arg(format!("src:{i}"))
                .query(con)
                .expect("DUMP")
        })
        .collect()
}

fn restore_payloads(seed: u64, rounds: usize) -> (usize, usize) {
    let server = Server::start();
    let mut con = server.conn();
    let payloads = source_payloads(&mut con);
    let mut rng = Rng::new(seed);
    let mut accepted = 0;
    for round in 0..rounds {
        let now = server_ms(&mut con);
        let source = rng.pick(&payloads).clone();
        let payload = mutate(&mut rng, &source, now);
        let key = format!("fz:r:{}", round % 8);
        let restored = cmd("RESTORE")
            .arg(&key)
            .arg(0)
            .arg(&payload)
            .arg("REPLACE")
            .query::<()>(&mut con);
        let what = format!("seed {seed}, round {round}, payload {payload:02x?}");
        if restored.is_ok() {
            accepted += 1;
            // The restored key itself answers a grant or nil, never an error.
            answered_without_error(&mut con, &key, &what);
        }
        a_new_key_grants(&mut con, &format!("fresh:{round}"), &what);
        if round % 50 == 49 {
            let _: () = cmd("DEBUG")
                .arg("RELOAD")
                .query(&mut con)
                .unwrap_or_else(|e| panic!("{what}: DEBUG RELOAD failed: {e}"));
            a_new_key_grants(&mut con, &format!("reloaded:{round}"), &what);
        }
    }
    let refused_for_fences = server
        .log()
        .lines()
        .filter(|line| {
            line.contains("refusing the path-lock value") && line.contains("above the ceiling")
        })
        .count();
    (accepted, refused_for_fences)
}

fn answered_without_error(con: &mut Connection, key: &str, what: &str) {
    let reply = try_acquire(con, key, &["TOKEN", "fuzz", "WRITE", "/fuzz/new"]);
    assert!(
        reply.is_ok(),
        "{what}: ACQUIRE on the restored key: {reply:?}"
    );
}

#[test]
fn mutated_dump_payloads_never_stop_new_keys() {
    let rounds = rounds(1000);
    for seed in seeds() {
        eprintln!("fuzz_live: payload seed {seed} (replay with PATHLOCK_FUZZ_SEED={seed})");
        let (accepted, refused_for_fences) = restore_payloads(seed, rounds);
        eprintln!(
            "fuzz_live: payload seed {seed}: {rounds} RESTOREs, {accepted} accepted, \
             {refused_for_fences} refused for their fences; a new key was granted after each"
        );
        assert!(
            refused_for_fences > 0,
            "the fuzzer never reached the fence check"
        );
        assert!(accepted > 0, "the fuzzer never made an acceptable payload");
    }
}

/// One random effect, well formed or not, whose fences are drawn from `interesting_counter`.
fn random_effect(rng: &mut Rng, now_ms: u64, deadline: &str) -> Vec<Vec<u8>> {
    let key = format!("fz:e:{}", rng.below(4)).into_bytes();
    let fence = interesting_counter(rng, now_ms)
        .saturating_sub(rng.below(2))
        .to_string();
    let token = rng.pick(TOKENS).to_vec();
    let mut words: Vec<Vec<u8>> = vec![b"PATHLOCK.EFFECT".to_vec(), key];
    match rng.below(5) {
        0 | 1 => {
            words.extend([
                b"GRANT".to_vec(),
                token,
                deadline.as_bytes().to_vec(),
                fence.into_bytes(),
            ]);
            words.extend([rng.pick(MODES).to_vec(), rng.pick(PATHS).to_vec()]);
        }
        2 => words.extend([b"FENCE".to_vec(), fence.into_bytes()]),
        3 => words.extend([b"RELEASE".to_vec(), token]),
        _ => words.extend([b"EXPIRE".to_vec(), now_ms.to_string().into_bytes()]),
    }
    if rng.below(10) == 0 {
        let at = 2 + rng.below(words.len() as u64 - 2) as usize;
        words[at] = rng.pick(HOSTILE).to_vec();
    }
    words
}

fn replay_effects(seed: u64, rounds: usize) -> usize {
    let server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.conn();
    let mut rng = Rng::new(seed);
    for round in 0..rounds {
        let now = server_ms(&mut con);
        let deadline = (now + 600_000).to_string();
        let effects: Vec<u8> = (0..20)
            .flat_map(|_| {
                let words = random_effect(&mut rng, now, &deadline);
                resp(&words.iter().map(Vec::as_slice).collect::<Vec<_>>())
            })
            .collect();
        append_to_aof(&server, &effects);
        let what = format!(
            "seed {seed}, round {round}, effects {:?}",
            String::from_utf8_lossy(&effects)
        );
        let _: () = cmd("DEBUG")
            .arg("LOADAOF")
            .query(&mut con)
            .unwrap_or_else(|e| panic!("{what}: DEBUG LOADAOF failed: {e}"));
        a_new_key_grants(&mut con, &format!("fresh:{round}"), &what);
    }
    server
        .log()
        .lines()
        .filter(|line| line.contains("ERR impossible fence counter"))
        .count()
}

#[test]
fn mutated_effects_replayed_from_the_aof_never_stop_new_keys() {
    let rounds = rounds(1000) / 20;
    for seed in seeds() {
        eprintln!("fuzz_live: effect seed {seed} (replay with PATHLOCK_FUZZ_SEED={seed})");
        let refused = replay_effects(seed, rounds);
        eprintln!(
            "fuzz_live: effect seed {seed}: {} effects in {rounds} AOF replays, {refused} refusals \
             for their fences (counted once per replay); a new key was granted after each",
            rounds * 20
        );
        assert!(refused > 0, "the fuzzer never reached the fence check");
    }
}
