//! A good citizen of the server: the module leaves a key's LRU/LFU clock (what `OBJECT IDLETIME`
//! and `OBJECT FREQ` show, and what `maxmemory` eviction reads) alone when it only looks at the
//! key, and an idle server with the module loaded wakes no more often than one without it.
//! Redis's own test suite checks the same things (`RESTORE can set LRU`, `stats: instantaneous
//! metrics`); `make test-redis-suite` runs it with the module.

use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::*;

fn config_set(con: &mut Connection, name: &str, value: &str) {
    let _: () = cmd("CONFIG")
        .arg(&["SET", name, value])
        .query(con)
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

fn object(con: &mut Connection, what: &str, key: &str) -> i64 {
    cmd("OBJECT")
        .arg(&[what, key])
        .query(con)
        .unwrap_or_else(|e| panic!("OBJECT {what} {key}: {e}"))
}

/// Gives `key` its own value back with `RESTORE ... IDLETIME` or `FREQ` (`clock`), the one way a
/// client sets the clock, and through the `restore` keyspace event the module listens to.
fn restore_with(con: &mut Connection, key: &str, clock: &[&str]) {
    let payload: Vec<u8> = cmd("DUMP").arg(key).query(con).expect("DUMP");
    let _: () = cmd("RESTORE")
        .arg(key)
        .arg(0)
        .arg(payload)
        .arg("REPLACE")
        .arg(clock)
        .query(con)
        .expect("RESTORE");
}

/// Everything that looks at the keys without a client writing them: the reading commands, the
/// `restore` and `loaded` events, the expiry cycle reclaiming a lock in its timer.
fn look_everywhere(con: &mut Connection, clock: &[&str]) {
    for key in ["plain", "proj:1", "proj:2"] {
        restore_with(con, key, clock);
    }
    let _: Value = cmd("PATHLOCK.LOCKS")
        .arg("proj:1")
        .query(con)
        .expect("LOCKS");
    let _: Value = cmd("PATHLOCK.LOCKS")
        .arg(&["proj:1", "/A"])
        .query(con)
        .expect("LOCKS under a path");
    let _: Value = cmd("PATHLOCK.CHECK")
        .arg(&["proj:1", "WRITE", "/A/b"])
        .query(con)
        .expect("CHECK");
    // The RDB keeps the clock under an LRU or LFU policy, and the `loaded` event follows.
    let _: () = cmd("DEBUG").arg("RELOAD").query(con).expect("DEBUG RELOAD");
    // proj:2's brief lock lapses and the expiry cycle reclaims it; its long one keeps the key.
    wait_until(Duration::from_secs(10), "the expiry cycle", || {
        info_number(con, "pathlock", "pathlock_locks") == 2
    });
}

fn projects(con: &mut Connection) {
    let _: () = cmd("SET").arg(&["plain", "v"]).query(con).expect("SET");
    assert!(take(con, "proj:1", "a", &["TTL", "600000", "WRITE", "/A"]));
    assert!(take(con, "proj:2", "b", &["TTL", "600000", "WRITE", "/B"]));
    // Long enough to be restored and reloaded before it lapses, on a loaded machine too.
    assert!(take(con, "proj:2", "c", &["TTL", "1500", "WRITE", "/C"]));
}

#[test]
fn looking_at_a_key_leaves_its_lru_clock_alone() {
    let server = Server::start();
    let mut con = server.conn();
    // The RDB keeps idle times under an LRU policy; without a limit nothing is evicted, and
    // the module grants locks.
    config_set(&mut con, "maxmemory-policy", "allkeys-lru");
    projects(&mut con);
    look_everywhere(&mut con, &["IDLETIME", "1000"]);
    for key in ["plain", "proj:1", "proj:2"] {
        // The clock counts in seconds, so a reload or the wait may add one or two.
        let idle = object(&mut con, "IDLETIME", key);
        assert!((1000..1100).contains(&idle), "{key}: idle {idle} s");
    }
    // A client's write moves the clock, as a SET does: the measure above can see a touch.
    assert!(take(&mut con, "proj:1", "d", &["WRITE", "/D"]));
    let idle = object(&mut con, "IDLETIME", "proj:1");
    assert!(idle < 100, "idle {idle} s after ACQUIRE");
}

#[test]
fn looking_at_a_key_leaves_its_lfu_counter_alone() {
    let server = Server::start();
    let mut con = server.conn();
    config_set(&mut con, "maxmemory-policy", "allkeys-lfu");
    projects(&mut con);
    // At 0 any access raises the counter (the logarithmic increment is certain below 5), and
    // it decays only after `lfu-decay-time` minutes.
    look_everywhere(&mut con, &["FREQ", "0"]);
    for key in ["plain", "proj:1", "proj:2"] {
        assert_eq!(object(&mut con, "FREQ", key), 0, "{key}");
    }
    assert!(take(&mut con, "proj:1", "d", &["WRITE", "/D"]));
    assert!(object(&mut con, "FREQ", "proj:1") > 0, "ACQUIRE counts");
}

/// How many times a server's main thread has gone to sleep and woken up so far: its voluntary
/// context switches, which an idle event loop makes once per wake-up (Linux's count for the
/// thread; Redis 7.0 has no event-loop figures in `INFO`).
fn switches(pid: i64) -> i64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/status"))
        .expect("the server's main thread in /proc");
    status
        .lines()
        .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|n| n.trim().parse::<i64>().ok())
        .expect("voluntary_ctxt_switches")
}

