package io.pathlock;

import static io.pathlock.Support.SLACK_MS;
import static io.pathlock.Support.lostAt;
import static io.pathlock.Support.renewCalls;
import static io.pathlock.Support.within;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.logging.SimpleFormatter;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Holding, refusing, losing and releasing leases on one real server. */
class WatchdogTest {
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
        return "proj:" + KEYS.incrementAndGet();
    }

    @Test
    void keepsA300msLeaseFor3sThenReleasesIt() {
        PathLocks locks = connection.project(project()).ttl(Duration.ofMillis(300));
        server.command("CONFIG", "RESETSTAT");
        Lease lease = locks.upload("/A/f.txt");
        Servers.sleep(3000);
        assertFalse(lease.isLost());
        assertFalse(lease.lost().isDone());
        List<HeldLock> held = locks.locks();
        assertEquals(1, held.size());
        assertEquals(lease.token(), held.get(0).token());
        assertTrue(held.get(0).ttlMs() > 0 && held.get(0).ttlMs() <= 300, "ttl left " + held.get(0).ttlMs());
        long renewals = renewCalls(server);
        // One renewal per ttl/3 = 100 ms: about 30 in 3 s, never a flood.
        assertTrue(renewals >= 20 && renewals <= 33, "renewals in 3 s: " + renewals);
        System.out.println("# 300 ms lease held 3 s with " + renewals + " renewals");
        lease.release();
        assertEquals(List.of(), locks.locks());
    }

    @Test
    void passesTheServersRefusalsAndTakesTheWholeProjectOnlyWhenAskedFor() {
        // The operations' locks, the client's own refusals and the durations are the contract's
        // scenarios (clients/contract/); these are what only Java has.
        PathLocks locks = connection.project(project());
        for (String root : List.of("", "/", "//", "/./")) {
            assertThrows(IllegalArgumentException.class, () -> LockRequest.write(root));
        }
        assertThrows(IllegalArgumentException.class, () -> locks.purge());
        ServerException dots = assertThrows(ServerException.class, () -> locks.upload("/A/../B"));
        assertTrue(dots.getMessage().startsWith("ERR"), dots.getMessage());
        ServerException longTtl = assertThrows(ServerException.class,
                () -> locks.upload("/A", AcquireOptions.with().ttl(Duration.ofDays(2))));
        assertTrue(longTtl.getMessage().contains("172800000 ms"), longTtl.getMessage());
        try (Lease all = locks.lock(LockRequest.wholeProject(Mode.READ))) {
            assertEquals(List.of(List.of("/", "READ", all.token())), Support.shape(locks.locks()));
            assertThrows(Busy.class, () -> locks.upload("/anything"));
        }
    }

    @Test
    void theHandlesListenerAndOneAddedAfterTheLossHearOfIt() {
        String key = project();
        AtomicInteger handleCalls = new AtomicInteger();
        PathLocks locks = connection.project(key).ttl(Duration.ofMillis(600))
                .onLost(lost -> handleCalls.incrementAndGet());
        Lease lease = locks.move("/A/C", "/B");
        assertEquals(2L, server.integer("PATHLOCK.RELEASE", key, lease.token()));
        assertEquals(LostReason.GONE, within(lease.lost(), 2000).reason());
        Support.waitUntil("the handle's listener", 1000, () -> handleCalls.get() == 1);
        CompletableFuture<LostReason> late = new CompletableFuture<>();
        lease.onLost(e -> late.complete(e.reason()));
        assertEquals(LostReason.GONE, within(late, 1000));
        // Releasing a lost lease, and releasing twice, are not errors.
        lease.release();
        lease.close();
        assertEquals(1, handleCalls.get());
    }

    @Test
    void keepsTheLeaseThroughAPauseShorterThanItsDeadlineAndADroppedConnection() {
        RedisURI named = server.uri();
        named.setClientName("holder");
        PathLocks holder = server.connect(named);
        PathLocks locks = holder.project(project()).ttl(Duration.ofMillis(900));
        Lease lease = locks.upload("/A");
        CompletableFuture<Double> lost = lostAt(lease);
        Servers.sleep(200);
        server.command("CLIENT", "PAUSE", 300, "WRITE");
        Servers.sleep(500);
        Matcher id = Pattern.compile("id=(\\d+) [^\\n]*name=holder").matcher(server.text("CLIENT", "LIST"));
        assertTrue(id.find());
        assertEquals(1L, server.integer("CLIENT", "KILL", "ID", id.group(1)));
        Servers.sleep(1500);
        assertFalse(lost.isDone());
        assertFalse(lease.isLost());
        assertEquals(List.of(lease.token()), locks.locks().stream().map(HeldLock::token).toList());
        lease.release();
    }

    @Test
    void releasesAtTheEndOfTryWithResourcesAlsoWhenItThrows() {
        PathLocks locks = connection.project(project());
        String token;
        try (Lease lease = locks.move("/A/C", "/B")) {
            token = lease.token();
            assertEquals(2, locks.locks().size());
        }
        assertEquals(List.of(), locks.locks());
        Lease[] kept = new Lease[1];
        IllegalStateException failed = assertThrows(IllegalStateException.class, () -> {
            try (Lease lease = locks.delete("/A")) {
                kept[0] = lease;
                assertNotEquals(token, lease.token());
                throw new IllegalStateException("the delete failed");
            }
        });
        assertEquals("the delete failed", failed.getMessage());
        assertTrue(kept[0].isReleased());
        assertFalse(kept[0].isLost());
        assertEquals(List.of(), locks.locks());
    }

    @Test
    void runsTheWatchdogOnASchedulerTheApplicationSupplies() {
        ScheduledThreadPoolExecutor mine = new ScheduledThreadPoolExecutor(1);
        try {
            PathLocks locks = connection.project(project()).ttl(Duration.ofMillis(150)).scheduler(mine);
            try (Lease lease = locks.upload("/A")) {
                Servers.sleep(600);
                assertFalse(lease.isLost());
            }
            // About one wake-up per 50 ms renewal period ran on it.
            assertTrue(mine.getCompletedTaskCount() >= 6, "tasks run: " + mine.getCompletedTaskCount());
        } finally {
            mine.shutdownNow();
        }
    }

    @Test
    void aNestedLockTakesTheLeasesTtlAndNoOtherAndNoneOnceReleased() {
        PathLocks locks = connection.project(project()).ttl(Duration.ofMillis(300));
        Lease move = locks.move("/A/C", "/B");
        assertThrows(IllegalArgumentException.class,
                () -> move.lock(List.of(LockRequest.read("/Q")), AcquireOptions.with().ttl(Duration.ofSeconds(5))));
        move.release();
        assertThrows(IllegalStateException.class, () -> move.lock(LockRequest.read("/Q")));
        assertEquals(List.of(), locks.locks());
    }

    @Test
    void aNestedLockWaitsAsTheLeasesOperationWaits() {
        String key = project();
        PathLocks locks = connection.project(key).ttl(Duration.ofMillis(300));
        Lease other = locks.upload("/Q/x");
        // The handle waits for nothing; the move was asked to wait, and its nested lock does too.
        Lease move = locks.move("/A/C", "/B", AcquireOptions.with().waitFor(Duration.ofSeconds(5)));
        CompletableFuture<Void> released = CompletableFuture.runAsync(() -> {
            Servers.sleep(800);
            other.release();
        });
        long started = System.nanoTime();
        long fence = move.lock(LockRequest.write("/Q"));
        double tookMs = (System.nanoTime() - started) / 1e6;
        within(released, 2000);
        assertTrue(tookMs > 700 && tookMs < 3000, "waited " + tookMs + " ms");
        assertTrue(fence > move.fence());
        // The wait outlasted the TTL more than twice, on a connection of its own.
        assertFalse(move.isLost());
        move.release();
        assertEquals(List.of(), locks.locks());
    }

    @Test
    void aLeaseWhoseHandleClosedStopsRenewingIsLostAtItsDeadlineAndItsReleaseSaysSo() {
        // A closed handle can neither renew nor release: a lease held then lapses on the server at
        // its TTL, and is reported lost (EXPIRED) at its deadline, as when the server is gone; a
        // lease released after the close says, as a warning, that its locks were not freed.
        PathLocks family = server.connect();
        String key = project();
        PathLocks locks = family.project(key).ttl(Duration.ofMillis(600));
        Lease held = locks.upload("/A");
        Lease done = locks.upload("/B");
        CompletableFuture<Double> lost = lostAt(held);
        List<String> warnings = new CopyOnWriteArrayList<>();
        Logger log = Logger.getLogger("io.pathlock");
        Handler capture = new Handler() {
            @Override
            public void publish(LogRecord record) {
                if (record.getLevel().intValue() >= Level.WARNING.intValue()) {
                    warnings.add(new SimpleFormatter().formatMessage(record));
                }
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };
        log.addHandler(capture);
        try {
            double closedAt = Servers.nowMs();
            family.close();
            long renewals = renewCalls(server);
            done.close();
            assertTrue(done.isReleased());
            assertFalse(done.isLost());
            assertTrue(warnings.stream().anyMatch(w -> w.contains(done.token()) && w.contains("PathLocks.close()")),
                    "warnings: " + warnings);
            double lostAtMs = within(lost, 2000);
            assertTrue(held.isLost());
            assertEquals(LostReason.EXPIRED, within(held.lost(), 100).reason());
            assertTrue(lostAtMs - closedAt <= 600 + SLACK_MS, "lost " + (lostAtMs - closedAt) + " ms after the close");
            // Nothing was sent after the close: no renewal kept the locks, which lapsed on the server.
            assertEquals(renewals, renewCalls(server));
            Support.waitUntil("the locks to lapse", 1000, () -> connection.project(key).locks().isEmpty());
            held.close();
        } finally {
            log.removeHandler(capture);
        }
    }
}
