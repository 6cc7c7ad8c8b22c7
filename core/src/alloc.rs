//! How the allocator rounds an allocation up, for the memory estimates behind `MEMORY USAGE`.
//!
//! An estimate that adds up requested sizes reads low for small values: the compact form of a
//! one-lock project asks for 53 bytes and takes 64 from Debian's jemalloc, 56 from glibc's malloc. The
//! server counts `used_memory` in what its allocator hands out, so the estimates round each
//! allocation the same way. Which way depends on the server's build: Debian's Redis links the
//! system's jemalloc (16-byte steps), Redis's own builds a jemalloc with 8-byte steps, Valkey
//! and builds without jemalloc use the C library's malloc (16-byte chunks, 8 bytes of which hold
//! the chunk's size). So the module asks its allocator at load what it makes of each small size
//! ([`learn_size_classes`]); until then, and for sizes past those it asked about, the estimates
//! take jemalloc's classes with 16-byte steps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Where glibc's malloc maps memory for an allocation of its own instead of cutting a chunk.
const MAPPED: usize = 128 * 1024;

/// The sizes asked about at load: up to this many bytes, in steps of 8.
const LEARNED_UP_TO: usize = 1024;

/// What the allocator hands out for a request of each multiple of 8 up to `LEARNED_UP_TO`.
static LEARNED: OnceLock<Vec<usize>> = OnceLock::new();

/// Whether the allocator rounds sizes past `LEARNED_UP_TO` to 16 bytes, as glibc's malloc does,
/// rather than to four classes per doubling, as jemalloc does.
static FINE: AtomicBool = AtomicBool::new(false);

/// Learns the allocator's sizes up to 1 KB from `usable`, which tells what a request of that
/// many bytes takes, and how it rounds larger ones. Every allocator above hands out the same
/// for all sizes between two consecutive multiples of 8, so those are the ones asked about. The
/// first call counts.
pub fn learn_size_classes(mut usable: impl FnMut(usize) -> usize) {
    // jemalloc hands out 5,120 bytes for 5,000; glibc's malloc 5,000 and a few.
    let fine = usable(5000) < 5120;
    if LEARNED
        .set((8..=LEARNED_UP_TO).step_by(8).map(usable).collect())
        .is_ok()
    {
        FINE.store(fine, Ordering::Relaxed);
    }
}

/// The bytes an allocation of `size` takes, as the allocator rounds it.
pub fn allocation(size: usize) -> usize {
    if size == 0 {
        return 0;
    }
    if let Some(learned) = LEARNED.get().filter(|_| size <= LEARNED_UP_TO) {
        return learned[(size - 1) / 8].max(size);
    }
    if FINE.load(Ordering::Relaxed) {
        // glibc's chunks: 16-byte steps with 8 bytes of header, and whole pages past the
        // threshold where it maps memory for one allocation (128 KB unless tuned).
        return if size < MAPPED {
            (size + 8).next_multiple_of(16) - 8
        } else {
            (size + 16).next_multiple_of(4096) - 16
        };
    }
    match size {
        1..=8 => 8,
        9..=128 => size.next_multiple_of(16),
        _ => {
            // Four classes between each power of two and the next: steps of a quarter of it.
            let step = 1 << (usize::BITS - 1 - (size - 1).leading_zeros() - 2);
            size.next_multiple_of(step)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_to_jemallocs_classes_until_learned() {
        let rounded: Vec<usize> = [1, 8, 9, 16, 17, 60, 64, 65, 128, 129, 160, 161, 257, 1025]
            .into_iter()
            .map(allocation)
            .collect();
        assert_eq!(
            rounded,
            [8, 8, 16, 16, 32, 64, 64, 80, 128, 160, 160, 192, 320, 1280]
        );
    }
}
