//! The module's configuration: `pathlock.*` module configs, settable in redis.conf after
//! `loadmodule`, with `CONFIG SET`, with `MODULE LOADEX ... CONFIG`, and as arguments after the
//! module's path (`loadmodule /path/libpathlock.so max-ttl 60000`). [`NUMERIC`] and [`FLAGS`]
//! declare each once, with its range; `lib.rs` registers them. The server checks each value it
//! is given against that range and refuses it with its own error; it does not check a default,
//! so the module's arguments, which become the defaults, are checked here ([`module_args`]).
//!
//! Level 0: imports nothing of the crate. Read by `args`, the commands and `lib.rs`.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use pathlock_core::{PathLimits, NOTE_CEILING};

pub const DEFAULT_TTL_MS: i64 = 30_000;
pub const MAX_TTL_MS: i64 = 86_400_000;
pub const MAX_PATH_BYTES: i64 = 4096;
pub const MAX_DEPTH: i64 = 256;
pub const MAX_PATHS_PER_CALL: i64 = 64;
pub const MAX_NOTE_BYTES: i64 = 256;

/// The largest value any of the limits may be set to: ten years of TTL, and limits far above
/// what a file system uses.
pub const TTL_CEILING_MS: i64 = 315_360_000_000;
pub const LIMIT_CEILING: i64 = PathLimits::CEILING.max_bytes as i64;
/// Listings walk the tree recursively, one stack frame per level; this bound keeps that far
/// inside the server's stack.
pub const DEPTH_CEILING: i64 = PathLimits::CEILING.max_depth as i64;
/// The longest note any server takes: what an RDB value or an effect may carry at most.
pub const NOTE_CEILING_BYTES: i64 = NOTE_CEILING as i64;

pub static DEFAULT_TTL: AtomicI64 = AtomicI64::new(DEFAULT_TTL_MS);
pub static MAX_TTL: AtomicI64 = AtomicI64::new(MAX_TTL_MS);
pub static PATH_BYTES: AtomicI64 = AtomicI64::new(MAX_PATH_BYTES);
pub static DEPTH: AtomicI64 = AtomicI64::new(MAX_DEPTH);
pub static PATHS_PER_CALL: AtomicI64 = AtomicI64::new(MAX_PATHS_PER_CALL);
/// `pathlock.max-note-bytes`: the longest `NOTE` an `ACQUIRE` may give; 0 refuses every note
/// but the empty one.
pub static NOTE_BYTES: AtomicI64 = AtomicI64::new(MAX_NOTE_BYTES);
/// `pathlock.accept-eviction`: grant locks even where the `maxmemory` policy can evict project
/// keys (`eviction`).
pub static ACCEPT_EVICTION: AtomicBool = AtomicBool::new(false);
/// `pathlock.lower-impossible-fences`: while loading (a restart, `DEBUG RELOAD`, a full sync, an
/// AOF replay), lower a fence mark or counter above the ceiling to the admissible one instead of
/// refusing the file (`fences`, `keytype`). Off by default: it is the operator's recovery of a
/// server whose files an older version let a forged value into.
pub static LOWER_IMPOSSIBLE_FENCES: AtomicBool = AtomicBool::new(false);

/// A numeric setting: its name after `pathlock.`, where it is kept, its default and its range.
pub struct Numeric {
    pub name: &'static str,
    pub value: &'static AtomicI64,
    pub default: i64,
    pub min: i64,
    pub max: i64,
}

/// A yes/no setting: its name after `pathlock.`, where it is kept, and its default.
pub struct Flag {
    pub name: &'static str,
    pub value: &'static AtomicBool,
    pub default: bool,
}

/// Every numeric setting, as the server lists them.
pub static NUMERIC: [Numeric; 6] = [
    Numeric {
        name: "default-ttl",
        value: &DEFAULT_TTL,
        default: DEFAULT_TTL_MS,
        min: 1,
        max: TTL_CEILING_MS,
    },
    Numeric {
        name: "max-ttl",
        value: &MAX_TTL,
        default: MAX_TTL_MS,
        min: 1,
        max: TTL_CEILING_MS,
    },
    Numeric {
        name: "max-path-bytes",
        value: &PATH_BYTES,
        default: MAX_PATH_BYTES,
        min: 1,
        max: LIMIT_CEILING,
    },
    Numeric {
        name: "max-depth",
        value: &DEPTH,
        default: MAX_DEPTH,
        min: 1,
        max: DEPTH_CEILING,
    },
    Numeric {
        name: "max-paths-per-call",
        value: &PATHS_PER_CALL,
        default: MAX_PATHS_PER_CALL,
        min: 1,
        max: LIMIT_CEILING,
    },
    Numeric {
        name: "max-note-bytes",
        value: &NOTE_BYTES,
        default: MAX_NOTE_BYTES,
        min: 0,
        max: NOTE_CEILING_BYTES,
    },
];

/// Every yes/no setting.
pub static FLAGS: [Flag; 2] = [
    Flag {
        name: "accept-eviction",
        value: &ACCEPT_EVICTION,
        default: false,
    },
    Flag {
        name: "lower-impossible-fences",
        value: &LOWER_IMPOSSIBLE_FENCES,
        default: false,
    },
];

/// The defaults the module's arguments give: for each of [`NUMERIC`] and [`FLAGS`], in order,
/// the value the arguments name, or the declared default.
#[derive(Debug, PartialEq, Eq)]
pub struct Defaults {
    pub numeric: [i64; 6],
    pub flags: [bool; 2],
}

