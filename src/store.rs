//! The storage seam: the one way to open a project key, and what else a change of one key needs
//! from where it runs (its clock and whether it decides, replication, the keyspace event, the
//! expiry schedule). The [`Store`] trait names it; [`ServerKey`] is one key of the server's
//! keyspace, opened through the module API, and [`MemoryKey`] (tests and fuzzing only) one key of
//! a map of projects in memory, on which the fuzz harness runs the very handlers and `change`
//! that Redis runs. Both are generic parameters, never trait objects, so Redis's path is compiled
//! as if it called the module API directly.
//!
//! Level 3: imports `clock`, `context`, `effects`, `errors`, `eviction`, `fences`, `keytype`,
//! `schedule`, `stats`. Used by `change`, `grants`, `waits`, `expiry`, `events`, the
//! commands and the harness. Work outside a client's command opens a key of any database through
//! `ServerKey::visit`.
//!
//! A project key created by a master starts its fences where `fences` says, above every fence
//! this server has seen and above the clock floor; a replica or an AOF replay creates it at 1
//! and the `GRANT` effect that comes with it sets the master's fence.
//!
//! A key's LRU/LFU clock (`OBJECT IDLETIME`, `OBJECT FREQ`, what `maxmemory` eviction reads)
//! moves only when a client's command writes it, as a `SET` moves it. The reading commands
//! inspect a key as `TTL` or `TYPE` do, without touching it, and the module's own work (the
//! expiry cycle, the signal worker, a waiter's timeout) opens keys with `NOTOUCH` too.

use std::ffi::CStr;

use pathlock_core::Project;
use redis_module::key::{KeyFlags, RedisKeyWritable};
use redis_module::{Context, RedisError, RedisString};

use crate::context::{decides, in_command, in_db, look_flags, notify, selected_db};
use crate::effects::{Effect, Kind};
use crate::errors::{wrong_type, ERR_PANIC};
use crate::keytype::PATHLOCK_TYPE;
use crate::{clock, eviction, fences, schedule, stats};

/// One project key and where it lives: what `change`, `grants` and the handlers use to open it,
/// and to replicate, count, notify and schedule what they did to it.
pub trait Store {
    /// The key's name.
    fn key(&self) -> &[u8];
    /// The database the key is in.
    fn db(&self) -> i32;
    /// The time decisions use, in milliseconds (`clock`).
    fn now_ms(&self) -> u64;
    /// Whether this call decides, rather than applies a master's decision (`context::decides`).
    fn decides(&self) -> bool;
    /// Runs `write` on the project; a missing key answers `Ok(None)`, a key of another type
    /// `WRONGTYPE`, naming the key.
    fn write_existing<R>(
        &self,
        write: impl FnOnce(&mut Project) -> R,
    ) -> Result<Option<R>, RedisError>;
    /// Runs `write` on the project, created first when the key is missing (see [`created`]); a
    /// key of another type answers `WRONGTYPE`, naming the key.
    fn write_or_create<R>(&self, write: impl FnOnce(&mut Project) -> R) -> Result<R, RedisError>;
    /// Runs `read` on the project without changing it; a missing key answers `Ok(None)`. Expired
    /// locks stay in place (a replica must not reclaim them); the engine's reading methods hide
    /// them.
    fn read<R>(&self, read: impl FnOnce(&Project) -> R) -> Result<Option<R>, RedisError>;
    /// Sends an effect to replicas and the AOF.
    fn replicate(&self, effect: &Effect);
    /// Raises a keyspace event on the key.
    fn notify(&self, event: &'static CStr);
    /// After a change: the key's earliest deadline for the expiry cycle, and whether it has
    /// background work.
    fn schedule(&self, next_deadline: Option<u64>, background_work: bool);
    /// After a change: marks the key as just used where the eviction policy reads it.
    fn protect(&self);

    /// Counts `count` changes of `kind` in INFO's totals and raises the kind's keyspace event
    /// once; nothing when there were none.
    fn count_and_notify(&self, kind: Kind, count: usize) {
        if count == 0 {
            return;
        }
        if let Some(total) = kind.total() {
            stats::count(total, count);
        }
        if let Some(event) = kind.event() {
            self.notify(event);
        }
    }
}

/// A project as a key is created with: on a master, fences above every one this server has seen
/// and above the clock floor (`fences`).
fn created(store: &impl Store) -> Project {
    let mut project = Project::new();
    if store.decides() {
        project
            .locks_mut()
            .raise_next_fence(fences::first(store.now_ms()));
    }
    project
}

/// One key of the server's keyspace, in the context's selected database.
#[derive(Clone, Copy)]
pub struct ServerKey<'a> {
    pub ctx: &'a Context,
    pub key: &'a RedisString,
}

