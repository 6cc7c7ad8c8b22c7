//! The documentation's command examples (the README's, then `docs/commands.md`'s), run in order
//! as printed against one empty server, each reply compared with the printed one as `redis-cli`
//! would print it.
//!
//! An example is a fenced block with `127.0.0.1:6379> ` prompts: each prompt's command, then the
//! reply lines up to the next prompt, comment or blank line. A `# session N` comment switches to
//! the N-th client (one connection each, for the blocking examples); a command printed without
//! a reply blocks, and the reply printed later under its session's comment is its answer. Lines
//! starting with `$ ` (the shell) and `redis-cli`'s timing of a blocking command (`(3.02s)`)
//! are not replies.
//!
//! What changes from run to run is matched by shape and kept consistent: a generated token (a
//! printed UUID) stands for the one the server generated, the same wherever it is printed again
//! (commands included); fences may start elsewhere, but each printed fence is the first one plus
//! the same offset as printed; TTLs and waiting times are integers. Everything else, notes and
//! errors included, must be exactly as printed.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;

/// The files whose examples run, in this order, as one session: the README's quick start, then
/// the command reference, which continues it.
const EXAMPLES: &[&str] = &["README.md", "docs/commands.md"];

const PROMPT: &str = "127.0.0.1:6379> ";

/// One command of an example, with the reply printed after it (empty when it blocks).
#[derive(Debug)]
struct Step {
    session: u32,
    /// `None` for a reply printed on its own: the answer to the session's blocked command.
    command: Option<String>,
    reply: Vec<String>,
    /// Where it is printed, for failure messages.
    place: String,
}

/// Every example step of `text`, in order.
fn steps(file: &str, text: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut in_block = false;
    let mut block: Vec<(usize, &str)> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            if in_block && block.iter().any(|(_, l)| l.starts_with(PROMPT)) {
                steps.extend(block_steps(file, &block));
            }
            in_block = !in_block;
            block.clear();
        } else if in_block {
            block.push((number + 1, line));
        }
    }
    steps
}

fn block_steps(file: &str, block: &[(usize, &str)]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut session = 1;
    // Whether reply lines now belong to the last step.
    let mut open = false;
    for &(number, line) in block {
        let place = format!("{file}:{number}");
        if let Some(command) = line.strip_prefix(PROMPT) {
            steps.push(Step {
                session,
                command: Some(command.to_string()),
                reply: Vec::new(),
                place,
            });
            open = true;
        } else if let Some(comment) = line.strip_prefix("# ") {
            if let Some(n) = comment.strip_prefix("session ") {
                let digits: String = n.chars().take_while(char::is_ascii_digit).collect();
                session = digits.parse().unwrap_or(1);
            }
            open = false;
        } else if line.trim().is_empty() || line.starts_with("$ ") {
            open = false;
        } else if is_timing(line) {
            continue;
        } else if open {
            if let Some(step) = steps.last_mut() {
                step.reply.push(line.to_string());
            }
        } else {
            steps.push(Step {
                session,
                command: None,
                reply: vec![line.to_string()],
                place,
            });
            open = true;
        }
    }
    steps
}

/// `redis-cli`'s time of a blocking command, e.g. `(3.02s)`.
fn is_timing(line: &str) -> bool {
    line.strip_prefix('(')
        .and_then(|l| l.strip_suffix("s)"))
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// Splits a command line as `redis-cli` does: words separated by spaces, `"..."` with the
/// escapes `\xHH`, `\n`, `\r`, `\t`, `\b`, `\a`, `\\` and `\"`, and `'...'` with `\'`.
fn split_args(line: &str) -> Vec<Vec<u8>> {
    let bytes = line.as_bytes();
    let mut args = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        if i == bytes.len() {
            break;
        }
        let mut word = Vec::new();
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' && i + 1 < bytes.len() {
                        i += 1;
                        match bytes[i] {
                            b'x' if i + 2 < bytes.len() => {
                                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                                word.push(u8::from_str_radix(hex, 16).expect("a \\x escape"));
                                i += 2;
                            }
                            b'n' => word.push(b'\n'),
                            b'r' => word.push(b'\r'),
                            b't' => word.push(b'\t'),
                            b'b' => word.push(8),
                            b'a' => word.push(7),
                            other => word.push(other),
                        }
                    } else {
                        word.push(bytes[i]);
                    }
                    i += 1;
                }
                i += 1;
            }
            b'\'' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'\'' {
                    if bytes[i] == b'\\' && bytes.get(i + 1) == Some(&b'\'') {
                        i += 1;
                    }
                    word.push(bytes[i]);
                    i += 1;
                }
                i += 1;
            }
            _ => {
                while i < bytes.len() && bytes[i] != b' ' {
                    word.push(bytes[i]);
                    i += 1;
                }
            }
        }
        args.push(word);
    }
    args
}

