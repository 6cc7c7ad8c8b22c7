//! `ACQUIRE ... WAIT ms` with real concurrent clients: wake-ups on release, expiry and DEL,
//! timeouts, first-come-first-served order, no writer starvation, 1,000 independent waiters,
//! clean-up after disconnects and `CLIENT UNBLOCK`, waiters let in when the one before them
//! gives up, transactions, and replication.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::thread::{self, sleep, JoinHandle};
use std::time::{Duration, Instant};

use crate::common::*;

type Reply = Option<(String, i64)>;

/// Runs a blocking acquire on a connection of its own; yields the reply and how long it took.
fn spawn_acquire(server: &Server, key: &str, args: &[&str]) -> JoinHandle<(Reply, Duration)> {
    let mut con = server.conn();
    let key = key.to_string();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    thread::spawn(move || {
        let started = Instant::now();
        let reply: Reply = cmd("PATHLOCK.ACQUIRE")
            .arg(&key)
            .arg(&args)
            .query(&mut con)
            .expect("ACQUIRE");
        (reply, started.elapsed())
    })
}

#[test]
fn a_waiter_is_woken_by_a_release() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "p", "holder", &["WRITE", "/A"]));
    let waiter = spawn_acquire(
        &server,
        "p",
        &["TOKEN", "w", "WAIT", "5000", "WRITE", "/A/x"],
    );
    wait_for_blocked(&mut con, 1);
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_clients_waiting"),
        1
    );
    sleep(Duration::from_millis(200));
    release(&mut con, "p", "holder", &[]);
    let (reply, took) = waiter.join().expect("waiter");
    assert_eq!(reply.map(|g| g.0), Some("w".into()));
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_millis(1000),
        "{took:?}"
    );
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_total_waits_granted"),
        1
    );
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_clients_waiting"),
        0
    );
    assert!(
        !take(&mut con, "p", "other", &["READ", "/A/x"]),
        "the waiter holds it now"
    );
}

#[test]
fn a_waiter_is_woken_by_an_expiry() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(
        &mut con,
        "p",
        "holder",
        &["TTL", "300", "WRITE", "/A"]
    ));
    let waiter = spawn_acquire(&server, "p", &["TOKEN", "w", "WAIT", "5000", "READ", "/A"]);
    let (reply, took) = waiter.join().expect("waiter");
    assert_eq!(reply.map(|g| g.0), Some("w".into()));
    // The expiry cycle runs every 100 ms.
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(800),
        "{took:?}"
    );
}

#[test]
fn a_waiter_is_woken_by_a_del_of_the_key() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(
        &mut con,
        "p",
        "holder",
        &["TTL", "60000", "WRITE", "/"]
    ));
    let first = spawn_acquire(
        &server,
        "p",
        &["TOKEN", "w1", "WAIT", "5000", "WRITE", "/A"],
    );
    wait_for_blocked(&mut con, 1);
    let second = spawn_acquire(
        &server,
        "p",
        &["TOKEN", "w2", "WAIT", "5000", "WRITE", "/A/x"],
    );
    wait_for_blocked(&mut con, 2);
    let _: i64 = cmd("DEL").arg("p").query(&mut con).expect("DEL");
    // The key is created again (above every fence given before): the first waiter takes its
    // first fence; the second still conflicts with it.
    let (token, fence) = first.join().expect("first").0.expect("granted");
    assert_eq!(token, "w1");
    sleep(Duration::from_millis(100));
    assert_eq!(blocked_clients(&mut con), 1);
    release(&mut con, "p", "w1", &[]);
    assert_eq!(
        second.join().expect("second").0,
        Some(("w2".into(), fence + 1))
    );
}

#[test]
fn a_waiter_is_woken_when_its_key_is_flushed_and_told_when_it_is_renamed_away() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(
        &mut con,
        "p",
        "holder",
        &["TTL", "60000", "WRITE", "/"]
    ));
    let mut waiting = server.conn();
    let waiter = thread::spawn(move || {
        cmd("PATHLOCK.ACQUIRE")
            .arg(&["p", "TOKEN", "w", "WAIT", "5000", "WRITE", "/A"])
            .query::<Reply>(&mut waiting)
    });
    wait_for_blocked(&mut con, 1);
    let _: () = cmd("RENAME")
        .arg(&["p", "elsewhere"])
        .query(&mut con)
        .expect("RENAME");
    // The project moved with its locks, so the waiter is told, not granted under the old name.
    let error = error_of(waiter.join().expect("waiter"));
    assert!(error.starts_with("ERR project moved"), "{error}");
    assert!(
        !take(&mut con, "elsewhere", "x", &["READ", "/B"]),
        "the locks moved with the key"
    );

    let waiter = spawn_acquire(
        &server,
        "elsewhere",
        &["TOKEN", "v", "WAIT", "5000", "READ", "/B"],
    );
    wait_for_blocked(&mut con, 1);
    let _: () = cmd("FLUSHALL").query(&mut con).expect("FLUSHALL");
    assert_eq!(
        waiter.join().expect("waiter").0.map(|g| g.0),
        Some("v".into())
    );
}

