//! The module's three byte-facing surfaces, run without a server, for the fuzz targets in
//! `fuzz/` and for the unit tests that replay their corpus and every crasher found.
//!
//! * [`command`]: a client's argument vector through the command handlers themselves, found in
//!   the commands' table and run over projects in memory (`store::Memory`, the other side of the
//!   storage seam from Redis), ending with the conversion that redis-module applies when it
//!   writes the reply;
//! * [`rdb`]: an RDB (or `RESTORE`) payload through the engine's decoder;
//! * [`effect`]: `PATHLOCK.EFFECT` arguments as a replica or an AOF replay receives them.
//!
//! Each panics, as a fuzz target must, when a promise breaks: a reply that redis-module could not
//! write, an error that is not `ERR ...` printable ASCII, an engine whose indexes disagree, or a
//! round trip that changes what it carries. Built only for tests and with the `system-alloc`
//! feature, never into the module Redis loads.
//!
//! Level 8: imports `commands`, `effects`, `store`.
//! Called by the fuzz targets
//! and its own unit tests.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;

use pathlock_core::persist::{self, ByteSink, ByteSource};
use pathlock_core::{LockTable, Path, Project};
use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::commands::{self, Command, COMMANDS};
use crate::effects::Effect;
use crate::store::Memory;

/// Splits fuzz input into records of `[command byte, clock step in ms, argc, (len, bytes)*]`.
/// Every input decodes to something; a record cut short takes what is there.
fn records(data: &[u8]) -> Vec<(u8, u64, Vec<&[u8]>)> {
    let mut records = Vec::new();
    let mut rest = data;
    while let [command, step, argc, tail @ ..] = rest {
        rest = tail;
        let mut words = Vec::new();
        for _ in 0..(*argc % 16) {
            let Some((&len, tail)) = rest.split_first() else {
                break;
            };
            let len = usize::from(len).min(tail.len());
            let (word, tail) = tail.split_at(len);
            words.push(word);
            rest = tail;
        }
        records.push((*command, u64::from(*step), words));
    }
    records
}

/// Runs a sequence of commands, as records, against projects held in memory: each record's
/// first byte picks a row of `commands::COMMANDS`, whose handler runs over `store::Memory` as
/// it runs over Redis, through the same arity check, `change` (lazy expiry, replication of what
/// it reclaimed, the fence mark) and reply.
pub fn command(data: &[u8]) {
    let projects = RefCell::new(HashMap::new());
    let mut now = 1_700_000_000_000;
    for (command, step, words) in records(data) {
        now += step;
        let command = &COMMANDS[usize::from(command) % COMMANDS.len()];
        let result = run(&projects, now, command, &words);
        check_reply(&result);
        for project in projects.borrow().values() {
            if let Err(problem) = project.locks().check_integrity() {
                panic!(
                    "{} left a table whose indexes disagree: {problem}",
                    command.name.to_string_lossy()
                );
            }
        }
    }
}

/// One command, as Redis runs it; `words` are its arguments after its name, the key first.
fn run(
    projects: &RefCell<HashMap<Vec<u8>, Project>>,
    now: u64,
    command: &Command,
    words: &[&[u8]],
) -> RedisResult {
    let argv: Vec<&[u8]> = std::iter::once(command.name.to_bytes())
        .chain(words.iter().copied())
        .collect();
    let memory = Memory {
        projects,
        key: words.first().copied().unwrap_or_default(),
        now,
    };
    commands::run_in_memory(command, &memory, &argv)
}

/// Writes nothing, but converts every part of a reply exactly as redis-module's
/// `Context::reply` does before it calls Redis, so a reply it would panic on panics here.
pub fn check_reply(result: &RedisResult) {
    match result {
        Ok(value) => check_value(value),
        Err(RedisError::WrongArity) => {}
        Err(error) => {
            let text = error.to_string();
            drop(Context::str_as_legal_resp_string(&text));
            assert!(
                text.starts_with("ERR ") || text.starts_with("WRONGTYPE "),
                "an error reply must name its kind: {text:?}"
            );
            assert!(
                text.bytes().all(|b| (0x20..=0x7e).contains(&b)),
                "an error reply must be printable ASCII: {text:?}"
            );
        }
    }
}

fn check_value(value: &RedisValue) {
    match value {
        RedisValue::SimpleString(text) => {
            CString::new(text.as_str()).expect("a simple string without NUL");
        }
        RedisValue::SimpleStringStatic(text) => {
            CString::new(*text).expect("a simple string without NUL");
        }
        RedisValue::StaticError(text) => drop(Context::str_as_legal_resp_string(text)),
        RedisValue::Array(items) => items.iter().for_each(check_value),
        _ => {}
    }
}

