//! The RDB payload's decoder refuses what `encode` cannot have written, and takes back exactly
//! what it wrote; payloads of versions 1 (before notes) and 2 (one item per field, before the
//! dense encoding) still load.

use pathlock_core::persist::{
    decode, decode_version, encode, ByteSink, ByteSource, DecodeError, CHUNK_BYTES, VERSION,
};
use pathlock_core::{LockInfo, LockTable, Mode, Note, Path, PathLimits, Token, NOTE_CEILING};

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

fn decode_v2(payload: &[u8]) -> Result<LockTable, DecodeError> {
    decode_version(&mut ByteSource::new(payload), 2, u64::MAX)
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
    let table = decode_v2(&v2).expect("a version 2 payload");
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
    assert!(decode_v2(&v1).is_err());
    let too_long = [
        u(2),
        u(1),
        noted(b"A\0", 0, b"t", 9, 1, &vec![b'x'; NOTE_CEILING + 1]),
    ];
    assert_eq!(
        decode_v2(&too_long.concat()).err(),
        Some(DecodeError::NoteTooLong(NOTE_CEILING + 1))
    );
    assert_eq!(
        decode_version(&mut ByteSource::new(&v2), VERSION + 1, u64::MAX).err(),
        Some(DecodeError::UnknownVersion(VERSION + 1))
    );
}

