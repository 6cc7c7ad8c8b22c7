package io.pathlock;

/**
 * The Redis Cluster hash slot of a key: CRC16 (the XMODEM variant) of the key, or of its hash tag
 * (the part between the first {@code {} and the next {@code }}, when not empty), modulo 16384.
 */
final class SlotHash {
    static final int SLOTS = 16384;

    private SlotHash() {
    }

    static int slot(byte[] key) {
        int start = 0;
        int end = key.length;
        for (int open = 0; open < key.length; open++) {
            if (key[open] == '{') {
                for (int close = open + 1; close < key.length; close++) {
                    if (key[close] == '}') {
                        if (close > open + 1) {
                            start = open + 1;
                            end = close;
                        }
                        break;
                    }
                }
                break;
            }
        }
        return crc16(key, start, end) & (SLOTS - 1);
    }

    static int crc16(byte[] bytes, int start, int end) {
        int crc = 0;
        for (int i = start; i < end; i++) {
            crc ^= (bytes[i] & 0xff) << 8;
            for (int bit = 0; bit < 8; bit++) {
                crc = (crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1;
            }
        }
        return crc & 0xffff;
    }
}
