//! Prometheus sees pathlock through the exporter operators run beside Redis, oliver006's
//! redis_exporter, and the script `packaging/prometheus/pathlock.lua` given to its `--script`
//! option: the real exporter runs against a server with the module, and its `/metrics`, read on
//! loopback, must show every numeric field of `INFO pathlock` (whatever fields the module has,
//! not a list kept here) and follow grants, conflicts, waits, renewals, releases and expiries.
//! The Grafana dashboard beside the script must parse, and each of its queries must name only
//! metrics and fields that the exporter exported.
//!
//! Two exporters are run when present: Debian's `prometheus-redis-exporter` (1.45) and the current
//! release that `scripts/deps.sh exporter` builds into `.deps/redis_exporter/`. A missing one is
//! reported on stderr in a banner and skipped, except under CI (`CI` set), where `make test` has
//! installed both and a missing one fails the test.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::*;

/// The script operators install, as shipped.
fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/prometheus/pathlock.lua")
}

fn dashboard_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/prometheus/grafana-dashboard.json")
}

struct Flavour {
    name: &'static str,
    binary: PathBuf,
    /// Arguments beyond the address, listen address and script.
    extra: &'static [&'static str],
    /// The current exporter also reports whether the script ran (`redis_script_result`).
    reports_result: bool,
}

/// The exporters found on this machine; each missing one is announced, and fails under CI.
fn exporters() -> Vec<Flavour> {
    let debian = Path::new("/usr/bin/prometheus-redis-exporter");
    let current = Path::new(env!("CARGO_MANIFEST_DIR")).join(".deps/redis_exporter/redis_exporter");
    let candidates = [
        Flavour {
            name: "Debian's prometheus-redis-exporter",
            binary: debian.to_path_buf(),
            extra: &[],
            reports_result: false,
        },
        Flavour {
            name: "the current redis_exporter (.deps/redis_exporter)",
            binary: current,
            // The current release can run the script with EVAL_RO, which is what the docs advise.
            extra: &["--lua-script-read-only"],
            reports_result: true,
        },
    ];
    let under_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    let mut found = Vec::new();
    for flavour in candidates {
        if flavour.binary.exists() {
            found.push(flavour);
            continue;
        }
        assert!(
            !under_ci,
            "{} is missing at {} (scripts/deps.sh exporter installs it)",
            flavour.name,
            flavour.binary.display()
        );
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: tests/exporter.rs found no {} at {} (scripts/deps.sh exporter \
             installs it); that exporter was not tested ***\n",
            flavour.name,
            flavour.binary.display()
        );
    }
    found
}

/// A running exporter, killed when dropped.
struct Exporter {
    child: Child,
    port: u16,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Exporter {
    fn start(flavour: &Flavour, server: &Server) -> Exporter {
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free loopback port")
                .port();
            let mut child = Command::new(&flavour.binary)
                .arg("--redis.addr")
                .arg(format!("redis://127.0.0.1:{}", server.port))
                .arg("--web.listen-address")
                .arg(format!("127.0.0.1:{port}"))
                .arg("--script")
                .arg(script_path())
                .args(flavour.extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", flavour.binary.display()));
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(20) {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // Exited: most likely the port was taken in the meantime.
                }
                if get(port, "/metrics").is_ok() {
                    return Exporter { child, port };
                }
                sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("{} did not serve /metrics", flavour.name);
    }

    /// One scrape, as Prometheus makes it.
    fn scrape(&self) -> Scrape {
        let body = get(self.port, "/metrics").expect("GET /metrics");
        Scrape::parse(&body)
    }
}

/// `GET path` over HTTP/1.0 on loopback: the body of a 200 answer.
fn get(port: u16, path: &str) -> Result<String, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| e.to_string())?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP answer: {answer:?}"))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(format!("HTTP answer {head:?}"));
    }
    Ok(body.to_string())
}

/// What one scrape showed: the names of all metrics, the script's values by `key`, and the
/// script's result where the exporter reports one.
struct Scrape {
    names: BTreeSet<String>,
    values: BTreeMap<String, f64>,
    result: Option<f64>,
    text: String,
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut scrape = Scrape {
            names: BTreeSet::new(),
            values: BTreeMap::new(),
            result: None,
            text: text.to_string(),
        };
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            let value: f64 = value.parse().expect("a sample value");
            let name = series.split('{').next().unwrap_or(series);
            scrape.names.insert(name.to_string());
            match name {
                "redis_script_values" => {
                    let key = label(series, "key").expect("script_values has a key label");
                    scrape.values.insert(key, value);
                }
                "redis_script_result" => scrape.result = Some(value),
                _ => {}
            }
        }
        scrape
    }

    fn value(&self, field: &str) -> f64 {
        *self
            .values
            .get(field)
            .unwrap_or_else(|| panic!("the scrape has no {field}; it showed:\n{}", self.text))
    }
}

