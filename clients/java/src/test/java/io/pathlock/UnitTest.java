package io.pathlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;

/** What needs no server: slots, paths, notes, durations, messages. */
class UnitTest {
    private static int slot(String key) {
        return SlotHash.slot(key.getBytes(StandardCharsets.UTF_8));
    }

    @Test
    void hashSlotsAreRedisClusters() {
        // CRC16/XMODEM's check value, and slots Redis documents.
        assertEquals(0x31C3, SlotHash.crc16("123456789".getBytes(StandardCharsets.US_ASCII), 0, 9));
        assertEquals(12182, slot("foo"));
        assertEquals(slot("user1000"), slot("{user1000}.following"));
        assertEquals(slot("{user1000}.following"), slot("{user1000}.followers"));
        // An empty tag, or no closing brace, hashes the whole key; only the first tag counts.
        assertEquals(SlotHash.crc16("foo{}{bar}".getBytes(), 0, 10) & 16383, slot("foo{}{bar}"));
        assertEquals(slot("{bar"), slot("foo{{bar}}zap"));
        assertEquals(slot("bar"), slot("foo{bar}{zap}"));
        assertEquals(SlotHash.crc16("foo{bar".getBytes(), 0, 7) & 16383, slot("foo{bar"));
    }

    @Test
    void pathsAreSplitAsTheModuleSplitsThem() {
        assertEquals("/A/C", Paths.normalise("//A/./C/"));
        assertEquals("/", Paths.normalise(""));
        assertTrue(Paths.isRoot("/./"));
        assertEquals("/B/C", Paths.into("/B/", "/A/C"));
        assertEquals("/C", Paths.into("/", "A/C/"));
        assertThrows(IllegalArgumentException.class, () -> Paths.into("/B", "/"));
        assertEquals("/TOKEN", Paths.normalise("TOKEN"));
        IllegalArgumentException root = assertThrows(IllegalArgumentException.class, () -> LockRequest.write(""));
        assertTrue(root.getMessage().contains("LockRequest.wholeProject(Mode.WRITE)"), root.getMessage());
        assertEquals(new LockRequest(Mode.READ, "/"), LockRequest.wholeProject(Mode.READ));
        assertEquals(Mode.WRITE, Mode.parse("write"));
    }

    @Test
    void defaultNotesAreCutAtACharacterWithin256Bytes() {
        assertEquals("move /A -> /B", Paths.defaultNote("move /A -> /B"));
        String note = Paths.defaultNote("upload /" + "é".repeat(300));
        assertTrue(note.getBytes(StandardCharsets.UTF_8).length <= 256, note);
        assertTrue(note.endsWith("é..."), note);
        assertEquals(256, Paths.defaultNote("x".repeat(300)).length());
    }

    @Test
    void durationsAreCheckedWithUnits() {
        assertEquals(2, Settings.ttlMs(Duration.ofNanos(1_500_000)));
        assertEquals(1, Settings.ttlMs(Duration.ofMillis(1)));
        assertEquals("ttl must be at least 1 ms, not 1 ns",
                assertThrows(IllegalArgumentException.class, () -> Settings.ttlMs(Duration.ofNanos(1))).getMessage());
        assertEquals("wait must be at least 0 ms, not -5 ms",
                assertThrows(IllegalArgumentException.class, () -> Settings.waitMs(Duration.ofMillis(-5))).getMessage());
        assertEquals("replicasTimeout must be at least 1 ms, not 0 us",
                assertThrows(IllegalArgumentException.class, () -> AcquireOptions.with().replicasTimeout(Duration.ZERO))
                        .getMessage());
        assertThrows(IllegalArgumentException.class, () -> Settings.ttlMs(Duration.ofDays(365 * 100)));
        assertEquals("1.5 ms", Paths.describe(Duration.ofNanos(1_500_000)));
        assertEquals(Settings.DEFAULTS, Settings.DEFAULTS.with(AcquireOptions.NONE));
        assertEquals(new Settings(500, 7, 2, 1000), Settings.DEFAULTS.with(AcquireOptions.with()
                .ttl(Duration.ofMillis(500)).waitFor(Duration.ofMillis(7)).replicas(2)));
        assertEquals(166, new Settings(500, 0, 0, 1).periodMs());
        assertEquals(1, new Settings(2, 0, 0, 1).periodMs());
    }

    @Test
    void messagesSayWhatHappened() {
        HeldLock held = new HeldLock("/A/C", Mode.WRITE, "t1", 1200, 7, "move /A/C -> /B");
        Busy busy = new Busy("proj:1", List.of(LockRequest.write("/A/C/x")), List.of(held));
        assertEquals("busy: WRITE /A/C/x in \"proj:1\" is blocked by WRITE /A/C (owner t1, \"move /A/C -> /B\", "
                + "1200 ms left, fence 7)", busy.getMessage());
        assertTrue(new Busy("p", List.of(LockRequest.read("/x")), List.of()).getMessage()
                .contains("an earlier request is waiting for it"));
        WrongType wrong = new WrongType("a\nb", "WRONGTYPE x");
        assertEquals("key \"a\\x0ab\" is not a pathlock project: it holds another type of value", wrong.getMessage());
        assertEquals("WRONGTYPE x", wrong.reply());
        assertTrue(new LeaseLost("p", "t", LostReason.EXPIRED).getMessage()
                .startsWith("lease t on \"p\" is lost: no renewal succeeded before the lease's deadline"));
    }
}