/// Decodes an RDB payload (in `persist::ByteSource`'s framing), as each encoding version that
/// a server may load. A payload that decodes must give a consistent table that encodes back to
/// the same items (in the current version) and decodes again to the same locks.
pub fn rdb(data: &[u8]) {
    for version in 1..=persist::VERSION {
        if let Ok(table) = persist::decode_version(&mut ByteSource::new(data), version) {
            rdb_round_trip(&table);
        }
    }
}

fn rdb_round_trip(table: &LockTable) {
    if let Err(problem) = table.check_integrity() {
        panic!("a decoded table whose indexes disagree: {problem}");
    }
    let encoded = encode(table);
    let again = persist::decode(&mut ByteSource::new(&encoded))
        .unwrap_or_else(|e| panic!("a table's own encoding refused: {e}"));
    assert_eq!(
        encode(&again),
        encoded,
        "a decode-encode round trip changed the payload"
    );
    // Listing walks the whole tree, as LOCKS, DEBUG DIGEST and AOF rewrites do; at time 0 it
    // shows every lock but those whose deadline is 0.
    let live = table.iter().filter(|lock| lock.deadline > 0).count();
    assert_eq!(table.locks(0, &Path::root()).len(), live);
}

fn encode(table: &LockTable) -> Vec<u8> {
    let mut sink = ByteSink::default();
    // At time 0 every lock is live but those whose deadline is 0, which a payload may hold.
    persist::encode(table, 0, &mut sink);
    sink.bytes
}

/// Applies a sequence of effects (records as for [`command`]; the command byte is ignored and
/// the words start after the key) to one project, as a replica or an AOF replay does. An effect
/// that parses must survive its own encoding unchanged.
pub fn effect(data: &[u8]) {
    let mut project = Project::new();
    for (_, _, words) in records(data) {
        let effect = match Effect::parse(&words) {
            Ok(effect) => effect,
            Err(error) => {
                check_reply(&Err(error.into()));
                continue;
            }
        };
        let encoded = effect.words();
        let encoded: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
        let again = Effect::parse(&encoded)
            .unwrap_or_else(|e| panic!("an effect's own words refused: {e}"));
        assert_eq!(
            again.words(),
            effect.words(),
            "an effect changed in a round trip"
        );
        effect.apply(&mut project);
        if let Err(problem) = project.locks().check_integrity() {
            panic!("{effect:?} left a table whose indexes disagree: {problem}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    /// Every input under `fuzz/corpus/<target>` and `fuzz/regressions/<target>`, by name.
    fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz");
        let mut inputs = Vec::new();
        for folder in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(folder).join(target)) else {
                continue;
            };
            for entry in entries.flatten() {
                if let Ok(bytes) = std::fs::read(entry.path()) {
                    inputs.push((entry.path(), bytes));
                }
            }
        }
        inputs.sort();
        inputs
    }

    fn replay(target: &str, run: fn(&[u8])) {
        let inputs = inputs(target);
        assert!(
            !inputs.is_empty(),
            "no corpus for the {target} fuzz target under fuzz/"
        );
        for (path, bytes) in &inputs {
            let outcome = std::panic::catch_unwind(|| run(bytes));
            assert!(
                outcome.is_ok(),
                "{} fails the {target} target",
                path.display()
            );
        }
        eprintln!("replayed {} inputs of the {target} target", inputs.len());
    }

    #[test]
    fn the_command_corpus_and_its_crashers_replay_cleanly() {
        replay("command", super::command);
    }

    #[test]
    fn the_rdb_corpus_and_its_crashers_replay_cleanly() {
        replay("rdb", super::rdb);
    }

    #[test]
    fn the_effect_corpus_and_its_crashers_replay_cleanly() {
        replay("effect", super::effect);
    }
}

#[cfg(test)]
mod checks {
    use redis_module::RedisError;

    /// The check must fail exactly where redis-module would abort: U+0100 turns into a NUL in
    /// its conversion of an error reply.
    #[test]
    #[should_panic]
    fn check_reply_panics_where_redis_module_would_abort() {
        super::check_reply(&Err(RedisError::String(
            "ERR invalid mode '\u{100}'".into(),
        )));
    }

    #[test]
    fn the_two_byte_mode_is_answered_with_an_escaped_error() {
        let result = super::run(
            &Default::default(),
            0,
            super::COMMANDS
                .iter()
                .find(|c| c.name == c"PATHLOCK.ACQUIRE")
                .expect("ACQUIRE is a command"),
            &[b"k", "\u{100}".as_bytes(), b"/a"],
        );
        super::check_reply(&result);
        let Err(error) = result else {
            panic!("an invalid mode was granted")
        };
        assert!(error.to_string().contains("\\xc4\\x80"), "{error}");
    }
}
