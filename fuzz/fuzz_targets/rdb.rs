#![no_main]

// See pathlock::harness::rdb for what this target feeds in and what it checks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| pathlock::harness::rdb(data));
