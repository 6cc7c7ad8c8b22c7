//! Effects: what a master's decision did to a project, with everything resolved (token, absolute
//! deadline, fence, paths), so that a replica or an AOF replay reaches the master's state without
//! deciding anything with its own clock.
//!
//! They travel as `PATHLOCK.EFFECT key <effect>`:
//!
//! ```text
//! GRANT token deadline fence [NOTE note] mode path ...  a decided acquire, with its note; the
//!                                                       token's lease becomes at least `deadline`
//! RELEASE token [path ...]                               a release (no time involved)
//! RENEW token deadline                                   a renew: the lease is `deadline`
//! EXPIRE now                                             reclaim every lock due by `now`
//! EXPIRE now token [token ...]                           reclaim these tokens' locks due by `now`
//! FENCE next                                             raise the fence counter (AOF rewrite)
//! ```
//!
//! A `GRANT` without `NOTE` (what masters sent before notes, and what a grant without one
//! sends) leaves the notes of the locks it refreshes as they were, as the master's grant did;
//! `NOTE` replaces them, and `NOTE ""` takes them away. `NOTE` is not a mode, so the two forms
//! are told apart by the word after the fence.
//!
//! `EXPIRE` and `RELEASE` are deterministic because the master sends every effect in the order it
//! applied them, so a replica holds the same locks with the same deadlines when it applies one.
//!
//! The active expiry cycle reclaims a mass expiry a few owners at a time, so that no tick stalls
//! the server; each step names its owners, which makes the step exact whatever order owners
//! sharing a deadline have on each server. A command's lazy reclamation names its owners the
//! same way. `EXPIRE now` alone (reclaim everything due) is only what older masters and AOF
//! files hold; it is still applied, at the cost of everything it reclaims at once.
//!
//! Each effect's [`Kind`] names how a change of that kind is made known: its keyspace event and
//! the INFO total it counts in. Whatever makes a change known (a command, a grant, lazy or active
//! expiry, an applied effect) goes through `store::Store::count_and_notify` with the kind, so
//! the event names and the counters are written here alone.
//!
//! A `GRANT` or `FENCE` that would set a counter above the ceiling, which no server can have
//! reached (`fences`), is refused before it touches anything ([`Effect::check_fences`]):
//! effects come from a master or the AOF, but a damaged file or a forged stream must not raise
//! the server's fence mark past what every new key could still grant from.
//!
//! Level 2: imports `errors`, `fences`, `propagation`, `stats`. Used by `change`, `grants`,
//! `store`, the writing commands and the harness.

use std::ffi::CStr;
use std::sync::atomic::AtomicU64;

use pathlock_core::{Items, Mode, Note, Path, PathLimits, Project, Token, NOTE_CEILING};
use redis_module::{raw, Context, RedisString};

use crate::errors::{for_client, Error, ERR_EFFECT_SYNTAX};
use crate::{fences, propagation, stats};

pub const COMMAND: &std::ffi::CStr = c"PATHLOCK.EFFECT";

#[derive(Debug)]
pub enum Effect {
    Grant {
        token: Token,
        deadline: u64,
        fence: u64,
        items: Items,
        note: Option<Note>,
    },
    Release {
        token: Token,
        paths: Option<Vec<Path>>,
    },
    Renew {
        token: Token,
        deadline: u64,
    },
    Expire {
        now: u64,
    },
    /// One bounded step of the expiry cycle: the due locks of these owners only.
    ExpireOf {
        now: u64,
        tokens: Vec<Token>,
    },
    Fence {
        next: u64,
    },
}

/// One word of an effect.
enum Word<'a> {
    Borrowed(&'a [u8]),
    /// A number's decimal digits, at the end of the buffer from the index.
    Number([u8; 20], usize),
    Owned(Vec<u8>),
}

impl Word<'_> {
    fn number(mut n: u64) -> Word<'static> {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Word::Number(digits, start)
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Word::Borrowed(bytes) => bytes,
            Word::Number(digits, start) => &digits[*start..],
            Word::Owned(bytes) => bytes,
        }
    }
}

