//! DUMP payloads and RDB files changed or made by hand, sealed with valid checksums, so that
//! only the module's own checks stand between a forged value and the server: what a damaged
//! file, a corrupted `MIGRATE` or anyone allowed to `RESTORE` could hand it.
//!
//! A project's DUMP payload is the value's type byte (7, a module value), the module type's id
//! (its name and encoding version) as a 64-bit RDB length, the module's items (an opcode, then an
//! RDB length for a number or a length and bytes for a string; the first item is the fence
//! counter), the module EOF opcode (0), the RDB version (2 bytes) and the CRC-64 of all of it.
//!
//! Commands written by hand go the same way: as RESP into an AOF file, or to a replica from a
//! master that is the test itself.

use std::io::Write;

use super::Server;

/// The fence rule as `docs/commands.md` states it ("Fences"), which payloads are held to.
pub const FENCE_LIMIT: u64 = 1 << 53;
pub const FENCES_PER_MS: u64 = 1000;
pub const SKEW_MS: u64 = 365 * 24 * 3600 * 1000;

/// The highest counter a client's `RESTORE` may bring into a master at `now_ms`, and where
/// `pathlock.lower-impossible-fences` puts an impossible one.
pub fn admissible(now_ms: u64) -> u64 {
    ((now_ms + SKEW_MS) * FENCES_PER_MS).min(FENCE_LIMIT)
}

/// The highest counter any server can hold at `now_ms`, which effects and files may carry.
pub fn ceiling(now_ms: u64) -> u64 {
    ((now_ms + 2 * SKEW_MS) * FENCES_PER_MS).min(FENCE_LIMIT)
}

/// Redis's CRC-64 (Jones polynomial, reflected), which seals a DUMP payload and an RDB file.
pub fn crc64(bytes: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &byte in bytes {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Appends `n` as an RDB length, in the shortest of its four encodings.
pub fn rdb_len(out: &mut Vec<u8>, n: u64) {
    if n < 64 {
        out.push(n as u8);
    } else if n < 16384 {
        out.extend([0x40 | (n >> 8) as u8, n as u8]);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend((n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend(n.to_be_bytes());
    }
}

/// The RDB length at `at`, and how many bytes it takes; `None` for another encoding.
pub fn read_rdb_len(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
    let first = *bytes.get(at)?;
    let tail = |n: usize| bytes.get(at + 1..at + 1 + n);
    match first >> 6 {
        0 => Some((u64::from(first & 0x3f), 1)),
        1 => Some((
            (u64::from(first & 0x3f) << 8) | u64::from(*bytes.get(at + 1)?),
            2,
        )),
        _ if first == 0x80 => Some((u64::from(u32::from_be_bytes(tail(4)?.try_into().ok()?)), 5)),
        _ if first == 0x81 => Some((u64::from_be_bytes(tail(8)?.try_into().ok()?), 9)),
        _ => None,
    }
}

/// Seals a DUMP payload whose bytes were changed: its last 8 bytes become the CRC-64 of the rest.
pub fn reseal(payload: &mut [u8]) {
    if payload.len() < 8 {
        return;
    }
    let end = payload.len() - 8;
    let crc = crc64(&payload[..end]);
    payload[end..].copy_from_slice(&crc.to_le_bytes());
}

/// The module type id (name and encoding version) in a project's DUMP payload.
pub fn module_id(payload: &[u8]) -> u64 {
    assert_eq!(
        (payload[0], payload[1]),
        (7, 0x81),
        "a module value with a 64-bit module id"
    );
    u64::from_be_bytes(payload[2..10].try_into().expect("8 bytes"))
}

/// Where the fence counter's RDB length starts in a project's DUMP payload: after the type byte,
/// the module id and the counter's number opcode.
pub const COUNTER_AT: usize = 11;

/// The fence counter a project's DUMP payload carries.
pub fn counter_of(payload: &[u8]) -> u64 {
    assert_eq!(payload[COUNTER_AT - 1], 2, "the counter is a number item");
    read_rdb_len(payload, COUNTER_AT)
        .expect("the counter's length")
        .0
}

/// A project's DUMP payload with its fence counter set to `counter` and the checksum
/// recomputed, as the report made it; everything else as it was.
pub fn with_counter(payload: &[u8], counter: u64) -> Vec<u8> {
    let (_, used) = read_rdb_len(payload, COUNTER_AT).expect("the counter's length");
    let mut out = payload[..COUNTER_AT].to_vec();
    rdb_len(&mut out, counter);
    out.extend_from_slice(&payload[COUNTER_AT + used..]);
    reseal(&mut out);
    out
}

/// An RDB file as a server with the module writes one: the module's aux data holding the fence
/// mark `mark` (none when `None`), then database 0 holding each `(key, DUMP payload)`. This is
/// also what the module wrote before fences were checked, whatever `mark` and the payloads hold.
pub fn rdb_file(module_id: u64, mark: Option<u64>, keys: &[(&[u8], &[u8])]) -> Vec<u8> {
    const MODULE_AUX: u8 = 247;
    const SELECT_DB: u8 = 254;
    const EOF: u8 = 255;
    const NUMBER: u64 = 2;
    const BEFORE_KEYS: u64 = 1;
    let mut out = b"REDIS0009".to_vec();
    if let Some(mark) = mark {
        out.push(MODULE_AUX);
        rdb_len(&mut out, module_id);
        rdb_len(&mut out, NUMBER);
        rdb_len(&mut out, BEFORE_KEYS);
        rdb_len(&mut out, NUMBER);
        rdb_len(&mut out, mark);
        rdb_len(&mut out, 0);
    }
    out.push(SELECT_DB);
    rdb_len(&mut out, 0);
    for (key, payload) in keys {
        out.push(payload[0]);
        rdb_len(&mut out, key.len() as u64);
        out.extend_from_slice(key);
        // The value without the payload's own trailer (RDB version and checksum).
        out.extend_from_slice(&payload[1..payload.len() - 10]);
    }
    out.push(EOF);
    let crc = crc64(&out);
    out.extend(crc.to_le_bytes());
    out
}

/// A command as RESP: what a client sends, an AOF holds and a master streams.
pub fn resp(words: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for word in words {
        out.extend(format!("${}\r\n", word.len()).bytes());
        out.extend_from_slice(word);
        out.extend(b"\r\n");
    }
    out
}

/// Appends raw commands to the server's incremental AOF file, which the server replays at its
/// next start or `DEBUG LOADAOF`.
pub fn append_to_aof(server: &Server, bytes: &[u8]) {
    let incr = std::fs::read_dir(server.dir.join("appendonlydir"))
        .expect("appendonlydir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("the incremental AOF");
    let mut aof = std::fs::OpenOptions::new()
        .append(true)
        .open(&incr)
        .expect("open the AOF");
    aof.write_all(bytes).expect("append");
}
