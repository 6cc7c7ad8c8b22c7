//! The command reference, `docs/commands.md`, held to what the server says of the commands
//! (`COMMAND DOCS`), both ways, as RedisJSON holds its `commands.json`:
//!
//! * every command the module registers has a section (`## PATHLOCK.X`), and every section is a
//!   command the module registers;
//! * each section's table of arguments (`| argument | token | type | meaning |`, one row per
//!   argument, nested ones named `block.argument`) lists exactly the arguments `COMMAND DOCS`
//!   gives: names, tokens, types and flags;
//! * the syntax line under each heading names every token of the command and no other
//!   keyword (a choice of tokens may be shown by its name: `mode` for `READ` or `WRITE`);
//! * the table of flags, key access and ACL categories is what `COMMAND INFO` gives (the ACL
//!   categories where the server has module categories: not on Redis 7.0);
//! * the README's table of commands shows each command a client sends with that same syntax.
//!
//! And what the server is told of each command, held to what clients and proxies rely on
//! (`src/command_docs.rs` declares it all): the arguments `COMMAND DOCS` names, the key spec's
//! access and the flags `COMMAND INFO` shows, the key `COMMAND GETKEYS` finds, the summary and
//! complexity, and the arity the server checks before the module is called. What ACL users may
//! do with those declarations is in `acl.rs`.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::*;

/// One argument as a row of a section's table shows it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Arg {
    /// The argument's name, after its enclosing blocks' names and a dot.
    name: String,
    token: Option<String>,
    kind: String,
    /// `optional`, `multiple`, ..., sorted.
    flags: Vec<String>,
}

impl std::fmt::Display for Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kind = vec![self.kind.clone()];
        kind.extend(self.flags.iter().cloned());
        write!(
            f,
            "| `{}` | {} | {} |",
            self.name,
            self.token
                .as_deref()
                .map(|t| format!("`{t}`"))
                .unwrap_or_default(),
            kind.join(", ")
        )
    }
}

/// A command as a document shows it: its syntax line and its arguments.
#[derive(Debug, Default)]
struct Documented {
    syntax: String,
    args: Vec<Arg>,
    /// Whether its summary says it is internal (no client sends it).
    internal: bool,
}

const TABLE_HEADER: &str = "| argument | token | type | meaning |";

fn cell(text: &str) -> String {
    text.trim().trim_matches('`').to_string()
}

/// The sections of `docs/commands.md`: each `## PATHLOCK.X` heading, the first line of the
/// code block under it, and the rows of its table of arguments.
fn sections(text: &str) -> BTreeMap<String, Documented> {
    let mut found: BTreeMap<String, Documented> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut in_code = false;
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            if let Some(doc) = current.as_ref().and_then(|c| found.get_mut(c)) {
                if doc.syntax.is_empty() {
                    doc.syntax = line.trim().to_string();
                }
            }
            continue;
        }
        if let Some(heading) = line.strip_prefix("## ") {
            current = heading
                .starts_with("PATHLOCK.")
                .then(|| heading.trim().to_string());
            if let Some(name) = &current {
                assert!(
                    found.insert(name.clone(), Documented::default()).is_none(),
                    "{name} has two sections"
                );
            }
            in_table = false;
            continue;
        }
        let Some(doc) = current.as_ref().and_then(|c| found.get_mut(c)) else {
            continue;
        };
        if line.trim() == TABLE_HEADER {
            assert!(
                doc.args.is_empty(),
                "two tables of arguments in one section"
            );
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
        if cells.iter().all(|c| c.trim().chars().all(|ch| ch == '-')) {
            continue;
        }
        assert!(cells.len() >= 3, "a row of arguments: {line}");
        let token = cell(cells[1]);
        let mut kind = cells[2].split(',').map(|w| w.trim().to_string());
        let mut arg = Arg {
            name: cell(cells[0]),
            token: (!token.is_empty()).then_some(token),
            kind: kind.next().unwrap_or_default(),
            flags: kind.collect(),
        };
        arg.flags.sort();
        doc.args.push(arg);
    }
    found
}

/// A reply's map, whether the server sent it as a map (RESP3) or as a flat array of pairs.
fn pairs(value: &Value) -> Vec<(String, Value)> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("a name in COMMAND DOCS: {other:?}"),
    };
    match value {
        Value::Map(entries) => entries.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        Value::Array(items) => items
            .chunks(2)
            .map(|pair| (text(&pair[0]), pair[1].clone()))
            .collect(),
        other => panic!("a map in COMMAND DOCS: {other:?}"),
    }
}

fn text_of(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("a string in COMMAND DOCS: {other:?}"),
    }
}