/// What a printed value stands for, by its place in its command's reply.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Role {
    Exact,
    Token,
    Fence,
    /// A TTL or a waiting time: any integer.
    Millis,
}

fn role(command: &str, at: &[usize]) -> Role {
    match (command, at) {
        ("PATHLOCK.ACQUIRE", [0]) => Role::Token,
        ("PATHLOCK.ACQUIRE", [1]) => Role::Fence,
        ("PATHLOCK.LOCKS" | "PATHLOCK.CHECK", [_, 2]) => Role::Token,
        ("PATHLOCK.LOCKS" | "PATHLOCK.CHECK", [_, 3]) => Role::Millis,
        ("PATHLOCK.LOCKS" | "PATHLOCK.CHECK", [_, 4]) => Role::Fence,
        ("PATHLOCK.WAITERS", [_, 0]) => Role::Token,
        ("PATHLOCK.WAITERS", [_, 2 | 3]) => Role::Millis,
        _ => Role::Exact,
    }
}

/// A reply as `redis-cli` prints it: one line per scalar, its prefix (the indexes), its text,
/// and the role of the scalar.
fn render(value: &Value, command: &str) -> Vec<(String, String, Role)> {
    let mut lines = Vec::new();
    render_into(value, command, "", &mut Vec::new(), "", &mut lines);
    lines
}

fn render_into(
    value: &Value,
    command: &str,
    first: &str,
    at: &mut Vec<usize>,
    indent: &str,
    lines: &mut Vec<(String, String, Role)>,
) {
    let scalar = match value {
        Value::Nil => "(nil)".to_string(),
        Value::Int(n) => format!("(integer) {n}"),
        Value::BulkString(bytes) => format!("\"{}\"", repr(bytes)),
        Value::SimpleString(text) => text.clone(),
        Value::Okay => "OK".to_string(),
        Value::Array(items) if items.is_empty() => "(empty array)".to_string(),
        Value::Array(items) => {
            let width = items.len().to_string().len();
            let nested = format!("{indent}{}", " ".repeat(width + 2));
            for (i, item) in items.iter().enumerate() {
                let label = format!("{:>width$}) ", i + 1);
                let prefix = if i == 0 {
                    format!("{first}{label}")
                } else {
                    format!("{indent}{label}")
                };
                at.push(i);
                render_into(item, command, &prefix, at, &nested, lines);
                at.pop();
            }
            return;
        }
        other => format!("{other:?}"),
    };
    lines.push((first.to_string(), scalar, role(command, at)));
}

/// Bytes as `redis-cli` quotes them (`sdscatrepr`).
fn repr(bytes: &[u8]) -> String {
    let mut text = String::new();
    for &b in bytes {
        match b {
            b'\\' => text.push_str("\\\\"),
            b'"' => text.push_str("\\\""),
            b'\n' => text.push_str("\\n"),
            b'\r' => text.push_str("\\r"),
            b'\t' => text.push_str("\\t"),
            7 => text.push_str("\\a"),
            8 => text.push_str("\\b"),
            0x20..=0x7e => text.push(char::from(b)),
            _ => text.push_str(&format!("\\x{b:02x}")),
        }
    }
    text
}

fn is_uuid(text: &str) -> bool {
    let text = text.trim_matches('"');
    text.len() == 36
        && text.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_digit() || ('a'..='f').contains(&c),
        })
}