impl<'a> ServerKey<'a> {
    pub fn new(ctx: &'a Context, key: &'a RedisString) -> ServerKey<'a> {
        ServerKey { ctx, key }
    }

    /// Runs `work` on the key `name` of database `db`: the one way the module's work outside a
    /// client's command (a timer, the signal worker, a keyspace event) opens a key. `db` is
    /// selected for the time of `work`, and the database selected before is selected again.
    pub fn visit<R>(ctx: &Context, db: i32, name: &[u8], work: impl FnOnce(&ServerKey) -> R) -> R {
        in_db(ctx, db, || {
            let name = RedisString::create_from_slice(ctx.ctx, name);
            work(&ServerKey::new(ctx, &name))
        })
    }

    /// Runs `look` on the project, if the key holds one, as the module looks at a key outside a
    /// client's command (`context::look_flags`): no LRU/LFU touch, no keyspace event or stats.
    pub fn look<R>(&self, look: impl FnOnce(&Project) -> R) -> Option<R> {
        let key = self.ctx.open_key_with_flags(self.key, look_flags());
        key.get_value::<Project>(&PATHLOCK_TYPE)
            .ok()
            .flatten()
            .map(look)
    }

    /// Whether the key holds a value of any type, looked at as `look` does.
    pub fn holds_value(&self) -> bool {
        !self
            .ctx
            .open_key_with_flags(self.key, look_flags())
            .is_null()
    }

    /// Opens the key for writing. A client's command touches its LRU/LFU clock, as a `SET`
    /// does; the module's own work (a timer, the signal worker) opens it with `NOTOUCH`.
    fn open_writable(&self) -> RedisKeyWritable {
        let touch = if in_command(self.ctx) {
            KeyFlags::empty()
        } else {
            KeyFlags::NOTOUCH
        };
        self.ctx.open_key_writable_with_flags(self.key, touch)
    }

    /// Runs `maintain` on the project, if there is one, for work that changes nothing a client
    /// sees (freeing a buried owner's locks): the key is opened without touching its LRU/LFU, as
    /// a client's access would, and without creating it.
    pub fn maintain<R>(
        &self,
        maintain: impl FnOnce(&mut Project) -> R,
    ) -> Result<Option<R>, RedisError> {
        let key = self
            .ctx
            .open_key_writable_with_flags(self.key, KeyFlags::NOTOUCH);
        let project = key
            .get_value::<Project>(&PATHLOCK_TYPE)
            .map_err(|_| RedisError::String(wrong_type(self.key.as_slice())))?;
        Ok(project.map(maintain))
    }
}

