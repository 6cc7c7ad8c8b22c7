//! Node and owner ids, the sentinels that share their 32 bits, and the mode tag.

use crate::lock::Mode;

pub(super) type NodeId = u32;
pub(super) type OwnerId = u32;

pub(super) const ROOT: NodeId = 0;

/// The mode of a lock reference, kept in the top bit of its id so that the reference fits in
/// 32 bits.
const READ_BIT: u32 = 1 << 31;
/// An empty slot: no lock, no child, no table, no neighbour.
pub(super) const NONE: u32 = u32::MAX;
/// A slot whose entries outgrew it and live in a side map of the table.
pub(super) const SPILLED: u32 = u32::MAX - 1;
/// An owner's lock slot when the owner is big: its locks are in `Tree::bigs` (see `big`).
pub(super) const BIG: u32 = u32::MAX - 2;
/// Ids stay below the sentinels and the mode bit. Reaching it would take 2^31 nodes or owners,
/// over 100 GiB, but the check keeps a tagged id from ever being misread.
pub(super) const MAX_ID: u32 = READ_BIT - 2;

/// A node or owner id with a mode: a lock seen from its owner, or an owner seen from its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Tagged(pub(super) u32);

impl Tagged {
    pub(super) fn new(id: u32, mode: Mode) -> Tagged {
        Tagged(match mode {
            Mode::Write => id,
            Mode::Read => id | READ_BIT,
        })
    }

    pub(super) fn id(self) -> u32 {
        self.0 & !READ_BIT
    }

    pub(super) fn mode(self) -> Mode {
        if self.0 & READ_BIT == 0 {
            Mode::Write
        } else {
            Mode::Read
        }
    }
}
