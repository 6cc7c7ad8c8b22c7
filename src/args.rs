//! Turning a client's arguments into engine requests. Everything a client sends is checked here,
//! before any key is touched, so a bad argument anywhere fails the whole command unchanged.
//!
//! Level 1: imports `config` and `errors`. Called by the command handlers.

use pathlock_core::{Items, Mode, Note, Path, Token};

use crate::config;
use crate::errors::{for_client, Error, ERR_MISSING_PATH, ERR_NO_PATHS};

/// `[TOKEN token] [TTL ms] [WAIT ms] [NOTE note] mode path [mode path ...]`
#[derive(Debug)]
pub struct Acquire {
    /// `None` when the module is to generate one.
    pub token: Option<Token>,
    pub ttl: u64,
    /// How long to block for the locks; 0 does not block.
    pub wait: u64,
    /// `None` without `NOTE`: the locks it re-grants keep their notes.
    pub note: Option<Note>,
    pub items: Items,
}

pub fn acquire(words: &[&[u8]]) -> Result<Acquire, Error> {
    let mut token = None;
    let mut ttl = None;
    let mut wait = None;
    let mut note = None;
    let mut rest = words;
    while let Some((&word, tail)) = rest.split_first() {
        if Mode::parse(word).is_some() {
            break;
        }
        let option = if word.eq_ignore_ascii_case(b"TOKEN") {
            "TOKEN"
        } else if word.eq_ignore_ascii_case(b"TTL") {
            "TTL"
        } else if word.eq_ignore_ascii_case(b"WAIT") {
            "WAIT"
        } else if word.eq_ignore_ascii_case(b"NOTE") {
            "NOTE"
        } else {
            return Err(Error::UnknownWord(for_client(word)));
        };
        let (&value, tail) = tail.split_first().ok_or(Error::MissingValue(option))?;
        match option {
            "TOKEN" if token.is_some() => return Err(Error::DuplicateOption(option)),
            "TOKEN" => token = Some(Token::new(value)?),
            "TTL" if ttl.is_some() => return Err(Error::DuplicateOption(option)),
            "TTL" => ttl = Some(ttl_ms(value)?),
            "NOTE" if note.is_some() => return Err(Error::DuplicateOption(option)),
            "NOTE" => note = Some(note_of(value)?),
            _ if wait.is_some() => return Err(Error::DuplicateOption(option)),
            _ => wait = Some(wait_ms(value)?),
        }
        rest = tail;
    }
    let items = mode_paths(rest)?;
    Ok(Acquire {
        token,
        ttl: match ttl {
            Some(ttl) => ttl,
            None => positive(config::default_ttl()),
        },
        wait: wait.unwrap_or(0),
        note,
        items,
    })
}

/// A note: any bytes, at most `pathlock.max-note-bytes` of them. The error gives the lengths,
/// never the note, which may be long and is the client's.
fn note_of(word: &[u8]) -> Result<Note, Error> {
    let max = config::max_note_bytes();
    if i64::try_from(word.len()).map_or(true, |len| len > max) {
        return Err(Error::NoteTooLong {
            len: word.len(),
            max,
        });
    }
    Ok(Note::from(word))
}

/// `[path] [TOKEN token]` of `LOCKS`: where to list, and whose locks when a token is given.
#[derive(Debug)]
pub struct Locks {
    pub under: Path,
    pub token: Option<Token>,
}

/// A `TOKEN` word followed by one more argument is the option; a lone argument is the path,
/// even `TOKEN` (the folder `/TOKEN`, which may also be written so).
pub fn locks(words: &[&[u8]]) -> Result<Locks, Error> {
    let (path, option) = match words {
        [] => (None, None),
        [path] => (Some(*path), None),
        [word, value] if word.eq_ignore_ascii_case(b"TOKEN") => (None, Some(*value)),
        [path, word, rest @ ..] if word.eq_ignore_ascii_case(b"TOKEN") => match rest {
            [value] => (Some(*path), Some(*value)),
            _ => return Err(Error::MissingValue("TOKEN")),
        },
        [_, word, ..] => return Err(Error::UnknownLocksWord(for_client(word))),
    };
    let under = match path {
        Some(raw) => Path::parse(raw, &config::path_limits())?,
        None => Path::root(),
    };
    let token = option.map(Token::new).transpose()?;
    Ok(Locks { under, token })
}

/// `[path]` of `WAITERS`: the root when none is given.
pub fn under(word: Option<&[u8]>) -> Result<Path, Error> {
    match word {
        Some(raw) => Ok(Path::parse(raw, &config::path_limits())?),
        None => Ok(Path::root()),
    }
}

/// `[TOKEN token] mode path [mode path ...]`
#[derive(Debug)]
pub struct Check {
    pub token: Option<Token>,
    pub items: Items,
}

pub fn check(words: &[&[u8]]) -> Result<Check, Error> {
    match words {
        [first, value, rest @ ..] if first.eq_ignore_ascii_case(b"TOKEN") => Ok(Check {
            token: Some(Token::new(value)?),
            items: mode_paths(rest)?,
        }),
        _ => Ok(Check {
            token: None,
            items: mode_paths(words)?,
        }),
    }
}

