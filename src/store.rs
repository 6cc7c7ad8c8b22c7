//! The storage seam: the one way to open a project key, and what else a change of one key needs
//! from where it runs (its clock and whether it decides, replication, the keyspace event, the
//! expiry schedule). The [`Store`] trait names it; [`ServerKey`] is one key of the server's
//! keyspace, opened through the module API, and [`MemoryKey`] (tests and fuzzing only) one key of
//! a map of projects in memory, on which the fuzz harness runs the very handlers and `change`
//! that Redis runs. Both are generic parameters, never trait objects, so Redis's path is compiled
//! as if it called the module API directly.
//!
//! Level 4: imports `clock`, `contain`, `context`, `effects`, `errors`, `eviction`, `fences`,
//! `keytype`, `propagation`, `schedule`, `stats`. Used by `change`, `grants`, `waits`, `expiry`,
//! `events`, the commands and the harness. Work outside a client's command opens a key of any
//! database through `ServerKey::visit`.
//!
//! A project key created by a master starts its fences where `fences` says, above every fence
//! this server has seen and above the clock floor; a replica or an AOF replay creates it at 1
//! and the `GRANT` effect that comes with it sets the master's fence.
//!
//! **An empty project is no key.** A change that leaves a project with no lock and no waiter,
//! where this server decides as a master (`deletes_empty`), deletes its key when the work on it
//! ends, as Redis deletes an empty list (see `ServerKey`). A replica and an AOF replay never
//! decide it: the master's `UNLINK key` follows the effect that emptied the project.
//!
//! A key's LRU/LFU clock (`OBJECT IDLETIME`, `OBJECT FREQ`, what `maxmemory` eviction reads)
//! moves only when a client's command writes it, as a `SET` moves it. The reading commands
//! inspect a key as `TTL` or `TYPE` do, without touching it, and the module's own work (the
//! expiry cycle, the signal worker, a waiter's timeout) opens keys with `NOTOUCH` too.

use std::cell::Cell;
use std::ffi::CStr;

use pathlock_core::Project;
use redis_module::key::{KeyFlags, RedisKeyWritable};
use redis_module::{raw, Context, ContextFlags, RedisError, RedisString};

use crate::contain::contained;
use crate::context::{decides, flags, in_command, in_db, look_flags, notify, selected_db};
use crate::effects::{Effect, Kind};
use crate::errors::{wrong_type, ERR_PANIC};
use crate::keytype::PATHLOCK_TYPE;
use crate::{clock, eviction, fences, propagation, schedule, stats};

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
    /// Whether a project left with no lock and no waiter is deleted here: where this server
    /// decides and is a master. A replica and a replay keep it for their master's deletion.
    fn deletes_empty(&self) -> bool;
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
    /// After a change: files the key in the expiry schedule at its earliest deadline, and
    /// records its background work.
    fn schedule(&self, project: &Project);
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

/// One key of the server's keyspace, in the context's selected database, for one piece of work
/// on it (a command, a step of the expiry cycle, a waiter's timeout, the signal worker's visit).
///
/// **A project left empty is deleted when the work ends.** When a change leaves it with no lock
/// and no waiter where `deletes_empty`, the key is deleted as this value is dropped: after
/// everything the work replicated and announced (a command replicates its effect after its
/// change), so replicas and the AOF receive the effect and then `UNLINK key`, and subscribers
/// `pathlock.release` and then `del`. It is unlinked, so a table whose buried locks are still
/// being freed goes to the server's lazy-free thread, as with `UNLINK`. A key this very work
/// created and that told nobody anything (an `ACQUIRE` that granted nothing) is only taken back.
pub struct ServerKey<'a> {
    pub ctx: &'a Context,
    pub key: &'a RedisString,
    /// A change left the project empty.
    emptied: Cell<bool>,
    /// This work created the key.
    created: Cell<bool>,
    /// This work replicated or announced something about the key.
    told: Cell<bool>,
}

