//! The RDB payload's decoder refuses what `encode` cannot have written, and takes back exactly
//! what it wrote; payloads of version 1 (before notes) still load.

use pathlock_core::persist::{decode, decode_version, encode, ByteSink, ByteSource, DecodeError};
use pathlock_core::{LockTable, Mode, Note, Path, PathLimits, Token, NOTE_CEILING};

fn u(n: u64) -> Vec<u8> {
    n.to_le_bytes().to_vec()
}

fn buf(bytes: &[u8]) -> Vec<u8> {
    [u(bytes.len() as u64), bytes.to_vec()].concat()
}

fn lock(key: &[u8], mode: u64, token: &[u8], deadline: u64, fence: u64) -> Vec<u8> {
    [buf(key), u(mode), buf(token), u(deadline), u(fence)].concat()
}

/// A lock of version 2: version 1's fields, then the note (empty for none).
fn noted(key: &[u8], mode: u64, token: &[u8], deadline: u64, fence: u64, note: &[u8]) -> Vec<u8> {
    [lock(key, mode, token, deadline, fence), buf(note)].concat()
}

/// Decodes a payload of version 1, the layout the forged payloads below are written in, with no
/// ceiling of its own: the fence rule is the module's, tested below on its own.
fn decoded(payload: &[u8]) -> Result<LockTable, DecodeError> {
    decode_version(&mut ByteSource::new(payload), 1, u64::MAX)
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
    let note = Note::from(&b"alice: move \x00\x01\r\n \xc4\x80"[..]);
    table.grant_noted(&t("d"), 400, 6, &[(Mode::Write, path("/D"))], Some(&note));
    table.grant(&t("lapsed"), 50, 7, &[(Mode::Write, path("/Z"))]);
    let mut sink = ByteSink::default();
    encode(&table, &mut sink);
    let again = decode(&mut ByteSource::new(&sink.bytes), u64::MAX).expect("its own payload");
    assert_eq!(again.locks(0, &path("/D"))[0].note, Some(note));
    assert_eq!(
        again.iter().collect::<Vec<_>>(),
        table.iter().collect::<Vec<_>>()
    );
    assert_eq!(again.len(), 6);
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

#[test]
fn version_two_carries_notes_and_version_one_loads_without_them() {
    let v2 = [
        u(3),
        u(2),
        noted(b"A\0", 0, b"t1", 9, 1, b"move \x00 \r\n"),
        noted(b"B\0", 1, b"t2", 9, 2, b""),
    ]
    .concat();
    let table = decode(&mut ByteSource::new(&v2), u64::MAX).expect("a version 2 payload");
    let notes: Vec<Option<Note>> = table.iter().map(|l| l.note).collect();
    assert_eq!(notes, [Some(Note::from(&b"move \x00 \r\n"[..])), None]);
    table.check_integrity().expect("consistent");
    // The same locks written by version 1, which had no notes.
    let v1 = [
        u(3),
        u(2),
        lock(b"A\0", 0, b"t1", 9, 1),
        lock(b"B\0", 1, b"t2", 9, 2),
    ]
    .concat();
    let old = decoded(&v1).expect("a version 1 payload");
    assert!(old.iter().all(|l| l.note.is_none()));
    assert_eq!(old.len(), 2);
    // Read as version 2, version 1's payload is short: each lock lacks its note.
    assert!(decode(&mut ByteSource::new(&v1), u64::MAX).is_err());
    let too_long = [
        u(2),
        u(1),
        noted(b"A\0", 0, b"t", 9, 1, &vec![b'x'; NOTE_CEILING + 1]),
    ];
    assert_eq!(
        decode(&mut ByteSource::new(&too_long.concat()), u64::MAX).err(),
        Some(DecodeError::NoteTooLong(NOTE_CEILING + 1))
    );
    assert_eq!(
        decode_version(&mut ByteSource::new(&v2), 3, u64::MAX).err(),
        Some(DecodeError::UnknownVersion(3))
    );
}

#[test]
fn a_counter_above_the_ceiling_is_refused_before_anything_is_read() {
    let one_lock = |counter: u64| [u(counter), u(1), noted(b"a\0", 0, b"t", 9, 5, b"")].concat();
    let ceiling = 1_000;
    assert_eq!(
        decode(&mut ByteSource::new(&one_lock(ceiling)), ceiling).map(|t| t.next_fence()),
        Ok(ceiling)
    );
    // The payload: one lock, its counter set to 2^53 + 5.
    let poisoned = (1 << 53) + 5;
    assert_eq!(
        decode(&mut ByteSource::new(&one_lock(poisoned)), ceiling).err(),
        Some(DecodeError::CounterAboveCeiling {
            next: poisoned,
            ceiling
        })
    );
    // Refused at the counter, so a payload cut right after it is refused for the same reason.
    assert_eq!(
        decode(&mut ByteSource::new(&u(ceiling + 1)), ceiling).err(),
        Some(DecodeError::CounterAboveCeiling {
            next: ceiling + 1,
            ceiling
        })
    );
}