#[test]
fn a_wait_times_out_on_time_with_nil() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "p", "holder", &["WRITE", "/A"]));
    for asked in [100u64, 500] {
        let waiter = spawn_acquire(&server, "p", &["WAIT", &asked.to_string(), "WRITE", "/A"]);
        let (reply, took) = waiter.join().expect("waiter");
        assert_eq!(reply, None);
        let asked = Duration::from_millis(asked);
        // On time, give or take the scheduling of a loaded, shared 2-core machine.
        assert!(
            took >= asked && took < asked + Duration::from_millis(200),
            "asked {asked:?}, took {took:?}"
        );
    }
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_total_wait_timeouts"),
        2
    );
    assert_no_waiters(&mut con);
}

#[test]
fn waits_of_different_lengths_each_time_out_at_their_own_time() {
    // One timer serves every waiter's timeout, set for the earliest deadline: a later waiter
    // with a shorter wait must move it earlier, and a crowd timing out together (more than one
    // call of the timer answers) must all be answered on time.
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "p", "holder", &["WRITE", "/A"]));
    let mut waiters = Vec::new();
    for asked in [1200u64, 300, 700] {
        let waiter = spawn_acquire(&server, "p", &["WAIT", &asked.to_string(), "WRITE", "/A"]);
        waiters.push((asked, waiter));
        // Each arrives after the one before, so the timer is first set for the longest wait.
        wait_for_blocked(&mut con, waiters.len() as i64);
    }
    // The crowd waits behind a holder of /B.
    assert!(take(&mut con, "q", "mover", &["WRITE", "/B"]));
    let crowd: Vec<_> = (0..150)
        .map(|i| spawn_acquire(&server, "q", &["WAIT", "400", "WRITE", &format!("/B/{i}")]))
        .collect();
    for (asked, waiter) in waiters {
        let (reply, took) = waiter.join().expect("waiter");
        assert_eq!(reply, None);
        let asked = Duration::from_millis(asked);
        assert!(
            took >= asked && took < asked + Duration::from_millis(200),
            "asked {asked:?}, took {took:?}"
        );
    }
    for waiter in crowd {
        let (reply, took) = waiter.join().expect("crowd waiter");
        assert_eq!(reply, None);
        // A few of 150 threads see their reply a fraction of a millisecond before their own
        // count reaches 400 ms, with one timer as with a timer per waiter before it; 2 ms early
        // is allowed for that.
        assert!(
            took >= Duration::from_millis(398) && took < Duration::from_millis(900),
            "asked 400 ms, took {took:?}"
        );
    }
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_total_wait_timeouts"),
        153
    );
    assert_no_waiters(&mut con);
}

#[test]
fn fifty_conflicting_waiters_are_served_in_arrival_order() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "p", "holder", &["WRITE", "/A"]));
    let (done, order) = mpsc::channel();
    let mut waiters = Vec::new();
    for i in 0..50 {
        let mut own = server.conn();
        let done = done.clone();
        // Readers and writers, on /A and below it: every pair conflicts through a WRITE or
        // through the holder's lock, so the queue alone decides the order.
        let (mode, path) = match i % 3 {
            0 => ("WRITE", "/A"),
            1 => ("WRITE", "/A/x"),
            _ => ("WRITE", "/A/x/y"),
        };
        waiters.push(thread::spawn(move || {
            let token = format!("w{i:02}");
            let reply: Reply = cmd("PATHLOCK.ACQUIRE")
                .arg(&["p", "TOKEN", &token, "WAIT", "20000", mode, path])
                .query(&mut own)
                .expect("ACQUIRE");
            let (token, fence) = reply.expect("granted");
            done.send((i, fence)).expect("report");
            let _: i64 = cmd("PATHLOCK.RELEASE")
                .arg(&["p", &token])
                .query(&mut own)
                .expect("RELEASE");
        }));
        wait_for_blocked(&mut con, i + 1);
    }
    release(&mut con, "p", "holder", &[]);
    for waiter in waiters {
        waiter.join().expect("waiter");
    }
    let served: Vec<(i64, i64)> = order.try_iter().collect();
    let arrival: Vec<i64> = served.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        arrival,
        (0..50).collect::<Vec<_>>(),
        "served in arrival order"
    );
    let fences: Vec<i64> = served.iter().map(|(_, f)| *f).collect();
    // The holder took the key's first fence; the waiters the next 50, in arrival order.
    let first = fences[0] - 1;
    assert_eq!(fences, (first + 1..first + 51).collect::<Vec<_>>());
}