/// What kind of change an effect records, and so how the change is counted and notified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Grant,
    Release,
    Renew,
    /// Lapsed locks reclaimed, by lazy or active expiry or an `EXPIRE` effect.
    Expire,
    /// A fence counter raised: nobody is told, and nothing is counted.
    Fence,
}

impl Kind {
    /// The keyspace event (of the module class) raised for a change of this kind.
    pub fn event(self) -> Option<&'static CStr> {
        match self {
            Kind::Grant => Some(c"pathlock.acquire"),
            Kind::Release => Some(c"pathlock.release"),
            Kind::Renew => Some(c"pathlock.renew"),
            Kind::Expire => Some(c"pathlock.expired"),
            Kind::Fence => None,
        }
    }

    /// The INFO total that counts the locks (for a grant, the grants) changed this way.
    pub fn total(self) -> Option<&'static AtomicU64> {
        match self {
            Kind::Grant => Some(&stats::GRANTS),
            Kind::Release => Some(&stats::RELEASES),
            Kind::Renew => Some(&stats::RENEWALS),
            Kind::Expire => Some(&stats::EXPIRATIONS),
            Kind::Fence => None,
        }
    }
}

/// What applying an effect changed, for the keyspace event and the totals.
pub struct Applied {
    pub kind: Kind,
    pub count: usize,
}

impl Effect {
    pub fn kind(&self) -> Kind {
        match self {
            Effect::Grant { .. } => Kind::Grant,
            Effect::Release { .. } => Kind::Release,
            Effect::Renew { .. } => Kind::Renew,
            Effect::Expire { .. } | Effect::ExpireOf { .. } => Kind::Expire,
            Effect::Fence { .. } => Kind::Fence,
        }
    }

