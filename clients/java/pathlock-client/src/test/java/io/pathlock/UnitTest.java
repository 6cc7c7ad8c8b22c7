package io.pathlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;

/** What needs no server: paths, the refusals of move, copy and rename, notes, durations, messages. */
class UnitTest {
    @Test
    void pathsAreSplitAsTheModuleSplitsThem() {
        assertEquals("/A/C", Paths.normalise("//A/./C/"));
        assertEquals("/", Paths.normalise(""));
        assertTrue(Paths.isRoot("/./"));
        assertEquals("/B/C", Paths.into("move", "/A/C", "/B/"));
        assertEquals("/C", Paths.into("move", "A/C/", "/"));
        assertThrows(IllegalArgumentException.class, () -> Paths.into("move", "/", "/B"));
        assertEquals("/TOKEN", Paths.normalise("TOKEN"));
        IllegalArgumentException root = assertThrows(IllegalArgumentException.class, () -> LockRequest.write(""));
        assertTrue(root.getMessage().contains("LockRequest.wholeProject(Mode.WRITE)"), root.getMessage());
        assertEquals(new LockRequest(Mode.READ, "/"), LockRequest.wholeProject(Mode.READ));
        assertEquals(Mode.WRITE, Mode.parse("write"));
    }

    @Test
    void moveAndCopyRefuseATargetInsideTheSourceOrItsOwnFolder() {
        for (String operation : List.of("move", "copy")) {
            // Into itself, or its own subtree: a folder cannot go into itself.
            for (String[] refused : new String[][] {{"/A", "/A"}, {"/A", "/A/C"}, {"//A/", "A/./C/D"}, {"/A/C", "/A/C/"}}) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> Paths.into(operation, refused[0], refused[1]));
                assertTrue(e.getMessage().startsWith("cannot " + operation + " "), e.getMessage());
                assertTrue(e.getMessage().contains("cannot go into itself or its own subtree"), e.getMessage());
            }
            // Into its own folder: the target would be the source itself.
            for (String[] refused : new String[][] {{"/A/C", "/A"}, {"/A/C", "/A/./"}, {"/C", "/"}}) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> Paths.into(operation, refused[0], refused[1]));
                assertTrue(e.getMessage().contains("it is already in that folder"), e.getMessage());
            }
            // Segment by segment: /A/CD is beside /A/C, not inside it.
            assertEquals("/A/CD/C", Paths.into(operation, "/A/C", "/A/CD"));
            assertEquals("/A/C/B", Paths.into(operation, "/B", "/A/C"));
            assertEquals("/B/C", Paths.into(operation, "/A/C", "/B"));
            // The root, an empty path or folder, and "..", as before anything is sent.
            assertThrows(IllegalArgumentException.class, () -> Paths.into(operation, "", "/B"));
            assertThrows(IllegalArgumentException.class, () -> Paths.into(operation, "/A", ""));
            IllegalArgumentException dots = assertThrows(IllegalArgumentException.class,
                    () -> Paths.into(operation, "/A/../B", "/C"));
            assertTrue(dots.getMessage().contains("has a \"..\" segment"), dots.getMessage());
            assertThrows(IllegalArgumentException.class, () -> Paths.into(operation, "/A", "/B/.."));
        }
    }

    @Test
    void renameTakesANameInTheSameFolder() {
        assertEquals("/A/C2", Paths.renamed("/A/C", "C2"));
        assertEquals("/C2", Paths.renamed("C", "C2"));
        assertEquals("/A/C.txt", Paths.renamed("/A/./C/", "C.txt"));
        for (String name : List.of("", ".", "..", "C", "B/C2", "/A/C2", "C2/")) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Paths.renamed("/A/C", name));
            assertTrue(e.getMessage().contains("rename takes a name for /A/C in the same folder"), e.getMessage());
            assertTrue(e.getMessage().contains("to change folders, use move(path, intoFolder)"), e.getMessage());
        }
        assertThrows(IllegalArgumentException.class, () -> Paths.renamed("/", "x"));
        assertThrows(IllegalArgumentException.class, () -> Paths.renamed("/A/../C", "x"));
        // A whole path in the same folder is the likeliest slip: the message gives the call meant.
        assertTrue(assertThrows(IllegalArgumentException.class, () -> Paths.renamed("/A/C", "/A/C2")).getMessage()
                .endsWith("; here: rename(\"/A/C\", \"C2\")"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> Paths.renamed("/C", "/./C2/")).getMessage()
                .endsWith("; here: rename(\"/C\", \"C2\")"));
        for (String name : List.of("B/C2", "/B/C2", "C2/", "/A/C", "/A/C2/x", "/A/../C2")) {
            assertFalse(assertThrows(IllegalArgumentException.class, () -> Paths.renamed("/A/C", name)).getMessage()
                    .contains("here:"), name);
        }
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
        assertEquals("ttl must be a number of milliseconds, at least 1; got 1 ns",
                assertThrows(IllegalArgumentException.class, () -> Settings.ttlMs(Duration.ofNanos(1))).getMessage());
        assertEquals("wait must be a number of milliseconds, at least 0; got -5 ms",
                assertThrows(IllegalArgumentException.class, () -> Settings.waitMs(Duration.ofMillis(-5))).getMessage());
        assertEquals("replicasTimeout must be a number of milliseconds, at least 1; got 0 ms",
                assertThrows(IllegalArgumentException.class, () -> AcquireOptions.with().replicasTimeout(Duration.ZERO))
                        .getMessage());
        assertThrows(IllegalArgumentException.class, () -> Settings.ttlMs(Duration.ofDays(365 * 100)));
        assertEquals("1.5 ms", Paths.describe(Duration.ofNanos(1_500_000)));
        assertEquals("0 ms", Paths.describe(Duration.ZERO));
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
        assertEquals("busy: WRITE /A/C/x in \"proj:1\": WRITE /A/C held by t1 (move /A/C -> /B) for 1200 ms more",
                busy.getMessage());
        // The contract's scenarios check these texts on a server; here, a key that needs escaping.
        assertEquals("busy: READ /x in \"a\\\"b\\x0a\": nothing holds these paths now: the holders let go in between, "
                + "or an earlier waiting request goes first; try again",
                new Busy("a\"b\n", List.of(LockRequest.read("/x")), List.of()).getMessage());
        // The blockers could not be read: the message says so, naming the check's failure.
        ConnectionException lost = new ConnectionException("the server could not be reached (gone); the command's fate is unknown");
        Busy unread = new Busy("proj:1", List.of(LockRequest.write("/B")), List.of(), lost);
        assertEquals("busy: WRITE /B in \"proj:1\": the locks in the way could not be read (ConnectionException: the server "
                + "could not be reached (gone); the command's fate is unknown); try again", unread.getMessage());
        assertEquals(java.util.Optional.of(lost), unread.checkError());
        assertSame(lost, unread.getCause());
        WrongType wrong = new WrongType("a\nb", "WRONGTYPE x");
        assertEquals("key \"a\\x0ab\" is not a pathlock project: it holds another type of value (check the key name)",
                wrong.getMessage());
        assertEquals("WRONGTYPE x", wrong.reply());
        assertTrue(new LeaseLost("p", "t", LostReason.EXPIRED).getMessage()
                .startsWith("lease t on \"p\" is lost: no renewal succeeded before its deadline"));
        // The client's own timeouts carry no message of their own: none is made up ("(null)").
        assertEquals("no reply in time; the command's fate is unknown",
                Errors.of(new java.util.concurrent.TimeoutException(), "p", null).getMessage());
        // A server without the module answers pathlock's commands as unknown ones.
        ServerException missing = Errors.serverError("proj:1",
                "ERR unknown command 'PATHLOCK.ACQUIRE', with args beginning with: 'proj:1' ", null);
        assertEquals("the pathlock module is not loaded on the server that serves \"proj:1\" (ERR unknown command "
                + "'PATHLOCK.ACQUIRE', with args beginning with: 'proj:1')", missing.getMessage());
        assertEquals("ERR unknown command 'PATHLOCK.ACQUIRE', with args beginning with: 'proj:1' ", missing.reply());
        assertEquals("ERR unknown command 'FOO'", Errors.serverError("p", "ERR unknown command 'FOO'", null).getMessage());
    }
}
