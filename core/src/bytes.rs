//! Short byte strings kept without an allocation.

use crate::alloc::allocation;

/// Bytes kept inline when they fit in `N` (22 by default: most folder and file names), on the
/// heap otherwise. With its tag the default takes 24 bytes, the size of the `Vec`
/// it replaces, and a million of them spare a million allocations. Tokens and request paths
/// keep up to 38 inline (40 bytes in all), which holds a generated UUID and most paths, so that
/// a command's arguments cost no allocation. One length has one form, so the derived equality
/// is the bytes' equality; order and hashing are the bytes', so that a type holding one (a
/// token, a path) derives all three and they agree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SmallBytes<const N: usize = 22> {
    Inline { len: u8, bytes: [u8; N] },
    Heap(Box<[u8]>),
}

impl<const N: usize> SmallBytes<N> {
    pub(crate) fn new(bytes: &[u8]) -> SmallBytes<N> {
        SmallBytes::build(bytes.len(), |out| out.copy_from_slice(bytes))
    }

    /// Bytes of a known length, written in place by `fill` (given exactly `len` bytes).
    pub(crate) fn build(len: usize, fill: impl FnOnce(&mut [u8])) -> SmallBytes<N> {
        const { assert!(N < 256) };
        if len <= N {
            let mut bytes = [0; N];
            fill(&mut bytes[..len]);
            SmallBytes::Inline {
                len: len as u8,
                bytes,
            }
        } else {
            let mut heap = vec![0; len].into_boxed_slice();
            fill(&mut heap);
            SmallBytes::Heap(heap)
        }
    }
}

impl<const N: usize> Default for SmallBytes<N> {
    fn default() -> Self {
        SmallBytes::new(&[])
    }
}

impl<const N: usize> PartialOrd for SmallBytes<N> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<const N: usize> Ord for SmallBytes<N> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

impl<const N: usize> std::hash::Hash for SmallBytes<N> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl<const N: usize> std::ops::Deref for SmallBytes<N> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            SmallBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            SmallBytes::Heap(bytes) => bytes,
        }
    }
}

/// Bytes in 16 bytes: up to 15 inline, as most file and folder names are, and longer ones
/// behind one thin pointer. A tree holds a segment per node, so this is what a node's segment
/// costs: 16 bytes rather than [`SmallBytes`]' 24 (whose heap form is a two-word box). The
/// length's sixteen values leave the rest of its byte to tell the two forms apart, so no tag is
/// needed. One length has one form, and order, equality and hashing are the bytes'.
#[derive(Clone, Debug)]
pub(crate) enum ShortBytes {
    Inline { len: InlineLen, bytes: [u8; 15] },
    Heap(Box<Box<[u8]>>),
}

const _: () = assert!(std::mem::size_of::<ShortBytes>() == 16);

/// The length of inline bytes: a type of sixteen values, so that the others are free for the
/// compiler to mark the heap form with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum InlineLen {
    L0,
    L1,
    L2,
    L3,
    L4,
    L5,
    L6,
    L7,
    L8,
    L9,
    L10,
    L11,
    L12,
    L13,
    L14,
    L15,
}

impl InlineLen {
    const ALL: [InlineLen; 16] = [
        InlineLen::L0,
        InlineLen::L1,
        InlineLen::L2,
        InlineLen::L3,
        InlineLen::L4,
        InlineLen::L5,
        InlineLen::L6,
        InlineLen::L7,
        InlineLen::L8,
        InlineLen::L9,
        InlineLen::L10,
        InlineLen::L11,
        InlineLen::L12,
        InlineLen::L13,
        InlineLen::L14,
        InlineLen::L15,
    ];
}

impl ShortBytes {
    pub(crate) fn new(bytes: &[u8]) -> ShortBytes {
        match InlineLen::ALL.get(bytes.len()) {
            Some(&len) => {
                let mut inline = [0; 15];
                inline[..bytes.len()].copy_from_slice(bytes);
                ShortBytes::Inline { len, bytes: inline }
            }
            None => ShortBytes::Heap(Box::new(bytes.into())),
        }
    }
}

impl ShortBytes {
    /// The bytes kept on the heap as the allocator rounds them, for memory estimates: the
    /// box of the slice's pointer and length, and the slice.
    pub(crate) fn heap_allocation(&self) -> usize {
        match self {
            ShortBytes::Inline { .. } => 0,
            ShortBytes::Heap(bytes) => {
                allocation(std::mem::size_of::<Box<[u8]>>()) + allocation(bytes.len())
            }
        }
    }
}

impl Default for ShortBytes {
    fn default() -> Self {
        ShortBytes::new(&[])
    }
}

impl std::ops::Deref for ShortBytes {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            ShortBytes::Inline { len, bytes } => &bytes[..*len as usize],
            ShortBytes::Heap(bytes) => bytes,
        }
    }
}

impl PartialEq for ShortBytes {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for ShortBytes {}

impl PartialOrd for ShortBytes {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ShortBytes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

impl std::hash::Hash for ShortBytes {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, RandomState};

    #[test]
    fn short_bytes_keep_every_length_and_compare_as_bytes() {
        let words: Vec<Vec<u8>> = (0..40)
            .map(|len| (0..len).map(|i| (i as u8).wrapping_mul(7)).collect())
            .collect();
        let hasher = RandomState::new();
        for a in &words {
            let short = ShortBytes::new(a);
            assert_eq!(&*short, &a[..]);
            assert_eq!(&*short.clone(), &a[..]);
            assert_eq!(hasher.hash_one(&short), hasher.hash_one(&a[..]));
            assert_eq!(matches!(short, ShortBytes::Heap(_)), a.len() > 15);
            for b in &words {
                assert_eq!(short.cmp(&ShortBytes::new(b)), a.cmp(b));
                assert_eq!(short == ShortBytes::new(b), a == b);
            }
        }
    }

    /// Inline and heap forms alike order and hash as their bytes, so a type holding one may
    /// derive both.
    #[test]
    fn order_and_hash_are_the_bytes_on_both_sides_of_the_inline_limit() {
        let words: Vec<Vec<u8>> = (0..8)
            .flat_map(|len| {
                [
                    vec![0u8; len],
                    vec![0xff; len],
                    b"ab\x00cd\xc4\x80x"[..len].to_vec(),
                ]
            })
            .collect();
        let hasher = RandomState::new();
        for a in &words {
            let small = SmallBytes::<4>::new(a);
            assert_eq!(&*small, &a[..]);
            assert_eq!(hasher.hash_one(&small), hasher.hash_one(&a[..]));
            for b in &words {
                assert_eq!(small.cmp(&SmallBytes::<4>::new(b)), a.cmp(b), "{a:?} {b:?}");
                assert_eq!(small == SmallBytes::<4>::new(b), a == b, "{a:?} {b:?}");
            }
        }
    }
}
