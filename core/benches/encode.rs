//! What the engine's side of a `DUMP` costs without a server: `persist::encode` of the project
//! `bench/whole_key.py` fills (`/d<i % 1000>/f<i>`, a 13-byte token `t<i>` each, one lock a
//! token), into a sink that counts the chunks and keeps nothing, as a server would take them
//! without compressing or copying them. Once as the fill leaves the table (nodes in the order
//! the locks came) and once as a load builds it (nodes in tree order).
//!
//! `cargo bench -p pathlock-core --bench encode` (`ENCODE_LOCKS`, default 1,000,000). Each
//! figure is the median of 16 encodes, timed by the thread's CPU clock.

mod common;

use common::cpu_nanos;

use pathlock_core::persist::{decode, encode, ByteSink, ByteSource, Sink};
use pathlock_core::{LockTable, Mode, Path, PathLimits, Token};

/// Counts what it is given, and keeps nothing.
#[derive(Default)]
struct Count(usize);

impl Sink for Count {
    fn unsigned(&mut self, _: u64) {
        self.0 += 8;
    }

    fn buffer(&mut self, bytes: &[u8]) {
        self.0 += std::hint::black_box(bytes).len();
    }
}

fn medians(table: &LockTable, what: &str) {
    let mut times = Vec::with_capacity(16);
    let mut bytes = 0;
    for _ in 0..16 {
        let mut sink = Count::default();
        let t = cpu_nanos();
        encode(table, &mut sink);
        times.push(cpu_nanos() - t);
        bytes = sink.0;
    }
    times.sort_unstable();
    let ms = |nanos: u128| nanos as f64 / 1e6;
    println!(
        "{what}: encode {:.1} ms median ({:.1} to {:.1}), {bytes} bytes before compression",
        ms(times[8]),
        ms(times[0]),
        ms(times[15])
    );
}

fn main() {
    let locks: u64 = std::env::var("ENCODE_LOCKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let limits = PathLimits::default();
    let mut table = LockTable::new();
    for i in 0..locks {
        let token = Token::new(format!("t{i:012}").as_bytes()).expect("a token");
        let path = Path::parse(format!("/d{}/f{i}", i % 1000).as_bytes(), &limits).expect("a path");
        table.grant(&token, 1_000_000 + i, i + 1, &[(Mode::Write, path)]);
    }
    println!("{locks} locks, a 13-byte token each, 1,000 folders");
    medians(&table, "as filled");
    let mut sink = ByteSink::default();
    encode(&table, &mut sink);
    drop(table);
    let loaded = decode(&mut ByteSource::new(&sink.bytes), u64::MAX).expect("its own payload");
    medians(&loaded, "as loaded");
}