#[test]
fn a_waiting_writer_is_not_starved_by_readers() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "p", "r1", &["READ", "/A"]));
    assert!(take(&mut con, "p", "r2", &["READ", "/A/doc"]));
    let writer = spawn_acquire(
        &server,
        "p",
        &["TOKEN", "writer", "WAIT", "10000", "WRITE", "/A"],
    );
    wait_for_blocked(&mut con, 1);
    // Readers keep arriving. Each would share with r1 and r2, but none overtakes the writer.
    for i in 0..20 {
        assert!(!take(&mut con, "p", &format!("late{i}"), &["READ", "/A"]));
    }
    let late_waiter = spawn_acquire(
        &server,
        "p",
        &["TOKEN", "late", "WAIT", "10000", "READ", "/A/doc"],
    );
    wait_for_blocked(&mut con, 2);
    // A reader of an unrelated folder is not held up.
    assert!(take(&mut con, "p", "elsewhere", &["READ", "/B"]));
    // The writer goes as soon as the readers that came before it leave.
    release(&mut con, "p", "r1", &[]);
    sleep(Duration::from_millis(50));
    assert_eq!(blocked_clients(&mut con), 2);
    release(&mut con, "p", "r2", &[]);
    let (reply, _) = writer.join().expect("writer");
    assert_eq!(reply.map(|r| r.0), Some("writer".into()));
    assert_eq!(blocked_clients(&mut con), 1);
    release(&mut con, "p", "writer", &[]);
    assert_eq!(
        late_waiter.join().expect("reader").0.map(|r| r.0),
        Some("late".into())
    );
}

/// A raw connection that sends a command and reads its reply later, so that 1,000 clients can
/// block without 1,000 threads.
struct RawClient(TcpStream);

impl RawClient {
    fn send(port: u16, args: &[&str]) -> RawClient {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let words: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        stream.write_all(&resp(&words)).expect("send");
        RawClient(stream)
    }

    /// The reply bytes available within `limit`, if any.
    fn reply_within(&mut self, limit: Duration) -> Vec<u8> {
        self.0.set_read_timeout(Some(limit)).expect("timeout");
        let mut reply = Vec::new();
        let mut buffer = [0u8; 256];
        // A granted reply is `*2`, `$len`, the token, `:fence`: four lines.
        while reply.windows(2).filter(|w| w == b"\r\n").count() < 4 {
            match self.0.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => reply.extend_from_slice(&buffer[..n]),
            }
        }
        reply
    }
}

#[test]
fn a_thousand_waiters_are_each_woken_by_their_own_release() {
    let server = Server::start();
    let mut con = server.conn();
    let n = 1000;
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("PATHLOCK.ACQUIRE")
            .arg(&[
                "p",
                "TOKEN",
                &format!("h{i}"),
                "TTL",
                "600000",
                "WRITE",
                &format!("/d/{i}"),
            ])
            .ignore();
    }
    let _: () = pipe.query(&mut con).expect("holders");
    let mut waiters: Vec<RawClient> = (0..n)
        .map(|i| {
            let token = format!("w{i}");
            let path = format!("/d/{i}/file");
            RawClient::send(
                server.port,
                &[
                    "PATHLOCK.ACQUIRE",
                    "p",
                    "TOKEN",
                    &token,
                    "WAIT",
                    "60000",
                    "WRITE",
                    &path,
                ],
            )
        })
        .collect();
    wait_for_blocked(&mut con, n as i64);
    let started = Instant::now();
    for i in 0..n {
        release(&mut con, "p", &format!("h{i}"), &[]);
        let reply = waiters[i].reply_within(Duration::from_secs(5));
        let expected_token = format!("w{i}");
        assert!(
            reply.starts_with(b"*2\r\n")
                && reply
                    .windows(expected_token.len())
                    .any(|w| w == expected_token.as_bytes()),
            "waiter {i} got {:?}",
            String::from_utf8_lossy(&reply)
        );
        if i + 1 < n && i % 100 == 0 {
            // Its neighbour's release has not happened, so the neighbour still waits.
            assert!(waiters[i + 1]
                .reply_within(Duration::from_millis(20))
                .is_empty());
        }
    }
    println!(
        "1000 releases, each waking its own waiter: {:?}",
        started.elapsed()
    );
    assert_eq!(blocked_clients(&mut con), 0);
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_total_waits_granted"),
        n as i64
    );
}

