package io.pathlock;

import static io.pathlock.Support.within;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Who holds what, and why: notes, one owner's locks, the waiting requests, CHECK. */
class NotesTest {
    private static Servers.Server server;
    private static PathLocks connection;
    private static final AtomicInteger KEYS = new AtomicInteger();

    @BeforeAll
    static void start() {
        server = Servers.Server.start();
        connection = server.connect();
    }

    @AfterAll
    static void stop() {
        server.stop();
    }

    private static String project() {
        return "notes:" + KEYS.incrementAndGet();
    }

    private static List<String> notes(List<HeldLock> locks) {
        return locks.stream().map(HeldLock::note).toList();
    }

    @Test
    void blockersCarryTheNoteOfTheOperationTheHandleOrTheCall() {
        String key = project();
        PathLocks locks = connection.project(key);
        PathLocks bob = connection.project(key);
        try (Lease move = locks.move("/A/C", "/B")) {
            assertEquals("move /A/C -> /B", move.note());
            Busy busy = assertThrows(Busy.class, () -> bob.upload("/A/C/D/new.txt"));
            assertEquals(List.of("move /A/C -> /B"), notes(busy.blockers()));
            assertTrue(busy.getMessage().contains("(move /A/C -> /B)"), busy.getMessage());
        }
        PathLocks alice = locks.note("Alice");
        try (Lease copy = alice.copy("/F/a.txt", "/G"); Lease read = alice.read("/R", AcquireOptions.with().note("Alice, reading"))) {
            assertEquals(List.of("Alice", "Alice"), notes(locks.locksOf(copy.token())));
            assertEquals(List.of("Alice, reading"), notes(locks.locksOf(read.token())));
            Busy busy = assertThrows(Busy.class, () -> bob.delete("/G/a.txt"));
            assertEquals(List.of("Alice"), notes(busy.blockers()));
        }
        try (Lease quiet = locks.operationNotes(false).upload("/Q")) {
            assertNull(quiet.note());
            assertEquals(List.of(List.of("/Q", "WRITE", quiet.token())), Support.shape(locks.locks()));
            assertNull(locks.locks().get(0).note());
        }
        // Every operation names itself; purge and lock list what they lock.
        try (Lease purge = locks.purge("/bin/1", "/bin/2");
                Lease lock = locks.lock(LockRequest.read("/S"), LockRequest.write("/S/x"));
                Lease rename = locks.rename("/E/f", "g")) {
            assertEquals(List.of("purge /bin/1 /bin/2"), notes(locks.locksOf(purge.token())).stream().distinct().toList());
            assertEquals(List.of("lock READ /S, WRITE /S/x"), notes(locks.locksOf(lock.token())).stream().distinct().toList());
            assertEquals(List.of("rename /E/f -> /E/g"), notes(locks.locksOf(rename.token())).stream().distinct().toList());
        }
        // A note longer than the server takes is its error; a default one is cut to fit.
        ServerException tooLong = assertThrows(ServerException.class,
                () -> locks.upload("/L", AcquireOptions.with().note("n".repeat(300))));
        assertTrue(tooLong.getMessage().contains("NOTE too long"), tooLong.getMessage());
        try (Lease cut = locks.upload("/" + "long".repeat(100))) {
            assertTrue(cut.note().endsWith("..."), cut.note());
            assertEquals(List.of(cut.note()), notes(locks.locksOf(cut.token())));
        }
    }

    @Test
    void locksUnderALeaseShareItsNoteOrTakeTheirOwn() {
        PathLocks locks = connection.project(project()).note("Alice");
        try (Lease move = locks.move("/A/C", "/B")) {
            move.lock(LockRequest.write("/B/C/new.txt"));
            move.lock(List.of(LockRequest.read("/T")), AcquireOptions.with().note("Alice, checking /T"));
            assertEquals(List.of(List.of("/A/C", "Alice"), List.of("/B/C", "Alice"), List.of("/B/C/new.txt", "Alice"),
                    List.of("/T", "Alice, checking /T")),
                    locks.locksOf(move.token()).stream().map(l -> List.of(l.path(), l.note())).toList());
        }
    }

    @Test
    void listsOneOwnersLocksAndTheLocksUnderAPath() {
        PathLocks locks = connection.project(project());
        try (Lease mine = locks.move("/A/C", "/B"); Lease theirs = locks.upload("/A/D/f");
                Lease folder = locks.create("/TOKEN/x")) {
            assertEquals(List.of(List.of("/A/C", "WRITE", mine.token()), List.of("/B/C", "WRITE", mine.token())),
                    Support.shape(locks.locksOf(mine.token())));
            assertEquals(List.of(List.of("/A/C", "WRITE", mine.token()), List.of("/A/D/f", "WRITE", theirs.token())),
                    Support.shape(locks.locks("/A")));
            assertEquals(List.of(List.of("/A/D/f", "WRITE", theirs.token())), Support.shape(locks.locks("/A", theirs.token())));
            assertEquals(List.of(), locks.locks("/B", theirs.token()));
            // A folder named TOKEN is a path, not the option.
            assertEquals(List.of(List.of("/TOKEN/x", "WRITE", folder.token())), Support.shape(locks.locks("TOKEN")));
            assertEquals(List.of(), locks.locksOf("nobody"));
            // CHECK: who would block a request, and not the asker's own locks.
            List<LockRequest> inside = List.of(LockRequest.write("/A/C/new"));
            assertEquals(List.of(List.of("/A/C", "WRITE", mine.token())), Support.shape(locks.check(inside)));
            assertEquals(List.of(), locks.check(inside, mine.token()));
            assertEquals(List.of(), locks.check(List.of(LockRequest.read("/Z"))));
        }
    }

    @Test
    void listsTheWaitingRequestsInQueueOrder() throws Exception {
        PathLocks locks = connection.project(project());
        try (Lease held = locks.upload("/A")) {
            assertEquals(List.of(), locks.waiters());
            CompletableFuture<Lease> first = Support.async(() -> locks.upload("/A/x",
                    AcquireOptions.with().waitFor(Duration.ofSeconds(10)).note("Bob")));
            Support.waitUntil("the first waiter", 3000, () -> locks.waiters().size() == 1);
            CompletableFuture<Lease> second = Support.async(() -> locks.read("/A",
                    AcquireOptions.with().waitFor(Duration.ofSeconds(10))));
            Support.waitUntil("the second waiter", 3000, () -> locks.waiters().size() == 2);
            List<Waiter> waiters = locks.waiters();
            assertEquals(List.of(List.of(LockRequest.write("/A/x")), List.of(LockRequest.read("/A"))),
                    waiters.stream().map(Waiter::requests).toList());
            assertEquals(List.of("Bob", "read /A"), waiters.stream().map(Waiter::note).toList());
            Waiter bob = waiters.get(0);
            assertTrue(bob.leftMs() > 0 && bob.leftMs() <= 10000 && bob.waitedMs() >= 0, bob.toString());
            assertEquals(List.of("Bob"), locks.waiters("/A/x").stream().map(Waiter::note).toList());
            assertEquals(List.of(), locks.waiters("/B"));
            held.release();
            // The upload is granted; the read of /A waits on behind it until the upload is done.
            Lease upload = within(first, 3000);
            assertEquals(upload.token(), bob.token());
            assertEquals(List.of(waiters.get(1).token()), locks.waiters().stream().map(Waiter::token).toList());
            upload.release();
            Lease read = within(second, 3000);
            assertEquals(List.of(), locks.waiters());
            read.release();
        }
    }
}