/// The wake-ups of two servers over one `window`, the first's and the second's. Both are read
/// at the same moments, so a window that a busy machine stretches (the test is descheduled past
/// its sleep) stretches for both alike: counted one after the other, an idle server once woke
/// 60 times in a window where the other had woken 40.
fn wakes_over(first: &mut Connection, second: &mut Connection, window: Duration) -> (i64, i64) {
    let pids = (
        info_number(first, "server", "process_id"),
        info_number(second, "server", "process_id"),
    );
    let before = (switches(pids.0), switches(pids.1));
    sleep(window);
    let after = (switches(pids.0), switches(pids.1));
    (after.0 - before.0, after.1 - before.1)
}

/// The least excess of wake-ups, `(excess, theirs, baseline)`, over at most `TRIES` windows, each
/// both servers' counts over the same `window`. A timer the module keeps armed adds its
/// wake-ups to every window; a busy machine disturbs some and not others, so a window within the
/// slack ends the measure.
///
/// The slack: a few wake-ups that may fall on either side of the window, and one for each of the
/// servers' crons in it (`IDLE_HZ`). Valkey 8.1 and later run `clientsCron` from a timer of their
/// own (`clientsTimeProc`) beside `serverCron`, both every `1000 / hz` ms, each rescheduled from
/// the end of its own run. While the two fall due in the same millisecond an idle server wakes
/// once for both; once a longer `serverCron` (a machine busy with a build) has pushed them apart,
/// it wakes twice, and they drift back together only by chance, seconds later. So an idle Valkey
/// wakes once or twice per cron, with or without a module: fresh-clone CI runs beside a build
/// read 58 wake-ups against 30 at the default `hz 10`, on Valkey 9.1 and on 8.1, and traced alone,
/// a server woke 87 ms and then 13 ms after each cron while its twin woke once. Not a budget for
/// the module: a 100 ms timer would add 30 in every window of 3 s, and the expiry cycle's own
/// ticks are held to none by `pathlock_total_cycles`.
fn least_excess(
    first: &mut Connection,
    second: &mut Connection,
    window: Duration,
) -> (i64, i64, i64) {
    const TRIES: usize = 3;
    let crons = (window.as_millis() as i64) * i64::from(IDLE_HZ) / 1000;
    let slack = 4 + crons;
    let mut least: Option<(i64, i64, i64)> = None;
    for _ in 0..TRIES {
        let (baseline, theirs) = wakes_over(first, second, window);
        assert!(baseline > 0, "the server wakes for its own cron");
        let excess = theirs - baseline - slack;
        if least.is_none_or(|(best, _, _)| excess < best) {
            least = Some((excess, theirs, baseline));
        }
        if excess <= 0 {
            break;
        }
    }
    least.expect("at least one window")
}

/// The `hz` of both servers of the wake-up test: the least the server takes, so that the wake-ups
/// of its own crons, which Valkey doubles at times (see `least_excess`), are few beside those of
/// a timer the module might keep.
const IDLE_HZ: u32 = 1;

/// The expiry cycle's ticks so far (`INFO pathlock`): each is a wake-up of the module's timer.
fn ticks(con: &mut Connection) -> i64 {
    info_number(con, "pathlock", "pathlock_total_cycles")
}