impl<'a> ServerKey<'a> {
    pub fn new(ctx: &'a Context, key: &'a RedisString) -> ServerKey<'a> {
        ServerKey {
            ctx,
            key,
            emptied: Cell::new(false),
            created: Cell::new(false),
            told: Cell::new(false),
        }
    }

    /// Runs `work` on the key `name` of database `db`: the one way the module's work outside a
    /// client's command (a timer, the signal worker, a keyspace event) opens a key. `db` is
    /// selected for the time of `work`, and the database selected before is selected again.
    pub fn visit<R>(ctx: &Context, db: i32, name: &[u8], work: impl FnOnce(&ServerKey) -> R) -> R {
        in_db(ctx, db, || {
            let name = RedisString::create_from_slice(ctx.ctx, name);
            let key = ServerKey::new(ctx, &name);
            let result = work(&key);
            // The work ends here, in `db`: a project it emptied goes now, which is the server's
            // work but for a look at the value (`stats::in_server`).
            stats::in_server(|| drop(key));
            result
        })
    }

    /// Deletes the key, if it still holds an empty project (see the type).
    fn delete_if_empty(&self) {
        let key = self
            .ctx
            .open_key_writable_with_flags(self.key, KeyFlags::NOTOUCH);
        let empty = matches!(key.get_value::<Project>(&PATHLOCK_TYPE), Ok(Some(p)) if p.is_empty());
        if !empty {
            return;
        }
        let _ = key.unlink();
        if self.created.get() && !self.told.get() {
            return;
        }
        // SAFETY: the event name is a NUL-terminated literal and the key a live
        // RedisModuleString; Redis copies what it keeps.
        unsafe {
            if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
                notify(
                    self.ctx.ctx,
                    raw::REDISMODULE_NOTIFY_GENERIC,
                    c"del".as_ptr(),
                    self.key.inner,
                );
            }
        }
        if propagation::listened(self.ctx) {
            self.ctx.replicate("UNLINK", &[self.key.as_slice()][..]);
        }
    }

    /// After a change of the open project: whether it left it empty where it goes.
    fn note_emptied(&self, project: &Project) {
        self.emptied.set(project.is_empty() && self.deletes_empty());
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
        let key = stats::in_server(|| {
            self.ctx
                .open_key_writable_with_flags(self.key, KeyFlags::NOTOUCH)
        });
        let project = key
            .get_value::<Project>(&PATHLOCK_TYPE)
            .map_err(|_| RedisError::String(wrong_type(self.key.as_slice())))?;
        Ok(project.map(maintain))
    }
}

impl Drop for ServerKey<'_> {
    fn drop(&mut self) {
        if self.emptied.get() {
            contained("deleting an empty project", (), || self.delete_if_empty());
        }
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

    fn deletes_empty(&self) -> bool {
        self.decides() && flags(self.ctx).contains(ContextFlags::MASTER)
    }

    fn write_existing<R>(
        &self,
        write: impl FnOnce(&mut Project) -> R,
    ) -> Result<Option<R>, RedisError> {
        // The expiry cycle changes keys through here: the lookup is timed for its figures
        // (`stats::in_server`), as the server's table may finish a resize in it.
        let key = stats::in_server(|| self.open_writable());
        let project = key
            .get_value::<Project>(&PATHLOCK_TYPE)
            .map_err(|_| RedisError::String(wrong_type(self.key.as_slice())))?;
        Ok(project.map(|project| {
            let result = write(project);
            self.note_emptied(project);
            result
        }))
    }

    fn write_or_create<R>(&self, write: impl FnOnce(&mut Project) -> R) -> Result<R, RedisError> {
        let key = self.open_writable();
        let wrong_type = |_| RedisError::String(wrong_type(self.key.as_slice()));
        if let Some(project) = key
            .get_value::<Project>(&PATHLOCK_TYPE)
            .map_err(wrong_type)?
        {
            let result = write(project);
            self.note_emptied(project);
            return Ok(result);
        }
        key.set_value(&PATHLOCK_TYPE, created(self))?;
        stats::track(&stats::KEYS, 0, 1);
        self.created.set(true);
        // The key holds the project just set: redis-module only hands it back as an `Option`.
        let project = key
            .get_value::<Project>(&PATHLOCK_TYPE)
            .map_err(wrong_type)?
            .ok_or(RedisError::Str(ERR_PANIC))?;
        let result = write(project);
        self.note_emptied(project);
        Ok(result)
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
        self.told.set(true);
        effect.replicate(self.ctx, self.key);
    }

    #[inline]
    fn notify(&self, event: &'static CStr) {
        self.told.set(true);
        notify(self.ctx, event, self.key);
    }

    #[inline]
    fn schedule(&self, project: &Project) {
        // A project left empty here is about to be deleted, and leaves the schedule with it.
        if project.is_empty() && self.deletes_empty() {
            return;
        }
        schedule::schedule(self.ctx, self.key.as_slice(), project);
        if project.locks().has_background_work() {
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

    fn deletes_empty(&self) -> bool {
        true
    }

    fn write_existing<R>(
        &self,
        write: impl FnOnce(&mut Project) -> R,
    ) -> Result<Option<R>, RedisError> {
        if !self.projects.borrow().contains_key(self.key) {
            return Ok(None);
        }
        self.write_or_create(write).map(Some)
    }

    /// As a server's key, a project left empty goes (at once: nothing here listens to the
    /// order of events and replication).
    fn write_or_create<R>(&self, write: impl FnOnce(&mut Project) -> R) -> Result<R, RedisError> {
        let mut projects = self.projects.borrow_mut();
        let project = projects
            .entry(self.key.to_vec())
            .or_insert_with(|| created(self));
        let result = write(project);
        if project.is_empty() {
            projects.remove(self.key);
        }
        Ok(result)
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

    fn schedule(&self, _project: &Project) {}

    fn protect(&self) {}
}
