package io.pathlock;

import static io.pathlock.Support.SLACK_MS;
import static io.pathlock.Support.lostAt;
import static io.pathlock.Support.within;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Replies that never arrive, a renewal in flight at release, and servers that stop. */
class FaultsTest {
    private static Servers.Server server;
    private static PathLocks direct;
    private static final AtomicInteger KEYS = new AtomicInteger();
    private Proxy proxy;

    @BeforeAll
    static void start() {
        server = Servers.Server.start();
        direct = server.connect();
    }

    @AfterAll
    static void stop() {
        server.stop();
    }

    @AfterEach
    void closeProxy() {
        if (proxy != null) {
            proxy.close();
        }
    }

    private static String project() {
        return "faults:" + KEYS.incrementAndGet();
    }

    /**
     * A handle family whose client reaches the server through a fresh proxy, its shared connection
     * open (so that the proxy's first reply chunks are the test's commands, not the handshake's).
     */
    private PathLocks proxied(Duration commandTimeout) throws IOException {
        proxy = new Proxy(server.port);
        RedisURI uri = RedisURI.create("127.0.0.1", proxy.port());
        uri.setTimeout(commandTimeout);
        PathLocks locks = server.connect(uri);
        locks.locks();
        return locks;
    }

    private PathLocks proxied() throws IOException {
        return proxied(Duration.ofSeconds(10));
    }

    private static String info(String field) {
        for (String line : server.info("pathlock").split("\r?\n")) {
            if (line.startsWith(field + ":")) {
                return line.substring(field.length() + 1);
            }
        }
        throw new AssertionError("no " + field + " in INFO pathlock");
    }

    @Test
    void anAcquireWhoseReplyWasLostIsRetriedAsTheSameOwner() throws IOException {
        String key = project();
        PathLocks locks = proxied().project(key);
        // A first grant on the key shows where its fences start; it stays held, for a key whose
        // last lock is released is deleted and a new key's fences start afresh (higher).
        Lease first = direct.project(key).read("/probe");
        long probe = first.fence();
        // The server grants the move; its reply is lost with the connection.
        proxy.dropReplies.set(1);
        Lease lease = locks.move("/A/C", "/B");
        assertEquals(0, proxy.dropReplies.get(), "the reply was not dropped");
        // One owner with one lock per path, not two: the retry refreshed the first grant.
        assertEquals(List.of(List.of("/A/C", "WRITE", lease.token()), List.of("/B/C", "WRITE", lease.token()),
                List.of("/probe", "READ", first.token())), Support.shape(direct.project(key).locks()));
        // The lost grant took the probe's fence + 1, the retry the next.
        assertEquals(probe + 2, lease.fence());
        assertEquals(2, proxy.seen().stream().filter(c -> c.equals("PATHLOCK.ACQUIRE")).count());
        assertEquals("3", info("pathlock_locks"));
        lease.release();
        first.release();
        assertEquals(List.of(), direct.project(key).locks());
    }

    @Test
    void aServerWithoutTheModuleIsSaidToLackIt() {
        // The application pointed at a server that does not load the module (a typo in the
        // configuration, a new server): its refusal says so, rather than only "unknown command".
        try (TestServers.Bare bare = TestServers.bare()) {
            PathLocks locks = server.connect(RedisURI.create("127.0.0.1", bare.port())).project("faults:bare");
            ServerException error = assertThrows(ServerException.class, () -> locks.move("/A/C", "/B"));
            assertTrue(error.getMessage().startsWith("the pathlock module is not loaded on the server that serves "
                    + "\"faults:bare\" (ERR unknown command"), error.getMessage());
            assertTrue(error.reply().toUpperCase(java.util.Locale.ROOT).startsWith("ERR UNKNOWN COMMAND 'PATHLOCK.ACQUIRE'"),
                    error.reply());
            ServerException inspecting = assertThrows(ServerException.class, () -> locks.locks());
            assertTrue(inspecting.getMessage().startsWith("the pathlock module is not loaded"), inspecting.getMessage());
        }
    }