/// The value of one label in a series such as `name{a="x",key="y"}`.
fn label(series: &str, name: &str) -> Option<String> {
    let start = series.find(&format!("{name}=\""))? + name.len() + 2;
    let end = series[start..].find('"')? + start;
    Some(series[start..end].to_string())
}

/// The numeric fields of `INFO pathlock`, with their prefix, as the script exports them (a
/// dictionary field `name:a=1,b=2` as `name_a` and `name_b`).
fn info_fields(con: &mut Connection) -> BTreeMap<String, f64> {
    let text: String = cmd("INFO")
        .arg("pathlock")
        .query(con)
        .expect("INFO pathlock");
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        let Some((name, value)) = line.trim().split_once(':') else {
            continue;
        };
        if !name.starts_with("pathlock_") {
            continue;
        }
        if let Ok(number) = value.parse::<f64>() {
            fields.insert(name.to_string(), number);
            continue;
        }
        for part in value.split(',') {
            if let Some((sub, number)) = part.split_once('=') {
                if let Ok(number) = number.parse::<f64>() {
                    fields.insert(format!("{name}_{sub}"), number);
                }
            }
        }
    }
    fields
}

/// A scrape taken between two reads of `INFO pathlock`: it must export exactly the numeric
/// fields, and every field that did not move between the reads with the value INFO gave.
fn scrape_matching_info(exporter: &Exporter, con: &mut Connection) -> Scrape {
    let before = info_fields(con);
    let scrape = exporter.scrape();
    let after = info_fields(con);
    assert!(
        before.len() >= 15,
        "INFO pathlock has too few fields: {before:?}"
    );
    assert_eq!(
        scrape.values.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "the exporter must show every numeric INFO pathlock field and nothing else"
    );
    for (field, value) in &before {
        if after.get(field) == Some(value) {
            assert_eq!(scrape.value(field), *value, "{field} as scraped");
        }
    }
    scrape
}

/// The difference of each named field between two scrapes.
fn moved(before: &Scrape, after: &Scrape, fields: &[&str]) -> Vec<(String, f64)> {
    fields
        .iter()
        .map(|f| (f.to_string(), after.value(f) - before.value(f)))
        .collect()
}

fn expect_moves(before: &Scrape, after: &Scrape, expected: &[(&str, f64)]) {
    let names: Vec<&str> = expected.iter().map(|(f, _)| *f).collect();
    let expected: Vec<(String, f64)> = expected.iter().map(|(f, d)| (f.to_string(), *d)).collect();
    assert_eq!(moved(before, after, &names), expected);
}