#[test]
fn an_idle_server_wakes_no_more_often_with_the_module_than_without() {
    const WINDOW: Duration = Duration::from_secs(3);
    let hz = IDLE_HZ.to_string();
    let plain = Server::start_without_module(&["--hz", &hz]);
    let server = Server::start_with(&["--hz", &hz]);
    let mut p = plain.conn();
    let mut con = server.conn();

    // Nothing held: no timer at all.
    let before = ticks(&mut con);
    let (excess, empty, baseline) = least_excess(&mut p, &mut con, WINDOW);
    assert!(
        excess <= 0,
        "{empty} wake-ups, {baseline} without the module"
    );
    assert_eq!(ticks(&mut con), before, "ticks with nothing held");

    // A lease that ends in ten minutes is a deadline, not a reason to wake now; a brief one is
    // reclaimed at its deadline, after which nothing is due.
    assert!(take(
        &mut con,
        "p",
        "long",
        &["TTL", "600000", "WRITE", "/A"]
    ));
    assert!(take(&mut con, "p", "brief", &["TTL", "100", "WRITE", "/B"]));
    wait_until(Duration::from_secs(5), "the brief lock's expiry", || {
        info_number(&mut con, "pathlock", "pathlock_locks") == 1
    });
    let before = ticks(&mut con);
    let (excess, holding, baseline) = least_excess(&mut p, &mut con, WINDOW);
    let idle_ticks = ticks(&mut con) - before;
    eprintln!(
        "wake-ups in {WINDOW:?} at hz {IDLE_HZ}: {empty} with the module and nothing held, \
         {holding} holding a lock; {baseline} without the module over the same window; the \
         expiry cycle ticked {idle_ticks} times while it held the lock"
    );
    assert!(
        excess <= 0,
        "{holding} wake-ups holding a lock, {baseline} without the module"
    );
    assert_eq!(idle_ticks, 0, "the expiry cycle ticked with nothing due");
}

/// The CPU time a server's main thread has used so far, in milliseconds (`utime` and `stime` of
/// its `/proc` stat, in the kernel's fixed 100 ticks a second).
fn main_thread_cpu_ms(pid: i64) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/stat"))
        .expect("the server's main thread in /proc");
    // The fields after the command name, which is in parentheses and may hold spaces: `utime`
    // and `stime` are the 14th and 15th fields, the 12th and 13th after the name.
    let fields: Vec<i64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default()
        .split_whitespace()
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    (fields[11] + fields[12]) * 10
}

/// A lease and a wait that end hours from now arm no timer so far ahead that Redis 7.0's event
/// loop stops sleeping. Redis before 7.4 computes the next period of its module-timer handler in
/// an `int` of microseconds, so a timer more than 35.8 minutes away, once any other module timer
/// fired, made the loop poll without a timeout: a whole core, with no voluntary context switch
/// for the wake-up count above to see. Measured as the main thread's CPU time beside a server
/// without the module over the same window; the spin used 500-970 ms a second.
#[test]
fn a_lease_or_a_wait_of_hours_leaves_the_event_loop_asleep() {
    const WINDOW: Duration = Duration::from_secs(3);
    let plain = Server::start_without_module(&[]);
    let server = Server::start();
    let mut p = plain.conn();
    let mut con = server.conn();
    assert!(take(
        &mut con,
        "p",
        "long",
        &["TTL", "7200000", "WRITE", "/A"]
    ));
    let mut waiter_con = server.conn();
    let waiter = std::thread::spawn(move || {
        acquire(
            &mut waiter_con,
            "p",
            &["TOKEN", "waiter", "WAIT", "3600000", "WRITE", "/A"],
        )
    });
    wait_for_waiters(&mut con, 1);
    // Another timer of the module fires: the expiry of a brief lease.
    assert!(take(&mut con, "q", "brief", &["TTL", "100", "WRITE", "/B"]));
    wait_until(Duration::from_secs(5), "the brief lock's expiry", || {
        info_number(&mut con, "pathlock", "pathlock_locks") == 1
    });
    let pids = (
        info_number(&mut p, "server", "process_id"),
        info_number(&mut con, "server", "process_id"),
    );
    let before = (main_thread_cpu_ms(pids.0), main_thread_cpu_ms(pids.1));
    sleep(WINDOW);
    let after = (main_thread_cpu_ms(pids.0), main_thread_cpu_ms(pids.1));
    let (baseline, holding) = (after.0 - before.0, after.1 - before.1);
    eprintln!(
        "main-thread CPU over {WINDOW:?}: {holding} ms holding a lease of 2 h and a wait of 1 h, \
         {baseline} ms without the module"
    );
    // A twentieth of the window: a spinning loop uses far more, even on a loaded machine that
    // gives it a fraction of a core.
    let slack = WINDOW.as_millis() as i64 / 20;
    assert!(
        holding <= baseline + slack,
        "{holding} ms of CPU in {WINDOW:?}, {baseline} ms without the module"
    );
    assert!(release(&mut con, "p", "long", &[]) >= 0);
    let granted = waiter.join().expect("the waiter's thread");
    assert!(
        granted.is_some(),
        "the waiter is granted once the lease goes"
    );
}