/// Why the module's arguments were refused; the module names it in the log and does not load.
#[derive(Debug, PartialEq, Eq)]
pub enum ArgError<'a> {
    /// A name without a value: the arguments come in pairs.
    Unpaired(&'a [u8]),
    /// No setting of this name.
    Unknown(&'a [u8]),
    /// A numeric setting given something that is not an integer in its range.
    OutOfRange {
        name: &'static str,
        value: &'a [u8],
        min: i64,
        max: i64,
    },
    /// A yes/no setting given something else.
    NotYesNo { name: &'static str, value: &'a [u8] },
}

/// Reads the module's arguments, pairs of a setting's name (with or without `pathlock.`, in
/// any case, as the server reads config names) and its value, into the defaults to register.
/// The server checks no default against its range, and the arguments used to be read with
/// nothing checked at all: `max-ttl 0` started a server whose every lease had lapsed at once,
/// and a misspelt name was ignored. A name given twice takes its last value, as in redis.conf.
pub fn module_args<'a>(args: &[&'a [u8]]) -> Result<Defaults, ArgError<'a>> {
    let mut defaults = Defaults {
        numeric: NUMERIC.each_ref().map(|n| n.default),
        flags: FLAGS.each_ref().map(|f| f.default),
    };
    for pair in args.chunks(2) {
        let name = pair[0];
        let Some(&value) = pair.get(1) else {
            return Err(ArgError::Unpaired(name));
        };
        let lower = name.to_ascii_lowercase();
        let short = lower.strip_prefix(b"pathlock.").unwrap_or(&lower);
        if let Some(i) = NUMERIC.iter().position(|n| n.name.as_bytes() == short) {
            let n = &NUMERIC[i];
            let parsed = std::str::from_utf8(value)
                .ok()
                .and_then(|text| text.parse::<i64>().ok())
                .filter(|v| (n.min..=n.max).contains(v));
            defaults.numeric[i] = parsed.ok_or(ArgError::OutOfRange {
                name: n.name,
                value,
                min: n.min,
                max: n.max,
            })?;
        } else if let Some(i) = FLAGS.iter().position(|f| f.name.as_bytes() == short) {
            defaults.flags[i] = match value.to_ascii_lowercase().as_slice() {
                b"yes" => true,
                b"no" => false,
                _ => {
                    return Err(ArgError::NotYesNo {
                        name: FLAGS[i].name,
                        value,
                    })
                }
            };
        } else {
            return Err(ArgError::Unknown(name));
        }
    }
    Ok(defaults)
}

pub fn lower_impossible_fences() -> bool {
    LOWER_IMPOSSIBLE_FENCES.load(Ordering::Relaxed)
}

pub fn max_ttl() -> i64 {
    MAX_TTL.load(Ordering::Relaxed)
}

/// The TTL of an acquire that names none. A default above `max-ttl` is capped there, so
/// lowering `max-ttl` alone is enough to bound every lease.
pub fn default_ttl() -> i64 {
    DEFAULT_TTL.load(Ordering::Relaxed).min(max_ttl())
}

pub fn max_paths_per_call() -> i64 {
    PATHS_PER_CALL.load(Ordering::Relaxed)
}

pub fn max_note_bytes() -> i64 {
    NOTE_BYTES.load(Ordering::Relaxed)
}

pub fn path_limits() -> PathLimits {
    // The registered ranges keep both values positive and small, so the casts are exact.
    PathLimits {
        max_bytes: PATH_BYTES.load(Ordering::Relaxed) as usize,
        max_depth: DEPTH.load(Ordering::Relaxed) as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read<'a>(args: &[&'a str]) -> Result<Defaults, ArgError<'a>> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        module_args(&bytes)
    }

    #[test]
    fn no_arguments_give_the_declared_defaults() {
        let defaults = read(&[]).expect("no arguments");
        assert_eq!(defaults.numeric, NUMERIC.each_ref().map(|n| n.default));
        assert_eq!(defaults.flags, [false, false]);
    }

    #[test]
    fn arguments_name_settings_with_or_without_the_prefix() {
        let defaults = read(&[
            "max-ttl",
            "60000",
            "PATHLOCK.Max-Note-Bytes",
            "0",
            "pathlock.accept-eviction",
            "YES",
            "max-ttl",
            "70000",
        ])
        .expect("valid arguments");
        assert_eq!(
            defaults.numeric[1], 70_000,
            "the last value of a name given twice"
        );
        assert_eq!(defaults.numeric[5], 0, "max-note-bytes may be 0");
        assert_eq!(defaults.flags, [true, false]);
    }

    #[test]
    fn arguments_outside_a_range_or_unknown_are_refused() {
        let out = |name: &'static str, value: &'static str, min, max| ArgError::OutOfRange {
            name,
            value: value.as_bytes(),
            min,
            max,
        };
        assert_eq!(
            read(&["max-ttl", "0"]),
            Err(out("max-ttl", "0", 1, TTL_CEILING_MS))
        );
        assert_eq!(
            read(&["max-depth", "99999999999999999999"]),
            Err(out("max-depth", "99999999999999999999", 1, DEPTH_CEILING))
        );
        assert_eq!(
            read(&["default-ttl", "30s"]),
            Err(out("default-ttl", "30s", 1, TTL_CEILING_MS))
        );
        assert_eq!(
            read(&["bogus", "5"]),
            Err(ArgError::Unknown(b"bogus".as_slice()))
        );
        assert_eq!(
            read(&["max-ttl"]),
            Err(ArgError::Unpaired(b"max-ttl".as_slice()))
        );
        assert_eq!(
            read(&["accept-eviction", "true"]),
            Err(ArgError::NotYesNo {
                name: "accept-eviction",
                value: b"true".as_slice()
            })
        );
    }
}
