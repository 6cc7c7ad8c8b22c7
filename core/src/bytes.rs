//! Short byte strings kept without an allocation.

/// Bytes kept inline when they fit in `N` (22 by default: most folder and file names, short
/// tokens), on the heap otherwise. With its tag the default takes 24 bytes, the size of the `Vec`
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

    /// The bytes kept on the heap, for memory estimates.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            SmallBytes::Inline { .. } => 0,
            SmallBytes::Heap(bytes) => bytes.len(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, RandomState};

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