    @Test
    void aRefusalWhoseCheckFailsSaysTheBlockersCouldNotBeRead() {
        // A user that may acquire but not check: the refusal's CHECK fails with NOPERM, every time.
        String key = project();
        server.command("ACL", "SETUSER", "nocheck", "reset", "on", ">pw", "~*", "+@all", "-pathlock.check");
        try (Lease held = direct.project(key).move("/A/C", "/B")) {
            PathLocks locks = server.connect(RedisURI.builder().withHost("127.0.0.1").withPort(server.port)
                    .withAuthentication("nocheck", "pw").build()).project(key);
            Busy busy = assertThrows(Busy.class, () -> locks.upload("/A/C/x"));
            assertEquals(List.of(), busy.blockers());
            ServerException checkError = assertInstanceOf(ServerException.class, busy.checkError().orElseThrow());
            assertTrue(checkError.reply().startsWith("NOPERM"), checkError.reply());
            assertEquals(checkError, busy.getCause());
            // Never "nothing holds these paths": the client does not know who does.
            assertEquals("busy: WRITE /A/C/x in \"" + key + "\": the locks in the way could not be read (ServerException: "
                    + checkError.getMessage() + "); try again", busy.getMessage());
            // A user that may check gets the blockers, and no check error.
            Busy named = assertThrows(Busy.class, () -> direct.project(key).upload("/A/C/x"));
            assertEquals(List.of("/A/C " + held.token()), named.blockers().stream().map(b -> b.path() + " " + b.token()).toList());
            assertTrue(named.checkError().isEmpty());
            assertEquals(null, named.getCause());
        } finally {
            server.command("ACL", "DELUSER", "nocheck");
        }
    }

    @Test
    void throwsTheConnectionErrorWhenNoReplyComesInTimeAndFreesAGrantMadeMeanwhile() throws IOException {
        String key = project();
        PathLocks locks = proxied(Duration.ofSeconds(1)).project(key).ttl(Duration.ofSeconds(30));
        // Every reply is lost with its connection: Lettuce reconnects and sends the ACQUIRE again
        // (the server grants it each time, to the same token) until the command times out.
        proxy.dropReplies.set(Integer.MAX_VALUE);
        double started = Servers.nowMs();
        ConnectionException error = assertThrows(ConnectionException.class, () -> locks.upload("/A"));
        assertTrue(error.getMessage().contains("fate is unknown"), error.getMessage());
        assertTrue(Servers.nowMs() - started < 5000, "failed after " + (Servers.nowMs() - started) + " ms");
        assertTrue(proxy.seen().contains("PATHLOCK.ACQUIRE"));
        proxy.dropReplies.set(0);
        // The client releases that token once the server answers again, long before the TTL.
        Support.waitUntil("the lost grant to be released", 15000, () -> direct.project(key).locks().isEmpty());
    }

    @ParameterizedTest(name = "renewal held back on its way {0}")
    @ValueSource(strings = {"to the server", "back"})
    void aRenewalInFlightAtReleaseNeitherKeepsTheLockNorReportsALoss(String where) throws IOException {
        String key = project();
        PathLocks locks = proxied().project(key).ttl(Duration.ofMillis(600));
        Lease lease = locks.upload("/A");
        CompletableFuture<Double> lost = lostAt(lease);
        AtomicReference<CompletableFuture<Void>> release = new AtomicReference<>();
        CompletableFuture<Void> renewing = new CompletableFuture<>();
        proxy.onRequest = chunk -> {
            if (chunk.toUpperCase().contains("PATHLOCK.RENEW") && release.compareAndSet(null, new CompletableFuture<>())) {
                // The renewal is on its way, and held back for 150 ms: release now.
                Support.async(() -> { lease.release(); return null; }).whenComplete((ok, e) -> release.get().complete(null));
                renewing.complete(null);
            }
        };
        if (where.equals("back")) {
            proxy.replyDelayMs = 150;
        } else {
            proxy.requestDelayMs = 150;
        }
        within(renewing, 2000);
        within(release.get(), 3000);
        proxy.replyDelayMs = 0;
        proxy.requestDelayMs = 0;
        assertTrue(lease.isReleased());
        assertEquals(List.of(), direct.project(key).locks());
        // Long past the lease's TTL: still not reported lost, and no renewal after the release.
        Servers.sleep(1000);
        assertFalse(lost.isDone());
        assertFalse(lease.isLost());
        List<String> seen = proxy.seen();
        int releasedAt = seen.indexOf("PATHLOCK.RELEASE");
        assertTrue(releasedAt > 0, "seen: " + seen);
        assertFalse(seen.subList(releasedAt, seen.size()).contains("PATHLOCK.RENEW"), "renewed after RELEASE: " + seen);
        // Someone else gets the path at once.
        direct.project(key).upload("/A").release();
    }