#[test]
fn the_expiry_tick_comes_at_the_deadline() {
    const TTL: u64 = 300;
    let server = Server::start();
    let mut holder = server.conn();
    let mut waiter = server.conn();
    let mut late = Vec::new();
    // Leases that start at different points of a 100 ms period, so that a periodic tick could
    // not meet them all by chance.
    for (round, offset) in [0, 13, 29, 41, 58, 72, 87].into_iter().enumerate() {
        sleep(Duration::from_millis(offset));
        let key = format!("p{round}");
        assert!(take(
            &mut holder,
            &key,
            "holder",
            &["TTL", &TTL.to_string(), "WRITE", "/A"]
        ));
        let granted_at = Instant::now();
        // The waiter is granted when the expiry cycle reclaims the holder's lapsed lock.
        let grant = acquire(&mut waiter, &key, &["WAIT", "5000", "WRITE", "/A"]);
        assert!(grant.is_some(), "round {round}: the waiter is granted");
        let elapsed = granted_at.elapsed().as_millis() as i64;
        late.push(elapsed - TTL as i64);
    }
    late.sort_unstable();
    eprintln!("ms from the lease's end to the waiter's grant, sorted: {late:?}");
    // A tick every 100 ms would make the median 50 ms late; one armed for the deadline makes it
    // a millisecond or two, plus the machine's scheduling.
    assert!(late[3] < 20, "ms late, sorted: {late:?}");
    assert!(
        late[0] > -20,
        "never granted before the lease ends: {late:?}"
    );
}