#[test]
fn a_waiter_that_disconnects_or_is_unblocked_leaves_no_trace() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "p", "r", &["READ", "/A"]));
    // The writer's wait holds up readers of /A that arrive after it...
    let quitter = RawClient::send(
        server.port,
        &[
            "PATHLOCK.ACQUIRE",
            "p",
            "TOKEN",
            "writer",
            "WAIT",
            "60000",
            "WRITE",
            "/A",
        ],
    );
    wait_for_blocked(&mut con, 1);
    assert!(!take(&mut con, "p", "reader", &["READ", "/A/x"]));
    // ...until it disconnects: then the queue forgets it, and the reader gets in.
    drop(quitter);
    wait_for_blocked(&mut con, 0);
    wait_until(
        Duration::from_secs(5),
        "the queue to forget the writer",
        || take(&mut con, "p", "reader", &["READ", "/A/x"]),
    );
    assert_eq!(
        info_number(&mut con, "pathlock", "pathlock_clients_waiting"),
        0
    );

    // CLIENT UNBLOCK answers the waiter nil, like a timeout.
    let mut waiting = server.conn();
    let id: i64 = cmd("CLIENT")
        .arg("ID")
        .query(&mut waiting)
        .expect("CLIENT ID");
    let waiter = thread::spawn(move || {
        let reply: Reply = cmd("PATHLOCK.ACQUIRE")
            .arg(&["p", "WAIT", "60000", "WRITE", "/A"])
            .query(&mut waiting)
            .expect("ACQUIRE");
        reply
    });
    wait_for_blocked(&mut con, 1);
    let unblocked: i64 = cmd("CLIENT")
        .arg("UNBLOCK")
        .arg(id)
        .query(&mut con)
        .expect("UNBLOCK");
    assert_eq!(unblocked, 1);
    assert_eq!(waiter.join().expect("waiter"), None);
    assert_no_waiters(&mut con);
    assert!(take(&mut con, "p", "reader2", &["READ", "/A/y"]));
}

#[test]
fn inside_multi_and_scripts_wait_does_not_block() {
    let server = Server::start();
    let mut con = server.conn();
    assert!(take(&mut con, "p", "holder", &["WRITE", "/A"]));
    let started = Instant::now();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("PATHLOCK.ACQUIRE")
        .arg(&["p", "WAIT", "5000", "WRITE", "/A"])
        .query(&mut con)
        .expect("EXEC");
    assert_eq!(replies, vec![Value::Nil]);
    let script = "return redis.call('PATHLOCK.ACQUIRE', KEYS[1], 'WAIT', 5000, 'WRITE', '/A')";
    let reply: Value = cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("p")
        .query(&mut con)
        .expect("EVAL");
    assert_eq!(reply, Value::Nil);
    assert!(started.elapsed() < Duration::from_millis(1000));
}

#[test]
fn grants_to_waiters_replicate_like_any_other() {
    let (master, _replica, mut m, mut r) = master_and_replica();
    let mut workers = Vec::new();
    for w in 0..8 {
        let mut own = master.conn();
        workers.push(thread::spawn(move || {
            let mut rng = Rng::new(1000 + w);
            for _ in 0..60 {
                let path = *rng.pick(&["/A", "/A/x", "/A/y", "/B", "/"]);
                let mode = if rng.below(3) == 0 { "READ" } else { "WRITE" };
                let ttl = (20 + rng.below(200)).to_string();
                let wait = (rng.below(300)).to_string();
                let reply: Reply = cmd("PATHLOCK.ACQUIRE")
                    .arg(&["p", "TTL", &ttl, "WAIT", &wait, mode, path])
                    .query(&mut own)
                    .expect("ACQUIRE");
                if let Some((token, _)) = reply {
                    if rng.below(2) == 0 {
                        sleep(Duration::from_millis(rng.below(20)));
                        let _: i64 = cmd("PATHLOCK.RELEASE")
                            .arg(&["p", &token])
                            .query(&mut own)
                            .expect("RELEASE");
                    }
                }
            }
        }));
    }
    for worker in workers {
        worker.join().expect("worker");
    }
    let waits = info_number(&mut m, "pathlock", "pathlock_total_waits_granted");
    assert!(waits > 10, "only {waits} waits were granted");
    pause_and_sync(&mut m);
    assert_eq!(digest_of(&mut m, "p"), digest_of(&mut r, "p"));
    resume_writes(&mut m);
}