#[test]
fn exporters_show_every_info_field_and_follow_the_work() {
    let flavours = exporters();
    if flavours.is_empty() {
        return;
    }
    let dashboard = Dashboard::load();
    for flavour in &flavours {
        let server = Server::start();
        let exporter = Exporter::start(flavour, &server);
        let mut con = server.conn();

        let idle = scrape_matching_info(&exporter, &mut con);
        if flavour.reports_result {
            assert_eq!(idle.result, Some(1.0), "{}: the script ran", flavour.name);
        }

        // A grant, then a conflict with it.
        let (token, _) = acquire(
            &mut con,
            "proj:42",
            &[
                "TTL", "600000", "NOTE", "alice", "WRITE", "/A/C", "WRITE", "/B/C",
            ],
        )
        .expect("granted");
        assert!(acquire(&mut con, "proj:42", &["WRITE", "/A/C/D/new.txt"]).is_none());
        let granted = scrape_matching_info(&exporter, &mut con);
        expect_moves(
            &idle,
            &granted,
            &[
                ("pathlock_locks", 2.0),
                ("pathlock_keys", 1.0),
                ("pathlock_total_grants", 1.0),
                ("pathlock_total_conflicts", 1.0),
                ("pathlock_total_releases", 0.0),
            ],
        );
        assert!(granted.value("pathlock_fence_mark") >= 1.0);

        // A waiter queued behind the grant, and one that gives up.
        let waiter = {
            let mut waiting = server.conn();
            std::thread::spawn(move || {
                acquire(
                    &mut waiting,
                    "proj:42",
                    &["TOKEN", "bob", "WAIT", "20000", "WRITE", "/A/C/D"],
                )
            })
        };
        wait_until(Duration::from_secs(10), "the waiter to queue", || {
            info_number(&mut con, "pathlock", "pathlock_clients_waiting") == 1
        });
        assert!(acquire(&mut con, "proj:42", &["WAIT", "50", "WRITE", "/B"]).is_none());
        let waiting = scrape_matching_info(&exporter, &mut con);
        expect_moves(
            &granted,
            &waiting,
            &[
                ("pathlock_clients_waiting", 1.0),
                ("pathlock_total_wait_timeouts", 1.0),
            ],
        );

        // A renewal, then the release that lets the waiter in.
        let renewed = renew(&mut con, "proj:42", &token, 600000);
        assert_eq!(renewed, 2);
        assert_eq!(release(&mut con, "proj:42", &token, &[]), 2);
        assert!(waiter.join().expect("waiter thread").is_some());
        let released = scrape_matching_info(&exporter, &mut con);
        expect_moves(
            &waiting,
            &released,
            &[
                ("pathlock_locks", -1.0),
                ("pathlock_clients_waiting", -1.0),
                ("pathlock_total_grants", 1.0),
                ("pathlock_total_renewals", 2.0),
                ("pathlock_total_releases", 2.0),
                ("pathlock_total_waits_granted", 1.0),
            ],
        );

        // A lease that lapses and is reclaimed by the expiry cycle.
        acquire(&mut con, "proj:7", &["TTL", "20", "WRITE", "/E"]).expect("granted");
        wait_until(
            Duration::from_secs(10),
            "the lapsed lease's reclamation",
            || info_number(&mut con, "pathlock", "pathlock_total_expirations") == 1,
        );
        let expired = scrape_matching_info(&exporter, &mut con);
        expect_moves(
            &released,
            &expired,
            &[
                ("pathlock_total_grants", 1.0),
                ("pathlock_total_expirations", 1.0),
            ],
        );

        // The script declares that it writes nothing, so a server out of memory still runs it.
        let _: () = cmd("CONFIG")
            .arg(&["SET", "maxmemory", "1"])
            .query(&mut con)
            .expect("CONFIG SET");
        let crowded = scrape_matching_info(&exporter, &mut con);
        assert_eq!(
            crowded.value("pathlock_locks"),
            expired.value("pathlock_locks")
        );
        if flavour.reports_result {
            assert_eq!(
                crowded.result,
                Some(1.0),
                "{}: the script ran",
                flavour.name
            );
        }
        let _: () = cmd("CONFIG")
            .arg(&["SET", "maxmemory", "0"])
            .query(&mut con)
            .expect("CONFIG SET");

        dashboard.check_against(&expired, flavour.name);
        dashboard.check_charts(expired.values.keys(), flavour.name);
        println!(
            "{}: {} pathlock fields exported, e.g. {}",
            flavour.name,
            expired.values.len(),
            expired
                .text
                .lines()
                .find(|l| l.contains("key=\"pathlock_total_grants\""))
                .unwrap_or("")
        );
    }
}

/// Every numeric field of `INFO pathlock` has a panel of the dashboard: whatever fields the
/// module has, read from a server, so a field added to `src/info.rs` fails here until it is
/// charted. Needs no exporter, so it also runs where none is installed; the exporters' test
/// checks the same of each exporter's scrape.
#[test]
fn the_dashboard_charts_every_field_of_info() {
    let server = Server::start();
    let fields = info_fields(&mut server.conn());
    Dashboard::load().check_charts(fields.keys(), "INFO pathlock");
}

/// The script's parsing, on a made-up `INFO` answer: a plain number, a dictionary field of
/// numbers (and a word, left out), a word, and a line of another module, through the real
/// server's Lua. `redis.call` is shadowed by a local table, so the shipped text runs as it is
/// (less its shebang line, which must be the first).
#[test]
fn script_reads_numbers_and_dictionaries_and_leaves_out_words() {
    let server = Server::start();
    let mut con = server.conn();
    let text = std::fs::read_to_string(script_path()).expect("the script");
    let (shebang, body) = text.split_once('\n').expect("a shebang line");
    assert_eq!(shebang, "#!lua flags=no-writes");
    let fake = "# pathlock\r\npathlock_locks:3\r\npathlock_ticks:le_1ms=5,le_2ms=x,over=2\r\n\
                pathlock_mode:fast\r\nother_x:9\r\n";
    let script = format!(
        "local redis = {{call = function() return \"{}\" end}}\n{body}",
        fake.replace('\r', "\\r").replace('\n', "\\n")
    );
    let pairs: Vec<String> = cmd("EVAL")
        .arg(script)
        .arg(0)
        .query(&mut con)
        .expect("EVAL");
    assert_eq!(
        pairs,
        [
            "pathlock_locks",
            "3",
            "pathlock_ticks_le_1ms",
            "5",
            "pathlock_ticks_over",
            "2"
        ]
    );
    // And the shipped script on a server without pathlock returns nothing, which the exporter
    // reports as an empty result rather than an error.
    let bare = Server::start_without_module(&[]);
    let pairs: Vec<String> = cmd("EVAL")
        .arg(&text)
        .arg(0)
        .query(&mut bare.conn())
        .expect("EVAL");
    assert!(pairs.is_empty());
}