#[test]
fn the_expiry_cycles_ticks_are_shown_to_the_latency_monitor() {
    const LOCKS: usize = 50_000;
    let server = Server::start();
    let mut con = server.conn();
    // Another owner's lock keeps the project a key, so that the module frees the released
    // owner's locks itself (a project left empty goes whole to the server's lazy-free thread).
    assert!(take(&mut con, "p", "other", &["WRITE", "/other"]));
    // One token's locks, released whole: the release answers at once and the ticks free them,
    // each for as long as its budget allows. Then LATENCY LATEST: [event, unix time, latest ms,
    // max ms, ...] each, as for `expire-cycle` (Valkey adds fields after these four).
    let free_a_release = |con: &mut Connection| {
        big_owner_holds(con, "p", LOCKS);
        assert_eq!(release(con, "p", "big", &[]), LOCKS as i64);
        wait_until(Duration::from_secs(60), "the background to free", || {
            info_number(con, "pathlock", "pathlock_background_keys") == 0
        });
        let latest: Vec<Vec<Value>> = cmd("LATENCY")
            .arg("LATEST")
            .query(con)
            .expect("LATENCY LATEST");
        eprintln!("LATENCY LATEST after freeing {LOCKS} locks: {latest:?}");
        latest
    };
    let is_cycle = |entry: &&Vec<Value>| matches!(entry.first(), Some(Value::BulkString(event)) if event == b"pathlock-cycle");
    // With the monitor off (`latency-monitor-threshold 0`, the default) the server keeps no
    // sample of its own events, and none of the module's: the module API would keep every one.
    let off = free_a_release(&mut con);
    assert!(
        info_number(&mut con, "pathlock", "pathlock_total_cycles_over_1ms") > 0,
        "ticks of a millisecond or more, which a threshold of 1 would keep"
    );
    assert!(
        !off.iter().any(|entry| is_cycle(&entry)),
        "the monitor is off: {off:?}"
    );
    config_set(&mut con, "latency-monitor-threshold", "1");
    let latest = free_a_release(&mut con);
    let cycle = latest.iter().find(is_cycle);
    let entry = cycle.unwrap_or_else(|| panic!("no pathlock-cycle in {latest:?}"));
    let Some(Value::Int(worst)) = entry.get(3) else {
        panic!("the worst of {entry:?}")
    };
    // A tick stops at its budget (1 to 1.5 ms), between two steps; the bound leaves room for a
    // machine that takes the server off its core mid-tick, and still catches a tick that is not
    // bounded.
    assert!(*worst >= 1 && *worst < 50, "worst tick {worst} ms");
    // INFO's finer figures of the same ticks: the longest in microseconds, of wall time and of
    // CPU time, which a busy machine does not stretch.
    let field = |con: &mut Connection, name: &str| info_number(con, "pathlock", name);
    let (ticks, over) = (
        field(&mut con, "pathlock_total_cycles"),
        field(&mut con, "pathlock_total_cycles_over_1ms"),
    );
    let (wall, cpu) = (
        field(&mut con, "pathlock_cycle_longest_us"),
        field(&mut con, "pathlock_cycle_longest_cpu_us"),
    );
    eprintln!("{ticks} ticks, {over} over 1 ms; the longest {wall} us, {cpu} us of CPU");
    assert!(
        ticks > 10 && (1..=ticks).contains(&over),
        "{ticks} ticks, {over} over 1 ms"
    );
    assert!(wall >= *worst * 1000, "{wall} us, the monitor's {worst} ms");
    assert!(
        (900..5000).contains(&cpu) && cpu <= wall,
        "the longest tick: {cpu} us of CPU, {wall} us of wall time"
    );
}

/// The expiry tick's own work, beside the whole: the `cycle_own_*` fields exist, start at 0 and
/// move once keys have lapsed and been deleted by the ticks. A tick's own figures are its own
/// time less its calls into the server, so each is at most the same tick's whole.
#[test]
fn the_ticks_own_work_is_counted_beside_the_whole() {
    const KEYS: usize = 20_000;
    let server = Server::start();
    let mut con = server.conn();
    let own = [
        "pathlock_total_cycles_own_over_1ms",
        "pathlock_cycle_own_longest_us",
        "pathlock_cycle_own_longest_cpu_us",
    ];
    let field = |con: &mut Connection, name: &str| info_number(con, "pathlock", name);
    for name in own {
        assert_eq!(field(&mut con, name), 0, "{name} on a fresh server");
    }
    // One lock in each of many keys, lapsing together: the ticks reclaim them and delete the
    // keys, which calls into the server for each.
    let mut pipe = redis::pipe();
    for i in 0..KEYS {
        pipe.cmd("PATHLOCK.ACQUIRE")
            .arg(format!("lapse:{i}"))
            .arg(&["TOKEN", "t", "TTL", "200", "WRITE", "/doc"])
            .ignore();
    }
    let () = pipe.query(&mut con).expect("the acquires");
    wait_until(Duration::from_secs(60), "the lapsed keys to go", || {
        cmd("DBSIZE").query::<i64>(&mut con).expect("DBSIZE") == 0
    });
    let ticks = field(&mut con, "pathlock_total_cycles");
    let [over, wall, cpu] = own.map(|name| field(&mut con, name));
    let whole_wall = field(&mut con, "pathlock_cycle_longest_us");
    let whole_cpu = field(&mut con, "pathlock_cycle_longest_cpu_us");
    eprintln!(
        "{ticks} ticks; the longest {whole_wall} us ({whole_cpu} us of CPU), its own work at \
         most {wall} us ({cpu} us of CPU), {over} over 1 ms of own CPU"
    );
    assert_eq!(field(&mut con, "pathlock_total_expirations"), KEYS as i64);
    assert!(
        ticks > 0 && (0..=ticks).contains(&over),
        "{over} of {ticks}"
    );
    assert!(
        wall > 0 && wall <= whole_wall,
        "{wall} us of {whole_wall} us"
    );
    assert!(cpu > 0 && cpu <= whole_cpu, "{cpu} us of {whole_cpu} us");
}
