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
    void operationNotesCanBeTurnedOffAndADefaultNoteIsCutToFit() {
        // Which note a lock gets, and Busy's text, are the contract's scenarios; these are Java's own.
        PathLocks locks = connection.project(project());
        try (Lease quiet = locks.operationNotes(false).upload("/Q")) {
            assertNull(quiet.note());
            assertNull(locks.locks().get(0).note());
        }
        ServerException tooLong = assertThrows(ServerException.class,
                () -> locks.upload("/L", AcquireOptions.with().note("n".repeat(300))));
        assertTrue(tooLong.getMessage().contains("NOTE too long"), tooLong.getMessage());
        try (Lease cut = locks.upload("/" + "long".repeat(100))) {
            assertTrue(cut.note().endsWith("..."), cut.note());
            assertEquals(List.of(cut.note()), notes(locks.locksOf(cut.token())));
        }
    }

    @Test
    void aFolderNamedTokenIsAPathNotTheOption() {
        PathLocks locks = connection.project(project());
        try (Lease folder = locks.create("/TOKEN/x")) {
            assertEquals(List.of(List.of("/TOKEN/x", "WRITE", folder.token())), Support.shape(locks.locks("TOKEN")));
            assertEquals(List.of(), locks.locksOf("nobody"));
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
