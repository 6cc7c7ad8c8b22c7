package io.pathlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The README's examples, run as written against a real server (with stand-ins for the storage). */
class ReadmeTest {
    private static Servers.Server server;
    private final List<String> written = new ArrayList<>();
    private final List<String> printed = new ArrayList<>();

    @BeforeAll
    static void start() {
        server = Servers.Server.start();
    }

    @AfterAll
    static void stop() {
        server.stop();
    }

    record Step(String what) {
    }

    private List<Step> moveSteps(String from, String to) {
        return List.of(new Step("copy " + from + " to " + to), new Step("delete " + from));
    }

    private void write(Step step, long fence) {
        written.add(step.what() + " @" + fence);
    }

    /** The "Use" example, with `storage.write` and `System.out.println` collected. */
    private void example(PathLocks locks) {
        try (Lease lease = locks.move("/A/C", "/B")) {
            for (Step step : moveSteps("/A/C", "/B/C")) {
                lease.throwIfLost();
                write(step, lease.fence());
            }
        } catch (Busy busy) {
            if (busy.checkError().isPresent()) {
                printed.add("/A/C is busy: try again");
            } else if (busy.blockers().isEmpty()) {
                printed.add("/A/C is free again: try again");
            }
            for (HeldLock b : busy.blockers()) {
                printed.add(b.path() + " is locked by " + b.token() + ": " + b.note());
            }
        }
    }

    @Test
    void runsTheUseExampleAndItsBusyBranch() {
        // As the README builds them: one handle at start, one per request from it.
        PathLocks drive = PathLocks.of(server.client(server.uri()), "proj:42").ttl(Duration.ofSeconds(60));
        server.track(drive);
        PathLocks locks = drive.project("proj:" + 42);
        example(locks);
        assertEquals(2, written.size());
        long fence = Long.parseLong(written.get(0).split(" @")[1]);
        assertEquals(List.of("copy /A/C to /B/C @" + fence, "delete /A/C @" + fence), written);
        assertEquals(List.of(), locks.locks());
        try (Lease other = locks.delete("/A")) {
            example(locks);
            assertEquals(1, printed.size());
            assertTrue(printed.get(0).startsWith("/A is locked by " + other.token() + ": "), printed.get(0));
        }
        // Refused with nobody left to name (only an earlier waiter for /A was in the way): the
        // example says to try again.
        try (Lease unrelated = locks.upload("/Z")) {
            CompletableFuture<Lease> waiter = locks.async().lock(List.of(LockRequest.write("/A"), LockRequest.write("/Z")),
                    AcquireOptions.with().waitFor(Duration.ofSeconds(10)));
            Support.waitUntil("the waiter", 3000, () -> locks.waiters().size() == 1);
            example(locks);
            assertEquals(List.of("/A/C is free again: try again"), printed.subList(1, printed.size()));
            unrelated.release();
            Support.within(waiter, 3000).release();
        }
        // Refused, and who holds the paths could not be read (a user that may not CHECK): the
        // example says the path is busy, not that it is free again.
        server.command("ACL", "SETUSER", "readme-nocheck", "reset", "on", ">pw", "~*", "+@all", "-pathlock.check");
        try (Lease other = locks.delete("/A")) {
            PathLocks unchecked = server.connect(RedisURI.builder().withHost("127.0.0.1").withPort(server.port)
                    .withAuthentication("readme-nocheck", "pw").build()).project(other.key());
            example(unchecked);
            assertEquals(List.of("/A/C is busy: try again"), printed.subList(2, printed.size()));
        } finally {
            server.command("ACL", "DELUSER", "readme-nocheck");
        }
    }

    @Test
    void runsTheNestedLocksExample() {
        PathLocks locks = server.connect().project("proj:43");
        List<Long> uploads = new ArrayList<>();
        try (Lease move = locks.move("/A/C", "/B")) {
            long fence = move.lock(LockRequest.write("/B/C/new.txt"));
            uploads.add(fence);
            assertEquals(3, locks.locks().size());
        }
        assertEquals(List.of(), locks.locks());
        assertEquals(1, uploads.size());
    }
}