/// The arguments of a command's docs, nested ones after their block's name and a dot.
fn flatten(arguments: &Value, prefix: &str, out: &mut Vec<Arg>) {
    let Value::Array(list) = arguments else {
        panic!("arguments in COMMAND DOCS: {arguments:?}");
    };
    for argument in list {
        let fields: BTreeMap<String, Value> = pairs(argument).into_iter().collect();
        let name = format!("{prefix}{}", text_of(&fields["name"]));
        let mut flags: Vec<String> = match fields.get("flags") {
            Some(Value::Array(flags)) => flags.iter().map(text_of).collect(),
            Some(other) => panic!("flags in COMMAND DOCS: {other:?}"),
            None => Vec::new(),
        };
        flags.sort();
        out.push(Arg {
            name: name.clone(),
            token: fields.get("token").map(text_of),
            kind: text_of(&fields["type"]),
            flags,
        });
        if let Some(nested) = fields.get("arguments") {
            flatten(nested, &format!("{name}."), out);
        }
    }
}

/// The module's commands as the server describes them.
fn served(con: &mut Connection) -> BTreeMap<String, Documented> {
    let docs: Value = cmd("COMMAND").arg("DOCS").query(con).expect("COMMAND DOCS");
    let mut found = BTreeMap::new();
    for (name, doc) in pairs(&docs) {
        let fields: BTreeMap<String, Value> = pairs(&doc).into_iter().collect();
        if fields.get("module").map(text_of).as_deref() != Some("pathlock") {
            continue;
        }
        let mut args = Vec::new();
        if let Some(arguments) = fields.get("arguments") {
            flatten(arguments, "", &mut args);
        }
        let summary = fields.get("summary").map(text_of).unwrap_or_default();
        found.insert(
            name.to_ascii_uppercase(),
            Documented {
                syntax: String::new(),
                args,
                internal: summary.starts_with("Internal"),
            },
        );
    }
    found
}

/// The last part of a nested argument's name.
fn last(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// The keywords of a syntax line: its words in capitals, brackets and ellipses aside.
fn keywords(syntax: &str) -> BTreeSet<String> {
    syntax
        .split(|c: char| c.is_whitespace() || "[]|".contains(c))
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_uppercase()))
        .map(str::to_string)
        .collect()
}

const FLAGS_HEADER: &str =
    "| Command | Flags | Key access | ACL categories (Redis 7.2+, Valkey 8+) |";

/// What a command is declared to be: its flags (as `COMMAND INFO` spells them), its key's
/// access, and its ACL categories.
#[derive(Debug, PartialEq, Eq)]
struct Declared {
    flags: BTreeSet<String>,
    access: String,
    categories: BTreeSet<String>,
}

/// The rows of the reference's table of flags, key access and ACL categories, by command.
fn declared_in(text: &str) -> BTreeMap<String, Declared> {
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.trim() == FLAGS_HEADER {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            if !rows.is_empty() {
                break;
            }
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
        assert_eq!(cells.len(), 4, "a row of flags: {line}");
        let words = |cell: &str| -> BTreeSet<String> {
            cell.split('(')
                .next()
                .unwrap_or_default()
                .replace('`', "")
                .split_whitespace()
                .map(|w| w.replace("deny-oom", "denyoom"))
                .collect()
        };
        rows.insert(
            cell(cells[0]),
            Declared {
                flags: words(cells[1]),
                access: cell(cells[2]),
                categories: words(cells[3]),
            },
        );
    }
    rows
}

/// What `COMMAND INFO` says of a command.
fn declared_by(con: &mut Connection, name: &str) -> Declared {
    let info: Value = cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query(con)
        .expect("COMMAND INFO");
    let Value::Array(commands) = info else {
        panic!("COMMAND INFO {name}: {info:?}");
    };
    let Some(Value::Array(fields)) = commands.first() else {
        panic!("COMMAND INFO {name}: {commands:?}");
    };
    let strings = |value: &Value| -> BTreeSet<String> {
        match value {
            Value::Array(items) => items.iter().map(text_of).collect(),
            Value::Set(items) => items.iter().map(text_of).collect(),
            other => panic!("a list in COMMAND INFO: {other:?}"),
        }
    };
    let mut flags = strings(&fields[2]);
    flags.remove("module");
    let categories = strings(&fields[6]);
    let Value::Array(specs) = &fields[8] else {
        panic!("key specs of {name}: {:?}", fields[8]);
    };
    assert_eq!(specs.len(), 1, "{name} has one key spec");
    let spec: BTreeMap<String, Value> = pairs(&specs[0]).into_iter().collect();
    let Value::Array(access) = &spec["flags"] else {
        panic!("key spec flags of {name}: {spec:?}");
    };
    Declared {
        flags,
        access: access.iter().map(text_of).collect::<Vec<_>>().join(" "),
        categories,
    }
}