#[test]
fn a_counter_above_the_ceiling_is_refused_before_anything_is_read() {
    let one_lock = |counter: u64| [u(counter), u(1), noted(b"a\0", 0, b"t", 9, 5, b"")].concat();
    let ceiling = 1_000;
    let v2 = |payload: &[u8]| decode_version(&mut ByteSource::new(payload), 2, ceiling);
    assert_eq!(v2(&one_lock(ceiling)).map(|t| t.next_fence()), Ok(ceiling));
    // The payload: one lock, its counter set to 2^53 + 5.
    let poisoned = (1 << 53) + 5;
    assert_eq!(
        v2(&one_lock(poisoned)).err(),
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

/// A payload of version 3 (the dense encoding), written by hand: the counter, the chunks, and
/// the empty chunk that ends them.
fn dense(counter: u64, chunks: &[Vec<u8>]) -> Vec<u8> {
    let mut out = u(counter);
    for chunk in chunks {
        out.extend(buf(chunk));
    }
    out.extend(buf(&[]));
    out
}

fn decode_v3(payload: &[u8]) -> Result<LockTable, DecodeError> {
    decode(&mut ByteSource::new(payload), u64::MAX)
}

/// The bytes of a chunk of the dense encoding, field by field.
#[derive(Clone, Default)]
struct Chunk(Vec<u8>);

impl Chunk {
    fn varint(mut self, mut value: u64) -> Chunk {
        while value >= 0x80 {
            self.0.push(value as u8 | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
        self
    }

    fn raw(mut self, bytes: &[u8]) -> Chunk {
        self.0.extend_from_slice(bytes);
        self
    }

    fn counted(self, bytes: &[u8]) -> Chunk {
        self.varint(bytes.len() as u64).raw(bytes)
    }

    /// A step of the path: `up` segments to leave, then `down` to descend.
    fn step(self, up: u64, down: &[&[u8]]) -> Chunk {
        let mut chunk = self.varint(up).varint(down.len() as u64);
        for segment in down {
            chunk = chunk.counted(segment);
        }
        chunk
    }

    /// A signed difference, folded as the encoding folds it.
    fn zigzag(self, delta: i64) -> Chunk {
        self.varint(((delta << 1) ^ (delta >> 63)) as u64)
    }

    /// The owners: their number, then each with a plain token and its lease after the
    /// previous one's.
    fn owners(self, owners: &[(&[u8], u64)]) -> Chunk {
        let mut chunk = self.varint(owners.len() as u64);
        for (token, lease) in owners {
            chunk = chunk.raw(&[0]).counted(token).varint(*lease);
        }
        chunk
    }

    /// A lock's flags, its owner's number when it is named, and its fence after the previous.
    fn lock(self, mode: u8, owner: Option<u64>, fence: i64) -> Chunk {
        match owner {
            Some(number) => self.raw(&[mode | 1 << 1]).varint(number),
            None => self.raw(&[mode]),
        }
        .zigzag(fence)
    }
}

#[test]
fn the_dense_encoding_takes_back_every_shape() {
    let t = |s: &str| Token::new(s.as_bytes()).expect("a token");
    let mut table = LockTable::with_small_owners_up_to(8);
    let grant_note = Note::from(&b"one grant, one note"[..]);
    let items: Vec<(Mode, Path)> = (0..5)
        .map(|i| (Mode::Write, path(&format!("/grant/f{i}"))))
        .collect();
    table.grant_noted(&t("granter"), 900, 1, &items, Some(&grant_note));
    // Readers sharing a folder, and two of them a path beneath it.
    for (i, reader) in ["r3", "r1", "r2"].iter().enumerate() {
        table.grant(
            &t(reader),
            500 + i as u64,
            10 + i as u64,
            &[(Mode::Read, path("/docs"))],
        );
    }
    table.grant(&t("r3"), 500, 13, &[(Mode::Read, path("/docs/mine"))]);
    table.grant(&t("r1"), 500, 14, &[(Mode::Read, path("/docs/mine"))]);
    // A big owner (over 8 locks here) whose locks lie among others'.
    for i in 0..40u64 {
        table.grant(
            &t("big"),
            700,
            20 + i,
            &[(Mode::Write, path(&format!("/m/{i:02}/b")))],
        );
        table.grant(
            &t(&format!("s{i}")),
            300 + i,
            100 + i,
            &[(Mode::Write, path(&format!("/m/{i:02}/s")))],
        );
    }
    // Generated, upper-case and long tokens, binary and long segments, a deep path.
    let generated = Token::generate();
    table.grant(&generated, 800, 200, &[(Mode::Write, path("/gen"))]);
    table.grant(&generated, 800, 199, &[(Mode::Read, path("/gen"))]);
    table.grant(
        &t("123E4567-E89B-12D3-A456-426614174000"),
        800,
        201,
        &[(Mode::Read, path("/upper"))],
    );
    table.grant(
        &t(&"x".repeat(128)),
        800,
        202,
        &[(Mode::Write, path(&format!("/long/{}", "s".repeat(300))))],
    );
    let binary = Path::parse(b"/\x00\x01/%s/\xff\xfe", &PathLimits::default()).expect("a path");
    table.grant(&t("bin"), 800, 203, &[(Mode::Write, binary)]);
    let deep = Path::parse("/d".repeat(300).as_bytes(), &PathLimits::CEILING).expect("a path");
    table.grant(&t("deep"), 800, 204, &[(Mode::Read, deep)]);
    // A lapsed lock that a later grant passed over (as a replica applies a master's grant) is
    // cut, so left out; a released big owner's locks, still being freed, are left out too.
    table.grant(&t("lapsed"), 50, 205, &[(Mode::Write, path("/cut"))]);
    table.grant(&t("over"), 1_000, 206, &[(Mode::Read, path("/cut"))]);
    let cut = |lock: &pathlock_core::LockInfo| lock.token == t("lapsed");
    assert!(table.stored().iter().any(cut) && !table.iter().any(|lock| cut(&lock)));
    assert_eq!(table.stored().len(), table.iter().count() + 1);
    for i in 0..20 {
        table.grant(
            &t("gone"),
            900,
            300 + i,
            &[(Mode::Read, path(&format!("/gone/{i}")))],
        );
    }
    table.release(0, &t("gone"), None, false);
    assert!(table.freeing() > 0);

    let mut sink = ByteSink::default();
    encode(&table, &mut sink);
    let again = decode_v3(&sink.bytes).expect("its own payload");
    again.check_integrity().expect("consistent");
    assert_eq!(
        again.iter().collect::<Vec<_>>(),
        table.iter().collect::<Vec<_>>()
    );
    assert_eq!(again.next_fence(), table.next_fence());
    assert!(again
        .iter()
        .all(|lock| lock.path != path("/cut") || lock.token == t("over")));
    assert!(again.iter().all(|lock| lock.token != t("gone")));
    // What it loaded is a table like any other: a reader's request passes the readers of /docs,
    // a writer's does not, and the big owner still takes what it holds beneath.
    assert!(!again.is_blocked(0, &t("r9"), Mode::Read, &path("/docs")));
    assert!(again.is_blocked(0, &t("r9"), Mode::Write, &path("/docs")));
    assert!(!again.is_blocked(0, &t("big"), Mode::Write, &path("/m/07/b/c")));
    // The owner whose only lock was cut is written with the owners but holds nothing there,
    // so loading forgets it; from then on a round trip writes the same bytes.
    let mut twice = ByteSink::default();
    encode(&again, &mut twice);
    assert!(twice.bytes.len() < sink.bytes.len());
    let third = decode_v3(&twice.bytes).expect("its own payload");
    let mut thrice = ByteSink::default();
    encode(&third, &mut thrice);
    assert!(
        thrice.bytes == twice.bytes,
        "a round trip changed the bytes"
    );
}

/// A tree keeps a chain of segments as one node until a lock or a branch splits it, and a table
/// loaded from a payload is built in that shape too: as many nodes, and the same bytes written, as a payload's steps count and name segments, not nodes.
#[test]
fn a_tree_of_chains_writes_what_a_tree_of_single_segments_writes() {
    let t = |s: &str| Token::new(s.as_bytes()).expect("a token");
    let mut table = LockTable::with_limits(64, 0);
    for i in 0..20u64 {
        let items = [(Mode::Write, path(&format!("/p{}/q/r{i}/s", i % 3)))];
        table.grant(&t(&format!("t{i}")), 900 + i, 1 + i, &items);
    }
    // A lock on a segment inside a chain splits it.
    table.grant(&t("t1"), 901, 100, &[(Mode::Read, path("/p1/q/r1"))]);
    table.check_integrity().expect("consistent");
    let mut sink = ByteSink::default();
    encode(&table, &mut sink);
    let loaded = decode_v3(&sink.bytes).expect("its own payload");
    loaded.check_integrity().expect("consistent");
    assert!(!loaded.is_compact());
    assert_eq!(loaded.node_count(), table.node_count());
    let mut again = ByteSink::default();
    encode(&loaded, &mut again);
    assert!(
        again.bytes == sink.bytes,
        "the loaded tree wrote other bytes"
    );
}

#[test]
fn a_big_project_spans_chunks_and_comes_back_whole() {
    let mut table = LockTable::new();
    for i in 0..20_000u64 {
        let token = Token::new(format!("owner-{}", i % 5_000).as_bytes()).expect("a token");
        let path = path(&format!("/folder-{}/file-with-a-longer-name-{i}", i % 97));
        let mode = if i % 3 == 0 { Mode::Read } else { Mode::Write };
        table.grant(&token, 1_000_000 + i % 7, 1 + i, &[(mode, path)]);
    }
    let mut sink = ByteSink::default();
    encode(&table, &mut sink);
    // Count the chunks: the counter, then buffers up to the empty one.
    let mut source = ByteSource::new(&sink.bytes);
    use pathlock_core::persist::Source;
    source.unsigned().expect("the counter");
    let mut chunks = 0;
    while let Some(chunk) = source.buffer() {
        if chunk.is_empty() {
            break;
        }
        assert!(chunk.len() < CHUNK_BYTES + 1_000, "{}", chunk.len());
        chunks += 1;
    }
    assert!(chunks >= 3, "{chunks} chunks");
    let again = decode_v3(&sink.bytes).expect("its own payload");
    again.check_integrity().expect("consistent");
    assert_eq!(
        again.iter().collect::<Vec<_>>(),
        table.iter().collect::<Vec<_>>()
    );
    assert_eq!(again.len(), 20_000);
}

#[test]
fn dense_payloads_that_no_encoder_writes_are_refused_with_their_reason() {
    let one = |chunk: Chunk| dense(100, &[chunk.0]);
    let tu = || Chunk::default().owners(&[(b"t", 9), (b"u", 0)]);
    let a = || tu().step(0, &[b"a"]).lock(0, Some(0), 1);
    // Positive control: a well-formed chunk loads, and so does the same split in two.
    let good = a().step(1, &[b"b"]).lock(1, Some(1), 1);
    assert_eq!(decode_v3(&one(good.clone())).map(|t| t.len()), Ok(2));
    let split = dense(
        100,
        &[
            a().0,
            Chunk::default().step(1, &[b"b"]).lock(1, Some(1), 1).0,
        ],
    );
    assert_eq!(decode_v3(&split).map(|t| t.len()), Ok(2));
    let w = |chunk: Chunk| chunk.raw(&[0]).zigzag(1);
    let cases: Vec<(&str, Vec<u8>, DecodeError)> = vec![
        ("no end", [u(100), buf(&a().0)].concat(), DecodeError::Short),
        (
            "cut short",
            one(Chunk(a().0[..a().0.len() - 1].to_vec())),
            DecodeError::Short,
        ),
        (
            "fewer owners than counted",
            one(Chunk::default().varint(2).raw(&[0]).counted(b"t").varint(9)),
            DecodeError::Short,
        ),
        (
            "a writer beneath another's writer",
            one(a().step(0, &[b"b"]).lock(0, Some(1), 1)),
            DecodeError::Conflicting,
        ),
        (
            "a reader beside another's writer",
            one(a().step(0, &[]).lock(1, Some(1), 1)),
            DecodeError::Conflicting,
        ),
        (
            "a sibling before the one it follows",
            one(tu()
                .step(0, &[b"b"])
                .lock(0, Some(0), 1)
                .step(1, &[b"a"])
                .lock(0, Some(1), 1)),
            DecodeError::OutOfOrder,
        ),
        (
            "an ancestor after its descendant",
            one(a().step(1, &[]).lock(1, Some(1), 1)),
            DecodeError::OutOfOrder,
        ),
        (
            "a climb above the root",
            one(a().step(2, &[b"b"]).lock(1, Some(1), 1)),
            DecodeError::OutOfOrder,
        ),
        (
            "one lock twice",
            one(a().step(0, &[]).lock(0, None, 1)),
            DecodeError::OutOfOrder,
        ),
        (
            "readers out of token order",
            one(tu()
                .step(0, &[b"a"])
                .lock(1, Some(1), 1)
                .step(0, &[])
                .lock(1, Some(0), 1)),
            DecodeError::OutOfOrder,
        ),
        (
            "a lease past 64 bits",
            one(Chunk::default()
                .varint(2)
                .raw(&[0])
                .counted(b"t")
                .varint(9)
                .raw(&[0])
                .counted(b"u")
                .raw(&[0xff; 9])
                .raw(&[1])),
            DecodeError::Malformed("a lease above 64 bits"),
        ),
        (
            "one token introduced twice",
            one(Chunk::default()
                .owners(&[(b"t", 9), (b"t", 0)])
                .step(0, &[b"a"])
                .lock(1, Some(0), 1)
                .step(0, &[])
                .lock(1, Some(1), 1)),
            DecodeError::OutOfOrder,
        ),
        (
            "one token introduced twice, on two paths",
            one(Chunk::default()
                .owners(&[(b"t", 9), (b"t", 0)])
                .step(0, &[b"a"])
                .lock(0, Some(0), 1)
                .step(1, &[b"b"])
                .lock(0, Some(1), 1)),
            DecodeError::RepeatedOwner,
        ),
        (
            "an owner never introduced",
            one(a().step(1, &[b"b"]).lock(0, Some(2), 1)),
            DecodeError::Malformed("an owner that was never introduced"),
        ),
        (
            "the previous owner of the first lock",
            one(tu().step(0, &[b"a"]).lock(0, None, 1)),
            DecodeError::Malformed("no previous owner"),
        ),
        (
            "unknown flags",
            one(tu().step(0, &[b"a"]).raw(&[0x80]).zigzag(1)),
            DecodeError::Malformed("unknown flags"),
        ),
        (
            "an unknown kind of token",
            one(Chunk::default().varint(1).raw(&[2]).counted(b"t").varint(9)),
            DecodeError::Malformed("unknown kind of token"),
        ),
        (
            "the last note of the first",
            one(tu()
                .step(0, &[b"a"])
                .raw(&[1 << 1 | 1 << 2])
                .varint(0)
                .zigzag(1)),
            DecodeError::Malformed("no note before"),
        ),
        (
            "an empty note",
            one(tu()
                .step(0, &[b"a"])
                .raw(&[1 << 1 | 2 << 2])
                .varint(0)
                .zigzag(1)
                .counted(b"")),
            DecodeError::Malformed("an empty note"),
        ),
        (
            "a number of eleven bytes",
            one(Chunk::default().raw(&[0xff; 10]).raw(&[0])),
            DecodeError::Malformed("a number above 64 bits"),
        ),
        (
            "an empty token",
            one(Chunk::default().owners(&[(b"", 9)])),
            DecodeError::BadToken,
        ),
        (
            "a token of 129 bytes",
            one(Chunk::default().owners(&[(&[b'x'; 129], 9)])),
            DecodeError::BadToken,
        ),
        (
            "fence zero",
            one(tu().step(0, &[b"a"]).lock(0, Some(0), 0)),
            DecodeError::FenceOutOfRange {
                fence: 0,
                next: 100,
            },
        ),
        (
            "a fence at the counter",
            one(tu().step(0, &[b"a"]).lock(0, Some(0), 100)),
            DecodeError::FenceOutOfRange {
                fence: 100,
                next: 100,
            },
        ),
        (
            "a fence below zero",
            one(tu().step(0, &[b"a"]).lock(0, Some(0), -1)),
            DecodeError::FenceOutOfRange {
                fence: u64::MAX,
                next: 100,
            },
        ),
        (
            "a dot-dot segment",
            one(w(tu().step(0, &[b".."]))),
            DecodeError::MalformedPath,
        ),
        (
            "an empty segment",
            one(w(tu().step(0, &[b""]))),
            DecodeError::MalformedPath,
        ),
        (
            "a terminator inside a segment",
            one(w(tu().step(0, &[b"a\0b"]))),
            DecodeError::MalformedPath,
        ),
        (
            "an escape of nothing",
            one(w(tu().step(0, &[b"a\x01"]))),
            DecodeError::MalformedPath,
        ),
        (
            "too deep",
            one(w(tu().step(
                0,
                &vec![&b"d"[..]; PathLimits::CEILING.max_depth + 1],
            ))),
            DecodeError::MalformedPath,
        ),
        (
            "a note over the ceiling",
            one(tu()
                .step(0, &[b"a"])
                .raw(&[1 << 1 | 2 << 2])
                .varint(0)
                .zigzag(1)
                .counted(&vec![b'n'; NOTE_CEILING + 1])),
            DecodeError::NoteTooLong(NOTE_CEILING + 1),
        ),
    ];
    for (name, payload, reason) in cases {
        assert_eq!(decode_v3(&payload).err(), Some(reason), "{name}");
    }
    // The deepest path allowed loads; an owner that holds nothing is forgotten.
    let deepest = tu()
        .step(0, &vec![&b"d"[..]; PathLimits::CEILING.max_depth])
        .lock(0, Some(0), 1);
    let table = decode_v3(&one(deepest)).expect("the deepest path");
    assert_eq!(table.len(), 1);
    table.check_integrity().expect("consistent");
    // A UUID token comes back as its text.
    let uuid = Chunk::default()
        .varint(1)
        .raw(&[1])
        .raw(&[0xab; 16])
        .varint(9)
        .step(0, &[b"a"])
        .lock(0, Some(0), 1);
    let table = decode_v3(&one(uuid)).expect("a UUID owner");
    let token = table.iter().next().map(|lock| lock.token);
    assert_eq!(
        token,
        Token::new(b"abababab-abab-abab-abab-abababababab").ok()
    );
}

/// Either form writes the payload of its locks (owners of one lease may come in another
/// order), and a load builds the form a table of that size takes: a small project (at most the
/// compact form's 8 locks) comes back compact, whichever form wrote it, and a larger one as a
/// tree; from the first load on, the payload is the same.
#[test]
fn both_forms_write_their_locks_and_a_load_builds_the_form_that_fits() {
    let t = |s: &str| Token::new(s.as_bytes()).expect("a token");
    let note = Note::from(&b"moving"[..]);
    let fill = |table: &mut LockTable, n: u64| {
        for i in 0..n {
            let noted = (i % 2 == 0).then_some(&note);
            let mode = if i % 3 == 0 { Mode::Read } else { Mode::Write };
            let items = [(mode, path(&format!("/d{}/f{i}", i % 3)))];
            table.grant_noted(
                &t(&format!("o{}", i % 4)),
                1_000 + i % 2,
                1 + i,
                &items,
                noted,
            );
        }
    };
    let payload = |table: &LockTable| {
        let mut sink = ByteSink::default();
        encode(table, &mut sink);
        sink.bytes
    };
    let load = |bytes: &[u8]| {
        let table = decode(&mut ByteSource::new(bytes), u64::MAX).expect("its own payload");
        table.check_integrity().expect("consistent");
        table
    };
    for n in [1, 5, 8, 9, 40] {
        let mut compact = LockTable::new();
        fill(&mut compact, n);
        assert_eq!(compact.is_compact(), n <= 8, "{n} locks");
        let mut tree = LockTable::with_limits(64, 0);
        fill(&mut tree, n);
        assert!(!tree.is_compact());
        for written in [payload(&compact), payload(&tree)] {
            let again = load(&written);
            assert_eq!(again.is_compact(), n <= 8, "{n} locks loaded");
            assert_eq!(
                again.iter().collect::<Vec<_>>(),
                tree.iter().collect::<Vec<_>>()
            );
            assert_eq!(again.locks(0, &path("/d0/f0"))[0].note, Some(note.clone()));
            assert_eq!(again.next_fence(), tree.next_fence());
            let stable = payload(&again);
            assert_eq!(payload(&load(&stable)), stable, "{n} locks: written again");
        }
    }
}

/// Sibling segments that are byte prefixes of one another, that escape (`0x00`, `0x01`, `0x02`),
/// that are UTF-8, that share their first eight bytes or are 255 bytes long. Each is the first
/// segment of a chain the tree keeps as one node, so that the order of siblings is decided by
/// nodes that store several segments.
fn tricky_segments() -> Vec<Vec<u8>> {
    let mut names: Vec<Vec<u8>> = [
        &b"a"[..],
        b"a-b",
        b"ab",
        b"a\x00",
        b"a\x01",
        b"a\x02",
        b"\x00",
        b"\x01",
        b"\x02",
        b"\x01\x01",
        b"a ",
        b"A",
        b"%s",
        b"abcdefgh",
        b"abcdefgh\x00",
        b"abcdefgh\x01",
        b"abcdefghi",
        b"abcdefg",
        b"\xff",
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        "\u{100}".as_bytes(),
        "\u{e9}".as_bytes(),
        "e\u{301}".as_bytes(),
    ]
    .iter()
    .map(|name| name.to_vec())
    .collect();
    names.push(vec![b'a'; 255]);
    names.push([vec![b'a'; 254], vec![b'b']].concat());
    names.push([vec![b'a'; 254], vec![0]].concat());
    names
}

/// A grant as a replica applies it: the token, its lease, the paths it takes and their note.
type Grant = (Token, u64, Vec<(Mode, Path)>, Option<Note>);

/// The locks of a tree whose siblings are `tricky_segments`, each with a chain beneath it; some
/// chains split by a lock on one of their virtual segments, crowds of readers, notes, and a big
/// owner (more than 64 locks). No two owners' locks conflict, so that nothing is cut.
fn tricky_grants() -> Vec<Grant> {
    let t = |s: &str| Token::new(s.as_bytes()).expect("a token");
    let under = |top: &[u8], name: &[u8], rest: &[u8]| {
        Path::parse(&[top, name, rest].concat(), &PathLimits::default()).expect("a path")
    };
    let mut grants = Vec::new();
    let mut big = Vec::new();
    for (i, name) in tricky_segments().iter().enumerate() {
        let mine = t(&format!("t{i:02}"));
        grants.push((
            mine.clone(),
            10_000 + i as u64,
            vec![(Mode::Write, under(b"/f/", name, b"/x/y/z"))],
            (i % 4 == 0).then(|| Note::from(&b"n\x00\xff"[..])),
        ));
        if i % 3 == 0 {
            // On a virtual segment of the chain: it splits the node.
            grants.push((
                mine.clone(),
                10_000 + i as u64,
                vec![(Mode::Read, under(b"/f/", name, b"/x"))],
                None,
            ));
        }
        if i % 5 == 0 {
            // A second child under the chain's virtual segment.
            grants.push((
                mine,
                10_000 + i as u64,
                vec![(Mode::Write, under(b"/f/", name, b"/x/w"))],
                None,
            ));
        }
        // A crowd of readers on a path of its own, and a big owner's locks beside it.
        for reader in ["r1", "r0", "123e4567-e89b-42d3-a456-426614174000"] {
            grants.push((
                t(reader),
                20_000,
                vec![(Mode::Read, under(b"/r/", name, b"/s/t"))],
                None,
            ));
        }
        big.push((Mode::Read, under(b"/r/", name, b"/s/t")));
        big.push((Mode::Read, under(b"/r/", name, b"/u/v")));
        big.push((Mode::Read, under(b"/b/", name, b"")));
    }
    assert!(big.len() > 64);
    grants.push((t("big"), 30_000, big, None));
    grants
}

/// The canonical order of locks that `encode` writes and `decode` insists on, stated plainly:
/// by path, then `WRITE` before `READ`, then by token.
fn reference_order(mut locks: Vec<LockInfo>) -> Vec<LockInfo> {
    locks.sort_by(|a, b| {
        a.path
            .cmp(&b.path)
            .then((a.mode != Mode::Write).cmp(&(b.mode != Mode::Write)))
            .then(a.token.as_bytes().cmp(b.token.as_bytes()))
    });
    locks
}

/// Siblings whose first segments are prefixes of one another, escaped bytes, UTF-8 and 255-byte
/// segments, each heading a chain kept as one node: the tree lists them and writes them in the
/// canonical order, the payload loads back to the same locks, and the loaded tree (a node per
/// segment) writes the same bytes again.
#[test]
fn tricky_siblings_heading_chains_dump_and_restore_in_canonical_order() {
    let mut table = LockTable::with_limits(64, 0);
    let mut fence = 0;
    for (token, deadline, items, note) in tricky_grants() {
        fence += 1;
        table.grant_noted(&token, deadline, fence, &items, note.as_ref());
    }
    table.check_integrity().expect("consistent");
    let listed: Vec<LockInfo> = table.iter().collect();
    assert_eq!(listed.len(), table.len());
    assert_eq!(listed, reference_order(listed.clone()));
    let mut sink = ByteSink::default();
    encode(&table, &mut sink);
    let loaded = decode_v3(&sink.bytes).expect("its own payload");
    loaded.check_integrity().expect("consistent");
    assert_eq!(loaded.iter().collect::<Vec<_>>(), listed);
    let mut again = ByteSink::default();
    encode(&loaded, &mut again);
    assert!(
        again.bytes == sink.bytes,
        "the loaded tree wrote other bytes"
    );
}

/// The bytes a tree of chains writes are those of the same locks granted into a tree that has a
/// node per segment (each path and its ancestors were locked by another owner first and let go
/// after the grant, which leaves them as nodes). The owners are interned in the same order in
/// both, as the payload lists them by that order.
#[test]
fn a_tree_of_chains_writes_the_bytes_of_a_tree_built_another_way() {
    let grants = tricky_grants();
    let mut chains = LockTable::with_limits(64, 0);
    for (fence, (token, deadline, items, note)) in grants.iter().enumerate() {
        chains.grant_noted(token, *deadline, fence as u64 + 2, items, note.as_ref());
    }
    let scaffold = Token::new(b"scaffold").expect("a token");
    let mut segments = LockTable::with_limits(64, 0);
    for (fence, (token, deadline, items, note)) in grants.iter().enumerate() {
        let mut ancestors: Vec<(Mode, Path)> = Vec::new();
        for (_, path) in items {
            let mut prefix = Vec::new();
            for segment in path.segments() {
                // A `/` inside a segment would split it.
                assert!(!segment.contains(&b'/'));
                prefix.push(b'/');
                prefix.extend_from_slice(&segment);
                let p = Path::parse(&prefix, &PathLimits::default()).expect("a path");
                ancestors.push((Mode::Read, p));
            }
        }
        // Fence 1, below every lock's: a higher one would cut the locks it passes over (see
        // `cuts`), as a grant over conflicting locks does.
        segments.grant(&scaffold, 1, 1, &ancestors);
        segments.grant_noted(token, *deadline, fence as u64 + 2, items, note.as_ref());
        segments.release(0, &scaffold, None, false);
    }
    chains.check_integrity().expect("consistent");
    segments.check_integrity().expect("consistent");
    assert!(segments.node_count() > chains.node_count());
    assert_eq!(
        segments.iter().collect::<Vec<_>>(),
        chains.iter().collect::<Vec<_>>()
    );
    let mut from_chains = ByteSink::default();
    encode(&chains, &mut from_chains);
    let mut from_segments = ByteSink::default();
    encode(&segments, &mut from_segments);
    assert!(
        from_chains.bytes == from_segments.bytes,
        "two shapes of one tree wrote other bytes"
    );
}

/// Siblings are listed and written in the byte order of their segments however their first
/// eight bytes compare (the walk sorts children by a key of those bytes, then the ties by the
/// whole segments): segments sharing them, segments that are others' prefixes, bytes that
/// escape. A payload out of that order would not load back.
#[test]
fn siblings_come_in_byte_order_whatever_their_first_eight_bytes() {
    let names: [&[u8]; 14] = [
        b"abcdefghij",
        b"abcdefgh",
        b"b",
        b"abcdefgh0",
        b"abcdefg",
        b"abcdefgh\x01",
        b"abc",
        b"abcdefgi",
        b"ab\x00",
        b"a",
        b"abcdefghi",
        b"ab",
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        b"%s",
    ];
    folder_comes_in_byte_order(&names);
}

/// Grants a lock on `/f/<name>` for each of `names`, in their order, each to a token of its
/// own; checks the locks are listed in byte order and that the payload loads back to them.
fn folder_comes_in_byte_order<N: AsRef<[u8]>>(names: &[N]) {
    let mut table = LockTable::new();
    for (i, name) in names.iter().enumerate() {
        let token = Token::new(format!("t{i}").as_bytes()).expect("a token");
        let path =
            Path::parse(&[b"/f/", name.as_ref()].concat(), &PathLimits::default()).expect("a path");
        table.grant(&token, 1_000, i as u64 + 1, &[(Mode::Write, path)]);
    }
    let listed: Vec<Path> = table.iter().map(|lock| lock.path).collect();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed.len(), names.len());
    assert_eq!(listed, sorted);
    let mut sink = ByteSink::default();
    encode(&table, &mut sink);
    let again = decode_v3(&sink.bytes).expect("its own payload");
    assert_eq!(
        again.iter().collect::<Vec<_>>(),
        table.iter().collect::<Vec<_>>()
    );
}

/// A folder big enough that the walk sorts its children by a radix sort of their keys (from 64
/// children on), holding the names above and generated ones that share their first eight bytes,
/// are prefixes of one another, differ in any byte of their key or only past it: listed and
/// written in byte order, and loaded back to the same locks.
#[test]
fn a_big_folders_children_come_in_byte_order_too() {
    let mut names: Vec<Vec<u8>> = tricky_segments();
    let heads: [&[u8]; 5] = [b"", b"abcdefgh", b"abcdefg", b"\xff\xff", b"a"];
    // A fixed sequence of pseudo-random bytes (a linear congruential generator), so that the
    // test decides the same way on every run.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as u32
    };
    for i in 0..600 {
        let mut name = heads[i % heads.len()].to_vec();
        for _ in 0..1 + next() % 10 {
            // Any byte but the separator and the dot, so that no name is `.` or `..`.
            let byte = match (next() % 256) as u8 {
                b'/' | b'.' => b'x',
                byte => byte,
            };
            name.push(byte);
        }
        names.push(name);
    }
    names.sort();
    names.dedup();
    // Granted in an order of their own, not the byte order.
    names.sort_by_key(|name| name.iter().rev().copied().collect::<Vec<u8>>());
    assert!(names.len() > 500);
    folder_comes_in_byte_order(&names);
}