impl Store for ServerKey<'_> {
    #[inline]
    fn key(&self) -> &[u8] {
        self.key.as_slice()
    }

    #[inline]
    fn db(&self) -> i32 {
        selected_db(self.ctx)
    }

    #[inline]
    fn now_ms(&self) -> u64 {
        clock::now_ms(self.ctx)
    }

    #[inline]
    fn decides(&self) -> bool {
        decides(self.ctx)
    }

    fn write_existing<R>(
        &self,
        write: impl FnOnce(&mut Project) -> R,
    ) -> Result<Option<R>, RedisError> {
        let key = self.open_writable();
        let project = key
            .get_value::<Project>(&PATHLOCK_TYPE)
            .map_err(|_| RedisError::String(wrong_type(self.key.as_slice())))?;
        Ok(project.map(write))
    }

    fn write_or_create<R>(&self, write: impl FnOnce(&mut Project) -> R) -> Result<R, RedisError> {
        let key = self.open_writable();
        let wrong_type = |_| RedisError::String(wrong_type(self.key.as_slice()));
        if let Some(project) = key
            .get_value::<Project>(&PATHLOCK_TYPE)
            .map_err(wrong_type)?
        {
            return Ok(write(project));
        }
        key.set_value(&PATHLOCK_TYPE, created(self))?;
        stats::track(&stats::KEYS, 0, 1);
        // The key holds the project just set: redis-module only hands it back as an `Option`.
        let project = key
            .get_value::<Project>(&PATHLOCK_TYPE)
            .map_err(wrong_type)?
            .ok_or(RedisError::Str(ERR_PANIC))?;
        Ok(write(project))
    }

    fn read<R>(&self, read: impl FnOnce(&Project) -> R) -> Result<Option<R>, RedisError> {
        let key = self.ctx.open_key_with_flags(self.key, KeyFlags::NOTOUCH);
        let project = key
            .get_value::<Project>(&PATHLOCK_TYPE)
            .map_err(|_| RedisError::String(wrong_type(self.key.as_slice())))?;
        Ok(project.map(read))
    }

    #[inline]
    fn replicate(&self, effect: &Effect) {
        effect.replicate(self.ctx, self.key);
    }

    #[inline]
    fn notify(&self, event: &'static CStr) {
        notify(self.ctx, event, self.key);
    }

    #[inline]
    fn schedule(&self, next_deadline: Option<u64>, background_work: bool) {
        schedule::schedule(self.ctx, self.key.as_slice(), next_deadline);
        if background_work {
            schedule::pending(self.ctx, self.key.as_slice());
        }
    }

    #[inline]
    fn protect(&self) {
        eviction::protect(self.ctx, self.key);
    }
}

/// Projects held in a map, for the fuzz harness and the unit tests: one key of the map, at the
/// time `now`, on a server that decides (a master), where nothing listens to replication or
/// events and nothing is scheduled. Every effect the code replicates must read back as itself,
/// as a replica would read it.
#[cfg(any(test, feature = "system-alloc"))]
pub struct MemoryKey<'a> {
    pub projects: &'a std::cell::RefCell<std::collections::HashMap<Vec<u8>, Project>>,
    pub key: &'a [u8],
    pub now: u64,
}

#[cfg(any(test, feature = "system-alloc"))]
impl Store for MemoryKey<'_> {
    fn key(&self) -> &[u8] {
        self.key
    }

    fn db(&self) -> i32 {
        0
    }

    fn now_ms(&self) -> u64 {
        self.now
    }

    fn decides(&self) -> bool {
        true
    }

    fn write_existing<R>(
        &self,
        write: impl FnOnce(&mut Project) -> R,
    ) -> Result<Option<R>, RedisError> {
        Ok(self.projects.borrow_mut().get_mut(self.key).map(write))
    }

    fn write_or_create<R>(&self, write: impl FnOnce(&mut Project) -> R) -> Result<R, RedisError> {
        let mut projects = self.projects.borrow_mut();
        if let Some(project) = projects.get_mut(self.key) {
            return Ok(write(project));
        }
        let project = projects.entry(self.key.to_vec()).or_insert(created(self));
        Ok(write(project))
    }

    fn read<R>(&self, read: impl FnOnce(&Project) -> R) -> Result<Option<R>, RedisError> {
        Ok(self.projects.borrow().get(self.key).map(read))
    }

    fn replicate(&self, effect: &Effect) {
        let words = effect.words();
        let words: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        let again = Effect::parse(&words).unwrap_or_else(|e| {
            panic!("{effect:?} was replicated as words a replica refuses: {e}")
        });
        assert_eq!(
            again.words(),
            effect.words(),
            "{effect:?} was replicated as another effect"
        );
    }

    fn notify(&self, _event: &'static CStr) {}

    fn schedule(&self, _next_deadline: Option<u64>, _background_work: bool) {}

    fn protect(&self) {}
}
