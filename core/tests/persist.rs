//! The RDB payload's decoder refuses what `encode` cannot have written, and takes back exactly
//! what it wrote.

use pathlock_core::persist::{decode, encode, ByteSink, ByteSource, DecodeError};
use pathlock_core::{LockTable, Mode, Path, PathLimits, Token};

fn u(n: u64) -> Vec<u8> {
    n.to_le_bytes().to_vec()
}

fn buf(bytes: &[u8]) -> Vec<u8> {
    [u(bytes.len() as u64), bytes.to_vec()].concat()
}

fn lock(key: &[u8], mode: u64, token: &[u8], deadline: u64, fence: u64) -> Vec<u8> {
    [buf(key), u(mode), buf(token), u(deadline), u(fence)].concat()
}

fn decoded(payload: &[u8]) -> Result<LockTable, DecodeError> {
    decode(&mut ByteSource::new(payload))
}

fn path(text: &str) -> Path {
    Path::parse(text.as_bytes(), &PathLimits::default()).expect("a path")
}

#[test]
fn a_table_comes_back_as_it_was_written() {
    let mut table = LockTable::new();
    let t = |s: &str| Token::new(s.as_bytes()).expect("a token");
    table.grant(
        &t("a"),
        100,
        1,
        &[(Mode::Write, path("/A/C")), (Mode::Read, path("/B"))],
    );
    table.grant(&t("b"), 200, 2, &[(Mode::Read, path("/B"))]);
    table.grant(&t("c"), 300, 5, &[(Mode::Read, path("/\u{100}/\0"))]);
    table.grant(&t("lapsed"), 50, 6, &[(Mode::Write, path("/A/C/old"))]);
    let mut sink = ByteSink::default();
    encode(&table, 60, &mut sink);
    let again = decoded(&sink.bytes).expect("its own payload");
    // The lapsed lease is left out, though it conflicts with nothing stored: a payload carries
    // what a client could still see.
    assert_eq!(again.iter().collect::<Vec<_>>(), table.live(60));
    assert_eq!(again.len(), 4);
    assert_eq!(again.next_fence(), table.next_fence());
    again.check_integrity().expect("consistent");
}

#[test]
fn forged_payloads_are_refused_with_their_reason() {
    let two_writers = [
        u(3),
        u(2),
        lock(b"A\0", 0, b"t1", 9, 1),
        lock(b"A\0B\0", 0, b"t2", 9, 2),
    ];
    assert_eq!(
        decoded(&two_writers.concat()).err(),
        Some(DecodeError::Conflicting)
    );
    let deep = b"a\0".repeat(PathLimits::CEILING.max_depth + 1);
    let too_deep = [u(2), u(1), lock(&deep, 0, b"t", 9, 1)];
    assert_eq!(
        decoded(&too_deep.concat()).err(),
        Some(DecodeError::MalformedPath)
    );
    let counted_but_missing = [u(2), u(u64::MAX), lock(b"a\0", 0, b"t", 9, 1)];
    assert_eq!(
        decoded(&counted_but_missing.concat()).err(),
        Some(DecodeError::Short)
    );
    let fence_ahead = [u(2), u(1), lock(b"a\0", 0, b"t", 9, 7)];
    assert_eq!(
        decoded(&fence_ahead.concat()).err(),
        Some(DecodeError::FenceOutOfRange { fence: 7, next: 2 })
    );
    let repeated = [
        u(3),
        u(2),
        lock(b"a\0", 1, b"t", 9, 1),
        lock(b"a\0", 1, b"t", 9, 2),
    ];
    assert_eq!(
        decoded(&repeated.concat()).err(),
        Some(DecodeError::OutOfOrder)
    );
    let bad_mode = [u(2), u(1), lock(b"a\0", 2, b"t", 9, 1)];
    assert_eq!(
        decoded(&bad_mode.concat()).err(),
        Some(DecodeError::UnknownMode(2))
    );
    let empty_token = [u(2), u(1), lock(b"a\0", 0, b"", 9, 1)];
    assert_eq!(
        decoded(&empty_token.concat()).err(),
        Some(DecodeError::BadToken)
    );
    // Two readers of one path, and an owner inside its own lock, are what a real table holds.
    let shared = [
        u(4),
        u(3),
        lock(b"a\0", 0, b"t", 9, 1),
        lock(b"a\0", 1, b"t", 9, 2),
        lock(b"a\0", 1, b"u", 9, 3),
    ];
    assert_eq!(
        decoded(&shared.concat()).err(),
        Some(DecodeError::Conflicting)
    );
    let readers = [
        u(3),
        u(2),
        lock(b"a\0", 1, b"t", 9, 1),
        lock(b"a\0", 1, b"u", 9, 2),
    ];
    assert_eq!(decoded(&readers.concat()).map(|t| t.len()), Ok(2));
}
