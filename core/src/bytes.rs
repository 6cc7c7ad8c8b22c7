//! Short byte strings kept without an allocation.

/// Bytes kept inline when they fit in 22 (most folder and file names, short tokens), on the
/// heap otherwise. With its tag it takes 24 bytes, the size of the `Vec` it replaces, and a
/// million of them spare a million allocations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SmallBytes {
    Inline {
        len: u8,
        bytes: [u8; SmallBytes::INLINE],
    },
    Heap(Box<[u8]>),
}

impl SmallBytes {
    pub(crate) const INLINE: usize = 22;

    pub(crate) fn new(bytes: &[u8]) -> SmallBytes {
        if bytes.len() <= SmallBytes::INLINE {
            let mut inline = [0; SmallBytes::INLINE];
            inline[..bytes.len()].copy_from_slice(bytes);
            SmallBytes::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            }
        } else {
            SmallBytes::Heap(bytes.into())
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

impl Default for SmallBytes {
    fn default() -> Self {
        SmallBytes::new(&[])
    }
}

impl std::ops::Deref for SmallBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            SmallBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            SmallBytes::Heap(bytes) => bytes,
        }
    }
}