    @Test
    void releasesRacingRenewalsNeverReportALoss() {
        String key = project();
        AtomicInteger lost = new AtomicInteger();
        PathLocks locks = direct.project(key).ttl(Duration.ofMillis(300)).onLost(e -> lost.incrementAndGet());
        Random random = new Random(7);
        long before = Support.renewCalls(server);
        for (int i = 0; i < 40; i++) {
            try (Lease lease = locks.upload("/f" + i % 5)) {
                // Around the renewal period (100 ms), so that releases land before, during and
                // after renewals.
                Servers.sleep(60 + random.nextInt(80));
                assertFalse(lease.isLost());
            }
        }
        assertTrue(Support.renewCalls(server) > before, "no renewal ever ran");
        Servers.sleep(400);
        assertEquals(0, lost.get());
        assertEquals(List.of(), locks.locks());
    }

    @Test
    void anInterruptedWaitLeavesTheServersQueue() throws Exception {
        String key = project();
        PathLocks locks = direct.project(key);
        try (Lease held = locks.upload("/A")) {
            AtomicReference<Throwable> thrown = new AtomicReference<>();
            Thread waiter = new Thread(() -> {
                try {
                    locks.upload("/A/x", AcquireOptions.with().waitFor(Duration.ofSeconds(30))).release();
                } catch (RuntimeException e) {
                    thrown.set(e);
                }
            });
            waiter.start();
            Support.waitUntil("the acquire to wait on the server", 2000, () -> info("pathlock_clients_waiting").equals("1"));
            waiter.interrupt();
            waiter.join(2000);
            assertFalse(waiter.isAlive());
            assertInstanceOf(PathLockException.class, thrown.get());
            assertTrue(thrown.get().getMessage().contains("interrupted"), thrown.get().getMessage());
            // Its connection was closed, which takes it off the queue: nothing is granted later.
            Support.waitUntil("the wait to leave the queue", 2000, () -> info("pathlock_clients_waiting").equals("0"));
            assertEquals(List.of(held.token()), locks.locks().stream().map(HeldLock::token).toList());
        }
        Servers.sleep(200);
        assertEquals(List.of(), locks.locks());
    }

    @Test
    void reportsTheLossAtTheDeadlineWhenTheServerIsStoppedPastIt() {
        Servers.Server own = Servers.Server.start();
        try {
            RedisURI uri = own.uri();
            uri.setTimeout(Duration.ofSeconds(1));
            PathLocks locks = own.connect(uri).project("proj:stop").ttl(Duration.ofMillis(600));
            Lease lease = locks.move("/A/C", "/B");
            Servers.sleep(150);
            CompletableFuture<Double> lost = lostAt(lease);
            double deadline = Servers.nowMs() + lease.remaining().toNanos() / 1e6;
            own.kill();
            double at = within(lost, 3000);
            assertTrue(at >= deadline - 5, "lost " + (deadline - at) + " ms before the deadline");
            assertTrue(at - deadline <= SLACK_MS, "lost " + (at - deadline) + " ms after the deadline");
            assertEquals(LostReason.EXPIRED, within(lease.lost(), 1000).reason());
            // Releasing it is not an error, and does not wait for the server to come back.
            double releasing = Servers.nowMs();
            lease.release();
            assertTrue(Servers.nowMs() - releasing < 500);
            // New work fails with a connection error, after its retry.
            assertThrows(ConnectionException.class, () -> locks.upload("/A"));
            System.out.printf("# server stopped: lost %.0f ms after the deadline%n", at - deadline);
        } finally {
            own.stop();
        }
    }
}