fn integer(text: &str) -> Option<i64> {
    text.strip_prefix("(integer) ")?.parse().ok()
}

/// The bindings of what varies between runs, kept across every example.
#[derive(Default)]
struct Bindings {
    /// Printed generated token (with its quotes) -> the one the server generated.
    tokens: BTreeMap<String, String>,
    /// The first fence printed and the server's first, which every later pair must keep the
    /// same distance from.
    first_fence: Option<(i64, i64)>,
}

impl Bindings {
    /// Compares one printed line with one rendered scalar; an error says why they differ.
    fn matches(&mut self, printed: &str, actual: &str, role: Role) -> Result<(), String> {
        let differ = || Err(format!("printed {printed:?}, got {actual:?}"));
        match role {
            Role::Token if is_uuid(printed) => match self.tokens.get(printed) {
                Some(bound) if bound == actual => Ok(()),
                Some(_) => differ(),
                None if is_uuid(actual) && !self.tokens.values().any(|t| t == actual) => {
                    self.tokens.insert(printed.to_string(), actual.to_string());
                    Ok(())
                }
                None => differ(),
            },
            Role::Fence => {
                let (Some(printed_fence), Some(actual_fence)) = (integer(printed), integer(actual))
                else {
                    return differ();
                };
                let (first_printed, first_actual) = *self
                    .first_fence
                    .get_or_insert((printed_fence, actual_fence));
                if actual_fence - first_actual == printed_fence - first_printed {
                    Ok(())
                } else {
                    Err(format!(
                        "printed fence {printed_fence} is {} after the first printed one, the \
                         server's {actual_fence} is {} after its first",
                        printed_fence - first_printed,
                        actual_fence - first_actual
                    ))
                }
            }
            Role::Millis if integer(printed).is_some() && integer(actual).is_some() => Ok(()),
            _ if printed == actual => Ok(()),
            _ => differ(),
        }
    }

    /// A command's words with every printed generated token replaced by the server's.
    fn substitute(&self, args: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        args.into_iter()
            .map(|arg| {
                let quoted = format!("\"{}\"", String::from_utf8_lossy(&arg));
                match self.tokens.get(&quoted) {
                    Some(actual) => actual.trim_matches('"').as_bytes().to_vec(),
                    None => arg,
                }
            })
            .collect()
    }
}

