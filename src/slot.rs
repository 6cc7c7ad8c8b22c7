//! The Cluster hash slot of a key, as Redis computes it (CRC16-XMODEM of the key, or of its hash
//! tag, modulo 16384), for the redirections that waiters of a migrated project are answered; and
//! the slots that an atomic slot migration (Valkey 9's `CLUSTER MIGRATESLOTS`) is moving here or
//! has just taken away, as the server's slot-migration events tell them (`events`).
//!
//! - **Importing**: while a slot is imported, the target holds the moving projects as the source
//!   sends them (a snapshot, then the source's effects), and clients cannot reach them. Like a
//!   replica, the target must decide nothing about them: the expiry cycle leaves them alone,
//!   or a lock the source renewed after its snapshot could be reclaimed here before the renewal
//!   arrives.
//! - **Left**: the source has handed a slot over and is deleting its keys (the server's trim, in
//!   the same event-loop iteration as the hand-over). A project leaving its key then is not
//!   deleted: it moved, and its waiters are redirected (`registry`), never queued again on the
//!   name.
//!
//! Level 0: imports nothing of the crate. Used by `waits`, `registry`, `events` and `expiry`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Slots in a Cluster.
pub const SLOTS: usize = 16384;

/// CRC16 with polynomial 0x1021 and no reflection (XMODEM), Redis's `crc16`.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of `key`: only the part between the first `{` and the next `}` counts when that
/// part is not empty.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) & 0x3fff
}

/// A set of slots, one bit each, that the main thread writes and any thread may read.
pub struct SlotSet {
    bits: [AtomicU64; SLOTS / 64],
    /// Whether any bit is set, so that the common case (no migration) costs one load.
    any: AtomicBool,
}

impl SlotSet {
    pub const fn new() -> SlotSet {
        SlotSet {
            bits: [const { AtomicU64::new(0) }; SLOTS / 64],
            any: AtomicBool::new(false),
        }
    }

    /// Sets or clears the slots `start..=end` (clamped to the slots that exist).
    pub fn set_range(&self, start: usize, end: usize, on: bool) {
        for slot in start..=end.min(SLOTS - 1) {
            let bit = 1u64 << (slot % 64);
            if on {
                self.bits[slot / 64].fetch_or(bit, Ordering::Relaxed);
            } else {
                self.bits[slot / 64].fetch_and(!bit, Ordering::Relaxed);
            }
        }
        let any = self.bits.iter().any(|b| b.load(Ordering::Relaxed) != 0);
        self.any.store(any, Ordering::Release);
    }

    pub fn clear(&self) {
        for bits in &self.bits {
            bits.store(0, Ordering::Relaxed);
        }
        self.any.store(false, Ordering::Release);
    }

    pub fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    pub fn contains(&self, slot: u16) -> bool {
        let slot = usize::from(slot) % SLOTS;
        self.bits[slot / 64].load(Ordering::Relaxed) & (1u64 << (slot % 64)) != 0
    }

    /// Whether `key`'s slot is in the set; hashes the key only when the set is not empty.
    pub fn holds_key(&self, key: &[u8]) -> bool {
        !self.is_empty() && self.contains(key_slot(key))
    }
}

impl Default for SlotSet {
    fn default() -> Self {
        SlotSet::new()
    }
}

/// The slots an atomic slot migration is importing into this node (or into its master).
pub static IMPORTING: SlotSet = SlotSet::new();

/// The slots this node has just handed over to another by an atomic slot migration, whose keys
/// the server is trimming.
pub static LEFT: SlotSet = SlotSet::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_set_holds_the_ranges_set_and_nothing_else() {
        let set = SlotSet::new();
        assert!(set.is_empty() && !set.holds_key(b"foo"));
        set.set_range(12182, 12182, true);
        set.set_range(0, 63, true);
        set.set_range(16380, 99_999, true);
        assert!(!set.is_empty());
        assert!(set.holds_key(b"foo") && set.contains(0) && set.contains(63));
        assert!(set.contains(16383) && !set.contains(64) && !set.contains(12181));
        set.set_range(0, 16383, false);
        assert!(set.is_empty() && !set.contains(12182));
        set.set_range(5, 5, true);
        set.clear();
        assert!(set.is_empty() && !set.contains(5));
    }

    #[test]
    fn slots_are_those_redis_computes() {
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"proj:0"), key_slot(b"{proj:0}:locks"));
        assert_eq!(key_slot(b"{}x"), crc16(b"{}x") & 0x3fff);
        assert_eq!(key_slot(b"a{b"), crc16(b"a{b") & 0x3fff);
    }
}
