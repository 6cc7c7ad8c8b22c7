//! Short byte strings kept without an allocation.

/// Bytes kept inline when they fit in `N` (22 by default: most folder and file names, short
/// tokens), on the heap otherwise. With its tag the default takes 24 bytes, the size of the `Vec`
/// it replaces, and a million of them spare a million allocations. Tokens and request paths
/// keep up to 38 inline (40 bytes in all), which holds a generated UUID and most paths, so that
/// a command's arguments cost no allocation. One length has one form, so the derived equality
/// is the bytes' equality; order and hashing, where needed, go through the bytes.
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

impl<const N: usize> std::ops::Deref for SmallBytes<N> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            SmallBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            SmallBytes::Heap(bytes) => bytes,
        }
    }
}