/// The Grafana dashboard's queries.
struct Dashboard {
    exprs: Vec<String>,
    /// The fields that a panel charts by name (`key="..."`): every panel's but the table of
    /// every field, whose pattern would match any field without charting it.
    charted: BTreeSet<String>,
}

impl Dashboard {
    fn load() -> Dashboard {
        let text = std::fs::read_to_string(dashboard_path()).expect("the dashboard");
        let json: serde_json::Value = serde_json::from_str(&text).expect("the dashboard parses");
        let panels = json["panels"].as_array().expect("panels");
        let mut exprs = Vec::new();
        let mut charted = BTreeSet::new();
        for panel in panels {
            if panel["type"] == "row" {
                continue;
            }
            let targets = panel["targets"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
            for target in targets {
                let expr = target["expr"].as_str().expect("a PromQL expr");
                if panel["type"] != "table" {
                    let mut rest = expr;
                    while let Some(at) = rest.find("key=\"") {
                        rest = &rest[at..];
                        charted.extend(label(rest, "key"));
                        rest = &rest[5..];
                    }
                }
                exprs.push(expr.to_string());
            }
        }
        // The instance picker's query too.
        for variable in json["templating"]["list"].as_array().expect("templating") {
            exprs.push(
                variable["query"]["query"]
                    .as_str()
                    .expect("a query")
                    .to_string(),
            );
        }
        Dashboard { exprs, charted }
    }

    /// Every field of `fields` (as the exporter names them) is charted by some panel.
    fn check_charts<'a>(&self, fields: impl IntoIterator<Item = &'a String>, source: &str) {
        let fields: Vec<&String> = fields.into_iter().collect();
        assert!(
            fields.iter().any(|f| *f == "pathlock_locks"),
            "{source}: no pathlock field at all: {fields:?}"
        );
        for field in fields {
            assert!(
                self.charted.contains(field),
                "{source}: the dashboard charts no {field} (only the table of every field shows it)"
            );
        }
    }

    /// Every metric a query selects was scraped, every `key="..."` it names was exported, and
    /// every `key=~"..."` pattern matches an exported key.
    fn check_against(&self, scrape: &Scrape, exporter: &str) {
        for expr in &self.exprs {
            let mut rest = expr.as_str();
            let mut selectors = 0;
            while let Some(open) = rest.find('{') {
                let name: String = rest[..open]
                    .chars()
                    .rev()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                let close = rest[open..].find('}').expect("a closed selector") + open;
                let matchers = &rest[open + 1..close];
                assert!(
                    scrape.names.contains(&name),
                    "{exporter}: the dashboard's query {expr:?} selects {name}, which was not exported"
                );
                if let Some(key) = label(matchers, "key") {
                    assert!(
                        scrape.values.contains_key(&key),
                        "{exporter}: the dashboard's query {expr:?} names the field {key}, which was not exported"
                    );
                }
                if let Some(pattern) = label_re(matchers) {
                    let prefix = pattern.trim_end_matches(".*").trim_end_matches(".+");
                    assert!(
                        !prefix.contains(['.', '*', '(', '|', '[']),
                        "the dashboard's key patterns are prefixes (name.*): {pattern:?}"
                    );
                    assert!(
                        scrape.values.keys().any(|k| k.starts_with(prefix)),
                        "{exporter}: the dashboard's query {expr:?} matches no exported field"
                    );
                }
                selectors += 1;
                rest = &rest[close + 1..];
            }
            assert!(
                selectors > 0,
                "the query {expr:?} selects no metric by name"
            );
        }
    }
}

/// The pattern of a `key=~"..."` matcher.
fn label_re(matchers: &str) -> Option<String> {
    let start = matchers.find("key=~\"")? + 6;
    let end = matchers[start..].find('"')? + start;
    Some(matchers[start..end].to_string())
}