/// `mode path [mode path ...]`, at least one pair and at most `max-paths-per-call`.
pub fn mode_paths(words: &[&[u8]]) -> Result<Items, Error> {
    if words.is_empty() {
        return Err(ERR_NO_PATHS.into());
    }
    check_count(words.len().div_ceil(2))?;
    let limits = config::path_limits();
    // A plain loop rather than a `collect` of `Result`s: this runs on every ACQUIRE, and the
    // adapter around a fallible collect costs more than the one pair it usually gathers.
    let mut items = Items::with_capacity(words.len() / 2);
    for pair in words.chunks(2) {
        let mode = Mode::parse(pair[0]).ok_or_else(|| Error::InvalidMode(for_client(pair[0])))?;
        let raw = pair.get(1).ok_or(Error::Fixed(ERR_MISSING_PATH))?;
        items.push((mode, Path::parse(raw, &limits)?));
    }
    Ok(items)
}

/// `[path ...]`: `None` when no path is given.
pub fn paths(words: &[&[u8]]) -> Result<Option<Vec<Path>>, Error> {
    if words.is_empty() {
        return Ok(None);
    }
    check_count(words.len())?;
    let limits = config::path_limits();
    let paths = words
        .iter()
        .map(|raw| Path::parse(raw, &limits))
        .collect::<Result<_, _>>()?;
    Ok(Some(paths))
}

pub fn token(word: &[u8]) -> Result<Token, Error> {
    Ok(Token::new(word)?)
}

/// A lease length in milliseconds: an integer from 1 to `pathlock.max-ttl`.
pub fn ttl_ms(word: &[u8]) -> Result<u64, Error> {
    let max = config::max_ttl();
    integer_in(word, 1, max).ok_or(Error::InvalidTtl { max })
}

/// How long to wait, in milliseconds: an integer from 0 (do not wait) to `pathlock.max-ttl`.
pub fn wait_ms(word: &[u8]) -> Result<u64, Error> {
    let max = config::max_ttl();
    integer_in(word, 0, max).ok_or(Error::InvalidWait { max })
}

/// A decimal integer from `min` (not negative) to `max`, spelled as Rust's `i64` parser takes
/// it: an optional sign, then one or more digits.
fn integer_in(word: &[u8], min: i64, max: i64) -> Option<u64> {
    let (negative, digits) = match word {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, word),
    };
    if digits.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    for &b in digits {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    // `min` is not negative, so a negative number passes only as zero.
    if negative && value != 0 {
        return None;
    }
    let (min, max) = (u64::try_from(min).ok()?, u64::try_from(max).ok()?);
    (min..=max).contains(&value).then_some(value)
}

fn check_count(count: usize) -> Result<(), Error> {
    let max = config::max_paths_per_call();
    if i64::try_from(count).map_or(true, |n| n > max) {
        return Err(Error::TooManyPaths { max });
    }
    Ok(())
}