/// Compares a reply with the lines printed for it.
fn compare(
    step: &Step,
    command: &str,
    reply: &redis::RedisResult<Value>,
    bindings: &mut Bindings,
) -> Result<(), String> {
    let rendered = match reply {
        Ok(value) => render(value, command),
        Err(error) => {
            let text = match (error.code(), error.detail()) {
                (Some(code), Some(detail)) => format!("(error) {code} {detail}"),
                _ => format!("(error) {error}"),
            };
            vec![(String::new(), text, Role::Exact)]
        }
    };
    if rendered.len() != step.reply.len() {
        return Err(format!(
            "{} lines printed, {} in the reply:\n{}",
            step.reply.len(),
            rendered.len(),
            rendered
                .iter()
                .map(|(prefix, text, _)| format!("{prefix}{text}"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    for (printed, (prefix, actual, role)) in step.reply.iter().zip(&rendered) {
        let Some(printed_value) = printed.strip_prefix(prefix.as_str()) else {
            return Err(format!("printed {printed:?}, got {prefix}{actual}"));
        };
        bindings.matches(printed_value, actual, *role)?;
    }
    Ok(())
}

#[test]
fn the_documented_examples_run_in_order_as_printed() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut all = Vec::new();
    for file in EXAMPLES {
        let text =
            std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        all.extend(steps(file, &text));
    }
    assert!(
        all.iter().filter(|s| s.command.is_some()).count() >= 10,
        "too few examples found: {all:?}"
    );
    let server = Server::start();
    let mut control = server.conn();
    let mut sessions: BTreeMap<u32, Connection> = BTreeMap::new();
    // The command each session has blocked on, waiting for its printed reply.
    let mut blocked: BTreeMap<u32, String> = BTreeMap::new();
    let mut bindings = Bindings::default();
    let mut ran = 0;
    for step in &all {
        let con = sessions
            .entry(step.session)
            .or_insert_with(|| server.conn());
        let (name, reply) = match &step.command {
            Some(line) => {
                let args = bindings.substitute(split_args(line));
                let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
                let mut command = cmd(&name);
                for arg in &args[1..] {
                    command.arg(arg.as_slice());
                }
                ran += 1;
                if step.reply.is_empty() {
                    // A blocking command: sent now, answered where its reply is printed.
                    let waiting = info_number(&mut control, "pathlock", "pathlock_clients_waiting");
                    con.send_packed_command(&command.get_packed_command())
                        .expect("send");
                    wait_until(Duration::from_secs(10), &step.place, || {
                        info_number(&mut control, "pathlock", "pathlock_clients_waiting") > waiting
                    });
                    assert!(blocked.insert(step.session, name).is_none());
                    continue;
                }
                (name, command.query::<Value>(con))
            }
            None => {
                let name = blocked.remove(&step.session).unwrap_or_else(|| {
                    panic!("{}: a reply printed for no blocked command", step.place)
                });
                (name, con.recv_response())
            }
        };
        if let Err(why) = compare(step, &name, &reply, &mut bindings) {
            panic!(
                "{}: {} answered otherwise than printed: {why}",
                step.place,
                step.command.as_deref().unwrap_or("the blocked command")
            );
        }
    }
    assert!(blocked.is_empty(), "never answered: {blocked:?}");
    println!("ran {ran} example commands from {EXAMPLES:?}");
}

#[test]
fn the_example_reader_splits_and_renders_as_redis_cli() {
    assert_eq!(
        split_args(r#"ACQUIRE k NOTE "a \"b\" \x00\n" 'c\'d' WRITE /A"#),
        [
            b"ACQUIRE".to_vec(),
            b"k".to_vec(),
            b"NOTE".to_vec(),
            b"a \"b\" \x00\n".to_vec(),
            b"c'd".to_vec(),
            b"WRITE".to_vec(),
            b"/A".to_vec(),
        ]
    );
    let reply = Value::Array(vec![Value::Array(vec![
        Value::BulkString(b"tok".to_vec()),
        Value::Array(vec![
            Value::BulkString(b"WRITE".to_vec()),
            Value::BulkString(b"/F".to_vec()),
        ]),
        Value::Int(3),
        Value::Nil,
    ])]);
    let lines: Vec<String> = render(&reply, "PATHLOCK.WAITERS")
        .into_iter()
        .map(|(prefix, text, _)| format!("{prefix}{text}"))
        .collect();
    assert_eq!(
        lines,
        [
            "1) 1) \"tok\"",
            "   2) 1) \"WRITE\"",
            "      2) \"/F\"",
            "   3) (integer) 3",
            "   4) (nil)",
        ]
    );
    let ten: Vec<Value> = (0..10).map(Value::Int).collect();
    let lines = render(&Value::Array(ten), "X");
    assert_eq!(lines[0].0, " 1) ");
    assert_eq!(lines[9].0, "10) ");
    assert!(is_timing("(3.02s)") && !is_timing("(integer) 3"));
    // Fences are bound by their offset: a printed sequence must be the server's.
    let mut bindings = Bindings::default();
    assert!(bindings
        .matches("(integer) 100", "(integer) 5000", Role::Fence)
        .is_ok());
    assert!(bindings
        .matches("(integer) 101", "(integer) 5001", Role::Fence)
        .is_ok());
    assert!(bindings
        .matches("(integer) 101", "(integer) 5002", Role::Fence)
        .is_err());
    let uuid = "\"0b5d3f62-3c5e-4c1e-9d1f-2f6c1a0e8b7a\"";
    let other = "\"c7e1d7b0-6a43-4a3e-b1a4-2d3c8f0c9a11\"";
    assert!(bindings.matches(uuid, other, Role::Token).is_ok());
    assert!(bindings.matches(uuid, uuid, Role::Token).is_err());
    assert!(bindings
        .matches("\"alice\"", "\"bob\"", Role::Token)
        .is_err());
}
