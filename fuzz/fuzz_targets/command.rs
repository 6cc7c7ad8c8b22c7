#![no_main]

// See pathlock::harness::command for what this target feeds in and what it checks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| pathlock::harness::command(data));