#[test]
fn the_command_reference_is_what_the_server_says() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let reference =
        std::fs::read_to_string(root.join("docs/commands.md")).expect("docs/commands.md");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let documented = sections(&reference);
    let server = Server::start();
    let served = served(&mut server.conn());
    assert!(
        served.len() >= 7,
        "the module's commands in COMMAND DOCS: {:?}",
        served.keys()
    );

    let mut problems = Vec::new();
    let declared = declared_in(&reference);
    let mut con = server.conn();
    for name in served.keys() {
        let Some(row) = declared.get(name) else {
            problems.push(format!(
                "{name} has no row in the table of flags and ACL categories"
            ));
            continue;
        };
        let mut actual = declared_by(&mut con, name);
        if actual.categories.is_empty() {
            // No module ACL categories on this server (Redis 7.0).
            actual.categories.clone_from(&row.categories);
        }
        if &actual != row {
            problems.push(format!(
                "{name}: the table of flags says {row:?}, COMMAND INFO {actual:?}"
            ));
        }
    }
    for name in declared.keys().filter(|n| !served.contains_key(*n)) {
        problems.push(format!(
            "the table of flags has a row for {name}, which is not served"
        ));
    }
    for name in served.keys().filter(|n| !documented.contains_key(*n)) {
        problems.push(format!(
            "{name} is served but has no section in docs/commands.md"
        ));
    }
    for name in documented.keys().filter(|n| !served.contains_key(*n)) {
        problems.push(format!(
            "docs/commands.md has a section for {name}, which is not served"
        ));
    }
    for (name, served) in &served {
        let Some(doc) = documented.get(name) else {
            continue;
        };
        let mut wanted = served.args.clone();
        wanted.sort();
        let mut shown = doc.args.clone();
        shown.sort();
        for arg in wanted.iter().filter(|a| !shown.contains(a)) {
            problems.push(format!(
                "{name}: COMMAND DOCS has the argument {arg}, the table does not"
            ));
        }
        for arg in shown.iter().filter(|a| !wanted.contains(a)) {
            problems.push(format!(
                "{name}: the table has the argument {arg}, COMMAND DOCS does not"
            ));
        }
        if !doc.syntax.starts_with(&format!("{name} ")) {
            problems.push(format!(
                "{name}: the syntax line under its heading is {:?}",
                doc.syntax
            ));
        }
        // A choice of tokens may be shown by its name (`mode` for `READ` or `WRITE`), its
        // tokens then listed in the table only.
        let named: Vec<&Arg> = served
            .args
            .iter()
            .filter(|a| a.kind == "oneof" && doc.syntax.split(' ').any(|w| w == last(&a.name)))
            .collect();
        let tokens: BTreeSet<String> = served
            .args
            .iter()
            .filter(|a| {
                !named
                    .iter()
                    .any(|n| a.name.starts_with(&format!("{}.", n.name)))
            })
            .filter_map(|a| a.token.clone())
            .collect();
        let words = keywords(&doc.syntax);
        if words != tokens {
            problems.push(format!(
                "{name}: the syntax line names the keywords {words:?}, COMMAND DOCS the tokens {tokens:?}"
            ));
        }
        if !served.internal && !readme.contains(&format!("`{}`", doc.syntax)) {
            problems.push(format!(
                "{name}: the README's table of commands does not show `{}`",
                doc.syntax
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/commands.md and COMMAND DOCS differ:\n{}",
        problems.join("\n")
    );
    println!(
        "{} commands, {} arguments, as documented",
        served.len(),
        served.values().map(|d| d.args.len()).sum::<usize>()
    );
}

#[test]
fn command_docs_describe_every_argument_and_the_key_access() {
    let server = Server::start();
    let mut con = server.conn();
    let served = served(&mut con);
    for (name, arguments, access) in [
        (
            "PATHLOCK.ACQUIRE",
            &["key", "token", "ttl", "wait", "note", "request"][..],
            "RW",
        ),
        ("PATHLOCK.RELEASE", &["key", "token", "path"][..], "RW"),
        ("PATHLOCK.RENEW", &["key", "token", "ms"][..], "RW"),
        ("PATHLOCK.LOCKS", &["key", "path", "token"][..], "RO"),
        ("PATHLOCK.CHECK", &["key", "token", "request"][..], "RO"),
        ("PATHLOCK.WAITERS", &["key", "path"][..], "RO"),
    ] {
        // The top-level arguments, in order; nested ones are held to the reference above.
        let top: Vec<&str> = served[name]
            .args
            .iter()
            .map(|a| a.name.as_str())
            .filter(|a| !a.contains('.'))
            .collect();
        assert_eq!(top, arguments, "{name}: its arguments in COMMAND DOCS");
        let declared = declared_by(&mut con, name);
        let flags: BTreeSet<&str> = declared.access.split(' ').collect();
        assert!(
            flags.contains(access) && flags.contains("access"),
            "{name}: the key spec's flags are {:?}",
            declared.access
        );
    }
}

#[test]
fn commands_declare_their_flags_and_key_position() {
    let server = Server::start();
    let mut con = server.conn();
    let key_of = |con: &mut Connection, name: &str, args: &[&str]| -> Vec<String> {
        cmd("COMMAND")
            .arg(&["GETKEYS", name, "proj:7"])
            .arg(args)
            .query(con)
            .expect("COMMAND GETKEYS")
    };
    for (name, flag, args) in [
        ("pathlock.acquire", "denyoom", &["WRITE", "/A"][..]),
        ("pathlock.release", "write", &["token"][..]),
        ("pathlock.renew", "write", &["token", "100"][..]),
    ] {
        let declared = declared_by(&mut con, name);
        assert!(
            declared.flags.contains(flag) && declared.flags.contains("write"),
            "{name}: {declared:?}"
        );
        assert_eq!(key_of(&mut con, name, args), ["proj:7"]);
    }
    for (name, args) in [
        ("pathlock.locks", &["/A", "TOKEN", "t"][..]),
        ("pathlock.check", &["READ", "/A"][..]),
        ("pathlock.waiters", &["/A"][..]),
    ] {
        let declared = declared_by(&mut con, name);
        assert!(
            declared.flags.contains("readonly") && !declared.flags.contains("write"),
            "{name}: {declared:?}"
        );
        assert_eq!(key_of(&mut con, name, args), ["proj:7"]);
    }
}

#[test]
fn command_docs_and_arity_come_from_the_module() {
    let server = Server::start();
    let mut con = server.conn();
    let docs: Value = cmd("COMMAND")
        .arg(&["DOCS", "pathlock.acquire"])
        .query(&mut con)
        .expect("COMMAND DOCS");
    let (_, doc) = pairs(&docs)
        .into_iter()
        .next()
        .expect("the docs of PATHLOCK.ACQUIRE");
    let fields: BTreeMap<String, Value> = pairs(&doc).into_iter().collect();
    let summary = fields.get("summary").map(text_of).unwrap_or_default();
    assert!(summary.contains("all or nothing"), "{summary}");
    let complexity = fields.get("complexity").map(text_of).unwrap_or_default();
    assert!(!complexity.is_empty(), "no complexity: {fields:?}");
    let error = error_from(&mut con, &[b"PATHLOCK.LOCKS"]);
    assert!(
        error.starts_with("ERR wrong number of arguments"),
        "{error}"
    );
}

#[test]
fn the_reference_reader_finds_sections_tables_and_syntax() {
    let text = "\
# x

## PATHLOCK.ONE

```
PATHLOCK.ONE key [TOKEN token] mode path [mode path ...]
```

| argument | token | type | meaning |
|---|---|---|---|
| `key` | | key | the key |
| `token` | `TOKEN` | string, optional | who |
| `request` | | block, multiple | a pair |

Not a row.

## Not a command

| argument | token | type | meaning |
|---|---|---|---|
| `ignored` | | string | |
";
    let found = sections(text);
    assert_eq!(found.keys().collect::<Vec<_>>(), ["PATHLOCK.ONE"]);
    let one = &found["PATHLOCK.ONE"];
    assert_eq!(
        one.syntax,
        "PATHLOCK.ONE key [TOKEN token] mode path [mode path ...]"
    );
    assert_eq!(
        one.args[1],
        Arg {
            name: "token".into(),
            token: Some("TOKEN".into()),
            kind: "string".into(),
            flags: vec!["optional".into()],
        }
    );
    assert_eq!(one.args[2].flags, ["multiple"]);
    assert_eq!(one.args.len(), 3);
    // The command's own name is not a keyword: it has a dot.
    assert_eq!(keywords(&one.syntax), BTreeSet::from(["TOKEN".to_string()]));
    assert_eq!(
        keywords("PATHLOCK.X key [TTL ms] READ|WRITE path"),
        BTreeSet::from(["TTL".to_string(), "READ".into(), "WRITE".into()])
    );
}
