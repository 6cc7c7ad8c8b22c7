//! The Cluster hash slot of a key, as Redis computes it (CRC16-XMODEM of the key, or of its hash
//! tag, modulo 16384), for the redirections that waiters of a migrated project are answered.
//!
//! Level 0: imports nothing of the crate. Used by `waits`.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_those_redis_computes() {
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"proj:0"), key_slot(b"{proj:0}:locks"));
        assert_eq!(key_slot(b"{}x"), crc16(b"{}x") & 0x3fff);
        assert_eq!(key_slot(b"a{b"), crc16(b"a{b") & 0x3fff);
    }
}