#[test]
fn a_waiter_that_gives_up_lets_the_waiter_behind_it_in_and_replicas_see_the_grant() {
    let (master, _replica, mut con, mut r) = master_and_replica();
    assert!(take(&mut con, "p", "reader", &["READ", "/A"]));

    // The writer's wait conflicts with the reader. The second waiter's READ would share with the
    // reader, but it queued behind the writer, so only the writer's timeout lets it in, while
    // the reader still holds /A.
    let writer = spawn_acquire(
        &master,
        "p",
        &["TOKEN", "writer", "WAIT", "300", "WRITE", "/A"],
    );
    wait_for_blocked(&mut con, 1);
    let behind = spawn_acquire(
        &master,
        "p",
        &["TOKEN", "behind", "WAIT", "10000", "READ", "/A/doc"],
    );
    wait_for_blocked(&mut con, 2);
    let (reply, took) = writer.join().expect("writer");
    assert_eq!(reply, None);
    assert!(took >= Duration::from_millis(300), "{took:?}");
    let (reply, took) = behind.join().expect("behind");
    assert_eq!(reply.map(|g| g.0), Some("behind".into()));
    assert!(took < Duration::from_secs(3), "{took:?}");

    // The same when the earlier waiter disconnects instead.
    let quitter = RawClient::send(
        master.port,
        &[
            "PATHLOCK.ACQUIRE",
            "p",
            "TOKEN",
            "quitter",
            "WAIT",
            "60000",
            "WRITE",
            "/A",
        ],
    );
    wait_for_blocked(&mut con, 1);
    let second = spawn_acquire(
        &master,
        "p",
        &["TOKEN", "second", "WAIT", "10000", "READ", "/A/other"],
    );
    wait_for_blocked(&mut con, 2);
    drop(quitter);
    let (reply, _) = second.join().expect("second");
    assert_eq!(reply.map(|g| g.0), Some("second".into()));
    assert_eq!(blocked_clients(&mut con), 0);

    pause_and_sync(&mut con);
    assert_eq!(digest_of(&mut con, "p"), digest_of(&mut r, "p"));
    let mut holders: Vec<Vec<u8>> = lock_set(&mut r, "p").into_iter().map(|l| l.2).collect();
    holders.sort();
    assert_eq!(
        holders,
        [b"behind".to_vec(), b"reader".to_vec(), b"second".to_vec()]
    );
    resume_writes(&mut con);
}

/// A holder whose lease lapsed releases before the expiry cycle reaches its lock: the release
/// reclaims it (answering 0, nothing live was released), and the waiter it held up is granted
/// and answered then, not left granted in the table with its client still blocked.
#[test]
fn a_waiter_let_in_by_a_lapsed_holders_release_is_answered() {
    let server = Server::start();
    let mut con = server.conn();
    // Inside one transaction every command sees one time, so the mass shares one deadline and
    // the holder's is 1 ms later: the expiry cycle, earliest first, reaches the holder last.
    let mut pipe = redis::pipe();
    pipe.atomic();
    // The leases outlast the transaction itself by seconds even on a slow server: its time is
    // taken when EXEC begins, and a holder whose lease lapsed during it would let the waiter in
    // at once.
    for i in 0..200_000 {
        pipe.cmd("PATHLOCK.ACQUIRE")
            .arg(&["p", "TOKEN", &format!("m{i}"), "TTL", "5000", "WRITE"])
            .arg(format!("/m/{i}"))
            .ignore();
    }
    pipe.cmd("PATHLOCK.ACQUIRE")
        .arg(&["p", "TOKEN", "holder", "TTL", "5001", "WRITE", "/a"])
        .ignore();
    let _: () = pipe.query(&mut con).expect("the transaction");
    // Its time was taken when EXEC began, before this reply.
    let started = Instant::now();
    let waiter = spawn_acquire(
        &server,
        "p",
        &["TOKEN", "w", "TTL", "60000", "WAIT", "20000", "WRITE", "/a"],
    );
    wait_for_blocked(&mut con, 1);
    let lapse = Duration::from_millis(5030);
    sleep(lapse.saturating_sub(started.elapsed()));
    let still_stored = info_number(&mut con, "pathlock", "pathlock_locks");
    assert_eq!(
        release(&mut con, "p", "holder", &[]),
        0,
        "the lease had lapsed"
    );
    let (reply, took) = waiter.join().expect("waiter");
    eprintln!("waiting: {still_stored} locks still stored when the holder released; the waiter took {took:?}");
    assert_eq!(reply.map(|g| g.0), Some("w".into()));
    // Answered at the release, about 5 s in, not when its 20 s wait would have run out.
    assert!(took < Duration::from_secs(10), "{took:?}");
}