    /// The effect's words after the key, borrowed from the effect where they can be and with
    /// numbers formatted on the stack: replication runs once per grant, and a vector per word
    /// cost more than the rest of building the effect.
    fn word_list(&self) -> Vec<Word<'_>> {
        let mut words = Vec::with_capacity(8);
        match self {
            Effect::Grant {
                token,
                deadline,
                fence,
                items,
                note,
            } => {
                words.extend([
                    Word::Borrowed(b"GRANT"),
                    Word::Borrowed(token.as_bytes()),
                    Word::number(*deadline),
                    Word::number(*fence),
                ]);
                if let Some(note) = note {
                    words.extend([Word::Borrowed(b"NOTE"), Word::Borrowed(note)]);
                }
                for (mode, path) in items {
                    words.push(Word::Borrowed(mode.as_str().as_bytes()));
                    words.push(Word::Owned(path.to_bytes()));
                }
            }
            Effect::Release { token, paths } => {
                words.extend([Word::Borrowed(b"RELEASE"), Word::Borrowed(token.as_bytes())]);
                words.extend(
                    paths
                        .iter()
                        .flatten()
                        .map(|path| Word::Owned(path.to_bytes())),
                );
            }
            Effect::Renew { token, deadline } => words.extend([
                Word::Borrowed(b"RENEW"),
                Word::Borrowed(token.as_bytes()),
                Word::number(*deadline),
            ]),
            Effect::Expire { now } => words.extend([Word::Borrowed(b"EXPIRE"), Word::number(*now)]),
            Effect::ExpireOf { now, tokens } => {
                words.extend([Word::Borrowed(b"EXPIRE"), Word::number(*now)]);
                words.extend(tokens.iter().map(|token| Word::Borrowed(token.as_bytes())));
            }
            Effect::Fence { next } => words.extend([Word::Borrowed(b"FENCE"), Word::number(*next)]),
        }
        words
    }

    /// The effect's words after the key, owned, for the round trips of the unit tests and the
    /// fuzz harness.
    #[cfg(any(test, feature = "system-alloc"))]
    pub fn words(&self) -> Vec<Vec<u8>> {
        self.word_list()
            .iter()
            .map(|word| word.as_slice().to_vec())
            .collect()
    }

    /// Sends the effect to replicas and the AOF, after whatever the command sent before it;
    /// nothing when neither would receive it, as Redis does for its own commands.
    pub fn replicate(&self, ctx: &Context, key: &RedisString) {
        if !propagation::listened(ctx) {
            return;
        }
        let words = self.word_list();
        let words: Vec<&[u8]> = words.iter().map(Word::as_slice).collect();
        // The server's part is timed for the expiry cycle's figures (`stats::in_server`).
        if !stats::in_server(|| replicate_buffers(ctx, key, &words)) {
            let mut args: Vec<&[u8]> = Vec::with_capacity(words.len() + 1);
            args.push(key.as_slice());
            args.extend(words);
            let command = COMMAND.to_string_lossy();
            stats::in_server(|| ctx.replicate(&command, args.as_slice()));
        }
    }

    /// Parses the words after the key. Paths were normalised and checked by the master, so they
    /// are held to the ceiling of every configuration rather than to this server's limits, which
    /// may be set lower.
    pub fn parse(words: &[&[u8]]) -> Result<Effect, Error> {
        let path = |raw: &[u8]| Path::parse(raw, &PathLimits::CEILING).map_err(Error::from);
        let (&op, rest) = words.split_first().ok_or(Error::Fixed(ERR_EFFECT_SYNTAX))?;
        let op = op.to_ascii_uppercase();
        match (op.as_slice(), rest) {
            (b"GRANT", [token, deadline, fence, rest @ ..]) if !rest.is_empty() => {
                let (note, pairs) = match rest {
                    [word, note, pairs @ ..] if word.eq_ignore_ascii_case(b"NOTE") => {
                        // Held to the ceiling of every configuration, as paths are.
                        if note.len() > NOTE_CEILING {
                            return Err(ERR_EFFECT_SYNTAX.into());
                        }
                        (Some(Note::from(*note)), pairs)
                    }
                    _ => (None, rest),
                };
                if pairs.is_empty() {
                    return Err(ERR_EFFECT_SYNTAX.into());
                }
                let items = pairs
                    .chunks(2)
                    .map(|pair| match pair {
                        [mode, raw] => {
                            let mode = Mode::parse(mode)
                                .ok_or_else(|| Error::InvalidMode(for_client(mode)))?;
                            Ok((mode, path(raw)?))
                        }
                        _ => Err(Error::Fixed(ERR_EFFECT_SYNTAX)),
                    })
                    .collect::<Result<_, _>>()?;
                // A master's fences start at 1; a grant of fence 0 would be refused when the RDB
                // that holds it is loaded, so it is refused here, before it is applied.
                let fence = number(fence)?;
                if fence == 0 {
                    return Err(ERR_EFFECT_SYNTAX.into());
                }
                Ok(Effect::Grant {
                    token: Token::new(token)?,
                    deadline: number(deadline)?,
                    fence,
                    items,
                    note,
                })
            }
            (b"RELEASE", [token, paths @ ..]) => Ok(Effect::Release {
                token: Token::new(token)?,
                paths: if paths.is_empty() {
                    None
                } else {
                    Some(
                        paths
                            .iter()
                            .map(|raw| path(raw))
                            .collect::<Result<_, _>>()?,
                    )
                },
            }),
            (b"RENEW", [token, deadline]) => Ok(Effect::Renew {
                token: Token::new(token)?,
                deadline: number(deadline)?,
            }),
            (b"EXPIRE", [now]) => Ok(Effect::Expire { now: number(now)? }),
            (b"EXPIRE", [now, tokens @ ..]) => Ok(Effect::ExpireOf {
                now: number(now)?,
                tokens: tokens
                    .iter()
                    .map(|token| Token::new(token))
                    .collect::<Result<_, _>>()?,
            }),
            (b"FENCE", [next]) => Ok(Effect::Fence {
                next: number(next)?,
            }),
            _ => Err(ERR_EFFECT_SYNTAX.into()),
        }
    }

    /// The fence counter applying the effect raises its key to at least: a grant's fence + 1,
    /// a `FENCE`'s value; `None` for effects that set no fence.
    pub fn fence_counter(&self) -> Option<u64> {
        match self {
            Effect::Grant { fence, .. } => Some(fence.saturating_add(1)),
            Effect::Fence { next } => Some(*next),
            _ => None,
        }
    }

    /// Refuses an effect whose fence no server can have handed out by `now_ms`.
    pub fn check_fences(&self, now_ms: u64) -> Result<(), Error> {
        match self.fence_counter() {
            Some(counter) => {
                fences::check(counter, fences::ceiling(now_ms)).map_err(|impossible| {
                    Error::ImpossibleFence {
                        counter: impossible.counter,
                        ceiling: impossible.bound,
                    }
                })
            }
            None => Ok(()),
        }
    }

    /// Whether applying the effect to a missing key creates it.
    pub fn creates_key(&self) -> bool {
        matches!(self, Effect::Grant { .. } | Effect::Fence { .. })
    }

    /// Applies the effect to the locks. Nobody waits on a server that applies effects (a
    /// replica, or a server loading its AOF), so the queue is left alone.
    pub fn apply(&self, project: &mut Project) -> Applied {
        let table = project.locks_mut();
        let count = match self {
            Effect::Grant {
                token,
                deadline,
                fence,
                items,
                note,
            } => {
                table.grant_noted(token, *deadline, *fence, items, note.as_ref());
                1
            }
            Effect::Release { token, paths } => table.release_decided(token, paths.as_deref()),
            Effect::Renew { token, deadline } => table.renew_decided(token, *deadline),
            Effect::Expire { now } => table.reclaim_expired(*now, false).locks,
            Effect::ExpireOf { now, tokens } => tokens
                .iter()
                .map(|token| table.reclaim_expired_of(*now, token, false).locks)
                .sum(),
            Effect::Fence { next } => {
                table.raise_next_fence(*next);
                0
            }
        };
        Applied {
            kind: self.kind(),
            count,
        }
    }
}

