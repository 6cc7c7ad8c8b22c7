//! What the pauses, copies and encode benches share: the thread's CPU clock, and the paths and
//! tokens a busy project's clients would send (depth 3, `/p<i%1000>/d<i/1000%1000>/f<i>`, one
//! UUID-like token each).

#![allow(dead_code)]

use pathlock_core::{Path, PathLimits, Token};

/// The CPU time this thread has used, in nanoseconds: page faults included, and undisturbed by
/// the other processes of a shared machine.
pub fn cpu_nanos() -> u128 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as u128 * 1_000_000_000 + now.tv_nsec as u128
}

pub fn path(i: usize) -> Path {
    let raw = format!("/p{}/d{}/f{i}", i % 1000, i / 1000 % 1000);
    Path::parse(raw.as_bytes(), &PathLimits::default()).expect("path")
}

pub fn token(i: usize) -> Token {
    Token::new(format!("{:08x}-0000-4000-8000-{:012x}", i, i * 7919).as_bytes()).expect("token")
}
