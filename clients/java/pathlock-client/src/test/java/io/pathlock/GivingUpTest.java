package io.pathlock;

import static io.pathlock.Support.within;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * An async acquire's future completed by the caller ({@code orTimeout}, {@code completeOnTimeout},
 * {@code complete}, {@code completeExceptionally}, {@code obtrude*}) gives the call up as
 * {@code cancel} does, on a real server of its own: a wait left behind by a failure here would
 * otherwise count in the other classes' checks of the server's waiting clients.
 */
class GivingUpTest {
    private static Servers.Server server;
    private static final AtomicInteger KEYS = new AtomicInteger();

    @BeforeAll
    static void start() {
        server = Servers.Server.start();
    }

    @AfterAll
    static void stop() {
        server.stop();
    }

    private static String project() {
        return "givingup:" + KEYS.incrementAndGet();
    }

    /**
     * A waiting acquire whose future the caller completes by {@code end} (on the same instance, as
     * {@code orTimeout} does): the wait leaves the server's queue at once, though 30 s of it were
     * left, and the holder's release then grants nobody.
     */
    private static void endingTheFutureGivesTheWaitUp(Consumer<CompletableFuture<Lease>> end,
            Class<? extends Throwable> failure) {
        PathLocks locks = server.connect().project(project());
        Lease holder = locks.upload("/A");
        CompletableFuture<Lease> waiting = locks.async().upload("/A/x", AcquireOptions.with().waitFor(Duration.ofSeconds(30)));
        Support.waitUntil("the wait on the server", 5000, () -> locks.waiters(null).size() == 1);
        String token = locks.waiters(null).get(0).token();
        end.accept(waiting);
        if (failure == null) {
            assertEquals(null, within(waiting, 3000));
        } else {
            ExecutionException ended = assertThrows(ExecutionException.class, () -> waiting.get(3, TimeUnit.SECONDS));
            assertInstanceOf(failure, ended.getCause());
        }
        Support.waitUntil("the wait to leave the server's queue", 2000, () -> locks.waiters(null).isEmpty());
        holder.release();
        Servers.sleep(300);
        assertEquals(List.of(), locks.locks(null, token), "the given-up wait was granted and kept");
        assertEquals(List.of(), locks.locks());
        assertEquals(List.of(), locks.waiters(null));
    }

    @Test
    void orTimeoutOnAWaitingAcquireGivesTheWaitUp() {
        endingTheFutureGivesTheWaitUp(waiting -> assertTrue(waiting.orTimeout(50, TimeUnit.MILLISECONDS) == waiting),
                TimeoutException.class);
    }

    @Test
    void completingAWaitingAcquireGivesTheWaitUp() {
        endingTheFutureGivesTheWaitUp(waiting -> assertTrue(waiting.complete(null)), null);
    }

    @Test
    void everyOtherCompletionByTheCallerGivesTheWaitUp() {
        endingTheFutureGivesTheWaitUp(waiting -> waiting.completeOnTimeout(null, 50, TimeUnit.MILLISECONDS), null);
        endingTheFutureGivesTheWaitUp(waiting -> assertTrue(waiting.completeExceptionally(new IllegalStateException("enough"))),
                IllegalStateException.class);
        endingTheFutureGivesTheWaitUp(waiting -> waiting.obtrudeValue(null), null);
    }

    @Test
    void orTimeoutOnANestedLockAsyncGivesTheWaitUp() {
        PathLocks locks = server.connect().project(project());
        Lease holder = locks.upload("/A");
        try (Lease lease = locks.upload("/B")) {
            CompletableFuture<Long> waiting = lease.lockAsync(List.of(LockRequest.write("/A/x")),
                    AcquireOptions.with().waitFor(Duration.ofSeconds(30)));
            Support.waitUntil("the wait on the server", 5000, () -> locks.waiters(null).size() == 1);
            waiting.orTimeout(50, TimeUnit.MILLISECONDS);
            ExecutionException ended = assertThrows(ExecutionException.class, () -> waiting.get(3, TimeUnit.SECONDS));
            assertInstanceOf(TimeoutException.class, ended.getCause());
            Support.waitUntil("the wait to leave the server's queue", 2000, () -> locks.waiters(null).isEmpty());
            holder.release();
            Servers.sleep(300);
            assertEquals(List.of(LockRequest.write("/B")), locks.locks(null, lease.token()).stream()
                    .map(held -> new LockRequest(held.mode(), held.path())).toList());
        }
        assertEquals(List.of(), locks.locks());
    }

    @Test
    void aCompletionByTheCallerRacingTheGrantLeaksNoLock() {
        PathLocks locks = server.connect().project(project());
        Random random = new Random(7);
        int mine = 0;
        for (int i = 0; i < 30; i++) {
            Lease holder = locks.upload("/A");
            CompletableFuture<Lease> waiting = locks.async().upload("/A/x", AcquireOptions.with().waitFor(Duration.ofSeconds(30)));
            Support.waitUntil("the wait on the server", 5000, () -> locks.waiters(null).size() == 1);
            // The release and the caller's completion race: whichever wins, nothing stays held.
            CompletableFuture<Void> released = holder.releaseAsync();
            if (random.nextBoolean()) {
                Servers.sleep(random.nextInt(3));
            }
            if (waiting.complete(null)) {
                mine++;
            } else {
                within(waiting, 3000).release();
            }
            within(released, 3000);
            Support.waitUntil("nothing held after round " + i, 2000, () -> locks.locks().isEmpty()
                    && locks.waiters(null).isEmpty());
        }
        System.out.println("# race: the caller won " + mine + " of 30");
        assertTrue(mine > 0, "the caller's completion never won the race");
    }
}