/// Replicates `PATHLOCK.EFFECT key words...` with the words passed as buffers (`b`), which
/// spares creating and freeing a RedisString per argument: on the hot path of every grant this
/// halves the cost of replication. Handles up to ten words (a grant of three paths); returns
/// false for longer effects, which take the general path.
fn replicate_buffers(ctx: &Context, key: &RedisString, words: &[&[u8]]) -> bool {
    use std::os::raw::c_char;
    // SAFETY: `replicate` exists on every supported server (checked through the Option); each
    // arm's format has one `s` for the key and one `b` (pointer, length) per word, matching the
    // arguments it passes; every buffer outlives the call, which copies them.
    unsafe {
        let Some(replicate) = raw::RedisModule_Replicate else {
            return false;
        };
        let command = COMMAND.as_ptr();
        let k = key.inner;
        let w = |i: usize| (words[i].as_ptr().cast::<c_char>(), words[i].len());
        match words.len() {
            2 => {
                let (a, b) = (w(0), w(1));
                let format = c"sbb".as_ptr();
                replicate(ctx.ctx, command, format, k, a.0, a.1, b.0, b.1);
            }
            3 => {
                let (a, b, c) = (w(0), w(1), w(2));
                let format = c"sbbb".as_ptr();
                replicate(ctx.ctx, command, format, k, a.0, a.1, b.0, b.1, c.0, c.1);
            }
            4 => {
                let (a, b, c, d) = (w(0), w(1), w(2), w(3));
                let format = c"sbbbb".as_ptr();
                replicate(
                    ctx.ctx, command, format, k, a.0, a.1, b.0, b.1, c.0, c.1, d.0, d.1,
                );
            }
            6 => {
                let (a, b, c, d, e, f) = (w(0), w(1), w(2), w(3), w(4), w(5));
                let format = c"sbbbbbb".as_ptr();
                replicate(
                    ctx.ctx, command, format, k, a.0, a.1, b.0, b.1, c.0, c.1, d.0, d.1, e.0, e.1,
                    f.0, f.1,
                );
            }
            8 => {
                let (a, b, c, d, e, f, g, h) = (w(0), w(1), w(2), w(3), w(4), w(5), w(6), w(7));
                let format = c"sbbbbbbbb".as_ptr();
                replicate(
                    ctx.ctx, command, format, k, a.0, a.1, b.0, b.1, c.0, c.1, d.0, d.1, e.0, e.1,
                    f.0, f.1, g.0, g.1, h.0, h.1,
                );
            }
            10 => {
                let (a, b, c, d, e) = (w(0), w(1), w(2), w(3), w(4));
                let (f, g, h, i, j) = (w(5), w(6), w(7), w(8), w(9));
                let format = c"sbbbbbbbbbb".as_ptr();
                replicate(
                    ctx.ctx, command, format, k, a.0, a.1, b.0, b.1, c.0, c.1, d.0, d.1, e.0, e.1,
                    f.0, f.1, g.0, g.1, h.0, h.1, i.0, i.1, j.0, j.1,
                );
            }
            _ => return false,
        }
    }
    true
}