/// Values that the checks or the config ranges keep at one or more.
fn positive(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(1).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_reads_options_in_any_order_then_mode_path_pairs() {
        let request = acquire(&[
            b"wait", b"5", b"TOKEN", b"t", b"TTL", b"100", b"READ", b"/a",
        ])
        .expect("a well-formed request");
        assert_eq!(request.token.as_ref().map(Token::as_bytes), Some(&b"t"[..]));
        assert_eq!((request.ttl, request.wait), (100, 5));
        assert_eq!(request.items.len(), 1);
        let defaults = acquire(&[b"WRITE", b"/a", b"write", b"/b"]).expect("two pairs");
        assert_eq!(defaults.ttl, positive(config::default_ttl()));
        assert_eq!(defaults.wait, 0);
        assert!(defaults.token.is_none());
    }

    #[test]
    fn acquire_names_what_is_wrong() {
        let error = |words: &[&[u8]]| acquire(words).expect_err("refused").to_string();
        assert_eq!(
            error(&[b"TTL", b"0", b"READ", b"/a"]),
            format!(
                "ERR invalid TTL: must be an integer from 1 to {}",
                config::max_ttl()
            )
        );
        assert_eq!(
            error(&[b"TOKEN", b"a", b"TOKEN", b"b", b"READ", b"/a"]),
            "ERR TOKEN given more than once"
        );
        assert_eq!(error(&[b"TOKEN"]), "ERR TOKEN needs a value");
        assert_eq!(error(&[b"READ"]), "ERR missing path after mode");
        assert_eq!(
            error(&[b"READ", b"/a/../b"]),
            "ERR invalid path: '..' segments are not allowed"
        );
        assert_eq!(
            error(&[b"\xff", b"/a"]),
            "ERR unknown option or mode '\\xff': expected TOKEN, TTL, WAIT, NOTE, READ or WRITE"
        );
    }

    #[test]
    fn acquire_takes_a_note_of_any_bytes_up_to_the_limit() {
        let note: &[u8] = b"move \x00\x01\r\n \xc4\x80";
        let request = acquire(&[b"NOTE", note, b"WRITE", b"/a"]).expect("a noted request");
        assert_eq!(request.note.as_deref(), Some(note));
        assert!(acquire(&[b"WRITE", b"/a"]).expect("plain").note.is_none());
        // A note may look like a mode or an option: it is the value of NOTE.
        let request = acquire(&[b"note", b"READ", b"READ", b"/a"]).expect("a note READ");
        assert_eq!(request.note.as_deref(), Some(&b"READ"[..]));
        assert_eq!(request.items.len(), 1);
        let max = config::max_note_bytes() as usize;
        let long = vec![b'x'; max + 1];
        assert_eq!(
            acquire(&[b"NOTE", &long, b"WRITE", b"/a"])
                .expect_err("too long")
                .to_string(),
            format!(
                "ERR NOTE too long: {} bytes, at most {max} (pathlock.max-note-bytes)",
                max + 1
            )
        );
        assert!(acquire(&[b"NOTE", &long[1..], b"WRITE", b"/a"]).is_ok());
        assert_eq!(
            acquire(&[b"NOTE", b"a", b"NOTE", b"b", b"WRITE", b"/a"])
                .expect_err("twice")
                .to_string(),
            "ERR NOTE given more than once"
        );
    }

    #[test]
    fn locks_tells_the_token_option_from_a_folder_named_token() {
        let parsed = |words: &[&[u8]]| {
            let locks = locks(words).expect("well-formed");
            (
                locks.under.to_bytes(),
                locks.token.map(|t| t.as_bytes().to_vec()),
            )
        };
        assert_eq!(parsed(&[]), (b"/".to_vec(), None));
        assert_eq!(parsed(&[b"TOKEN"]), (b"/TOKEN".to_vec(), None));
        assert_eq!(parsed(&[b"/TOKEN"]), (b"/TOKEN".to_vec(), None));
        assert_eq!(
            parsed(&[b"token", b"t"]),
            (b"/".to_vec(), Some(b"t".to_vec()))
        );
        assert_eq!(
            parsed(&[b"TOKEN", b"TOKEN", b"t"]),
            (b"/TOKEN".to_vec(), Some(b"t".to_vec()))
        );
        assert_eq!(
            parsed(&[b"/A", b"TOKEN", b"t"]),
            (b"/A".to_vec(), Some(b"t".to_vec()))
        );
        let error = |words: &[&[u8]]| locks(words).expect_err("refused").to_string();
        assert!(error(&[b"/A", b"/B"]).starts_with("ERR unknown option '/B' after the path"));
        assert_eq!(error(&[b"/A", b"TOKEN"]), "ERR TOKEN needs a value");
        assert!(error(&[b"TOKEN", b""]).starts_with("ERR invalid token"));
        assert!(error(&[b"/a/../b"]).starts_with("ERR invalid path"));
    }

    #[test]
    fn integers_are_decimal_and_in_range() {
        assert_eq!(integer_in(b"0", 0, 10), Some(0));
        assert_eq!(integer_in(b"10", 0, 10), Some(10));
        for bad in [
            &b"11"[..],
            b"-1",
            b"1e3",
            b" 1",
            b"",
            b"99999999999999999999",
        ] {
            assert_eq!(integer_in(bad, 0, 10), None, "{bad:?}");
        }
    }

    /// The hand-written parser takes exactly what Rust's `i64` parser takes: every word of up
    /// to five bytes over digits, signs, a space, a letter, NUL and the two bytes of U+0100,
    /// and numbers near the limits of `u64` and `i64`.
    #[test]
    fn integers_are_read_as_the_standard_parser_reads_them() {
        fn standard(word: &[u8], min: i64, max: i64) -> Option<u64> {
            std::str::from_utf8(word)
                .ok()
                .and_then(|text| text.parse::<i64>().ok())
                .filter(|n| (min..=max).contains(n))
                .and_then(|n| u64::try_from(n).ok())
        }
        let alphabet = b"0159+- a\x00\xc4\x80";
        let mut words: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..5 {
            let longer: Vec<Vec<u8>> = words
                .iter()
                .filter(|w| w.len() == words.last().map_or(0, Vec::len))
                .flat_map(|w| alphabet.iter().map(move |&c| [&w[..], &[c]].concat()))
                .collect();
            words.extend(longer);
        }
        for edge in [
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "+0009",
            "-0",
        ] {
            words.push(edge.as_bytes().to_vec());
        }
        for word in &words {
            for (min, max) in [(0, 10), (1, 5_000), (0, i64::MAX)] {
                assert_eq!(
                    integer_in(word, min, max),
                    standard(word, min, max),
                    "{word:?}"
                );
            }
        }
    }

    #[test]
    fn too_many_paths_is_refused_before_any_is_parsed() {
        let words: Vec<&[u8]> = std::iter::repeat_n([&b"READ"[..], b"/a"], 65)
            .flatten()
            .collect();
        assert_eq!(
            mode_paths(&words).expect_err("65 pairs").to_string(),
            "ERR too many paths: at most 64 per call"
        );
    }
}