fn number(word: &[u8]) -> Result<u64, Error> {
    std::str::from_utf8(word)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or(Error::Fixed(ERR_EFFECT_SYNTAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(words: &[&[u8]]) -> Vec<Vec<u8>> {
        Effect::parse(words).expect("a well-formed effect").words()
    }

    #[test]
    fn every_effect_survives_its_own_encoding() {
        let cases: &[&[&[u8]]] = &[
            &[
                b"GRANT",
                b"t",
                b"1700000000000",
                b"7",
                b"WRITE",
                b"/A/C",
                b"READ",
                b"/",
            ],
            &[
                b"GRANT",
                b"t",
                b"1700000000000",
                b"8",
                b"NOTE",
                b"move \x00\r\n \xc4\x80",
                b"WRITE",
                b"/A",
            ],
            &[b"GRANT", b"t", b"1", b"9", b"NOTE", b"", b"READ", b"/"],
            &[b"RELEASE", b"t"],
            &[b"RELEASE", b"t", b"/A", b"/B/\xff"],
            &[b"RENEW", b"t", b"99"],
            &[b"EXPIRE", b"12"],
            &[b"FENCE", b"40"],
        ];
        for words in cases {
            let once = round_trip(words);
            let borrowed: Vec<&[u8]> = once.iter().map(Vec::as_slice).collect();
            assert_eq!(round_trip(&borrowed), once);
            assert_eq!(once.len(), words.len(), "{words:?}");
        }
    }

    #[test]
    fn malformed_effects_are_refused() {
        let cases: &[&[&[u8]]] = &[
            &[],
            &[b"GRANT", b"t", b"1", b"0", b"WRITE", b"/a"],
            &[b"GRANT", b"t", b"1", b"2", b"WRITE"],
            &[b"GRANT", b"t", b"x", b"2", b"WRITE", b"/a"],
            &[b"GRANT", b"t", b"1", b"2", b"NOTE", b"n"],
            &[b"GRANT", b"t", b"1", b"2", b"NOTE"],
            &[b"RENEW", b"t"],
            &[b"EXPIRE", b"-1"],
            &[b"NOPE", b"1"],
        ];
        for words in cases {
            assert!(Effect::parse(words).is_err(), "{words:?}");
        }
        let deep = b"/a".repeat(PathLimits::CEILING.max_depth + 1);
        assert!(Effect::parse(&[b"RELEASE", b"t", &deep]).is_err());
    }

    #[test]
    fn a_fence_no_server_can_have_reached_is_refused() {
        let now = 1_800_000_000_000;
        let ceiling = fences::ceiling(now);
        let checked = |words: &[&[u8]]| {
            Effect::parse(words)
                .expect("a well-formed effect")
                .check_fences(now)
        };
        let last = (ceiling - 1).to_string();
        let above = ceiling.to_string();
        let poisoned = ((1u64 << 53) + 5).to_string();
        assert_eq!(
            checked(&[b"GRANT", b"t", b"1", last.as_bytes(), b"WRITE", b"/a"]),
            Ok(())
        );
        assert_eq!(checked(&[b"FENCE", above.as_bytes()]), Ok(()));
        assert_eq!(checked(&[b"RENEW", b"t", b"99"]), Ok(()));
        assert_eq!(
            checked(&[b"GRANT", b"t", b"1", above.as_bytes(), b"WRITE", b"/a"]),
            Err(Error::ImpossibleFence {
                counter: ceiling + 1,
                ceiling
            })
        );
        let error = checked(&[b"FENCE", poisoned.as_bytes()]).expect_err("refused");
        assert!(error
            .to_string()
            .starts_with("ERR impossible fence counter 9007199254740997"));
        let max = u64::MAX.to_string();
        assert!(checked(&[b"GRANT", b"t", b"1", max.as_bytes(), b"WRITE", b"/a"]).is_err());
    }
}
