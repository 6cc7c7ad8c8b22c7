package io.pathlock;

import static io.pathlock.Support.within;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The connections of waiting calls (bounded, shared in turn) and the asynchronous API, on one real
 * server.
 */
class WaitingTest {
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
        return "waiting:" + KEYS.incrementAndGet();
    }

    private static long info(String field) {
        Matcher m = Pattern.compile(field + ":(\\d+)").matcher(server.info("pathlock"));
        assertTrue(m.find(), "no " + field);
        return Long.parseLong(m.group(1));
    }

    private static long connectedClients() {
        Matcher m = Pattern.compile("connected_clients:(\\d+)").matcher(server.info("clients"));
        assertTrue(m.find());
        return Long.parseLong(m.group(1));
    }

    @Test
    void waitingCallsShareAtMostTheCapOfConnectionsInTurn() {
        PathLocks family = PathLocks.builder(server.client(server.uri())).maxWaitingConnections(2).build("unused");
        server.track(family);
        PathLocks locks = family.project(project());
        assertEquals(2, locks.maxWaitingConnections());
        Lease holder = locks.upload("/A");
        long before = connectedClients();
        // Six threads wait for paths under /A; at most two of them wait on the server at once,
        // the others in the client's queue, and no more than two connections are opened for them.
        List<CompletableFuture<Long>> fences = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            String path = "/A/f" + i;
            fences.add(Support.async(() -> {
                try (Lease lease = locks.upload(path, AcquireOptions.with().waitFor(Duration.ofSeconds(20)))) {
                    Servers.sleep(20);
                    return lease.fence();
                }
            }));
        }
        Support.waitUntil("two waits on the server", 5000, () -> info("pathlock_clients_waiting") == 2);
        Servers.sleep(300);
        assertEquals(2, info("pathlock_clients_waiting"));
        assertEquals(2, family.redis().dedicatedConnections());
        assertTrue(connectedClients() - before <= 2, "connections opened: " + (connectedClients() - before));
        holder.release();
        // Each is granted in turn as the connections come back.
        List<Long> granted = fences.stream().map(f -> within(f, 10000)).sorted().toList();
        assertEquals(6, granted.size());
        assertTrue(granted.get(0) > holder.fence());
        assertEquals(2, family.redis().dedicatedConnections(), "the two are kept for the next waits");
        assertEquals(List.of(), locks.locks());
    }

    @Test
    void aWaitThatRunsOutInTheQueueAsksOnceMoreAndAReplicatedCallSaysTheCapIsReached() {
        PathLocks family = PathLocks.builder(server.client(server.uri())).maxWaitingConnections(1).build("unused");
        server.track(family);
        PathLocks locks = family.project(project());
        Lease holder = locks.upload("/A");
        // The one connection for waiting calls is taken by this wait.
        CompletableFuture<Lease> first = locks.async().upload("/A/x", AcquireOptions.with().waitFor(Duration.ofSeconds(10)));
        Support.waitUntil("the wait on the server", 5000, () -> info("pathlock_clients_waiting") == 1);
        // A free path is granted at once without one: a waiting acquire asks without waiting first.
        try (Lease free = locks.upload("/B", AcquireOptions.with().waitFor(Duration.ofSeconds(5)))) {
            assertFalse(free.isLost());
        }
        // A busy one waits its turn for its 300 ms, then asks once more: still busy, with the holder named.
        double started = Servers.nowMs();
        Busy busy = assertThrows(Busy.class, () -> locks.upload("/A/y", AcquireOptions.with().waitFor(Duration.ofMillis(300))));
        double took = Servers.nowMs() - started;
        assertTrue(took >= 290 && took < 3000, "took " + took + " ms");
        assertEquals(List.of(holder.token()), busy.blockers().stream().map(HeldLock::token).toList());
        // With replicas, WAIT needs a connection of its own: past its budget the call fails clearly.
        TooManyWaits refused = assertThrows(TooManyWaits.class, () -> locks.upload("/C",
                AcquireOptions.with().replicas(1).replicasTimeout(Duration.ofMillis(200))));
        assertEquals(1, refused.maxWaitingConnections());
        assertEquals(200, refused.budgetMs());
        assertTrue(refused.getMessage().contains("maxWaitingConnections"), refused.getMessage());
        assertEquals(List.of(), locks.locks("/C"));
        holder.release();
        within(first, 5000).release();
        assertEquals(List.of(), locks.locks());
    }

    @Test
    void theAsyncApiGrantsRefusesAndGivesUpAWaitWhenCancelled() {
        PathLocks locks = server.connect().project(project()).ttl(Duration.ofMillis(600));
        AsyncPathLocks async = locks.async();
        Lease move = within(async.move("/A/C", "/B"), 3000);
        assertEquals(List.of(LockRequest.write("/A/C"), LockRequest.write("/B/C")), move.locks());
        // Busy fails the future, with the blockers.
        CompletionException failed = assertThrows(CompletionException.class, () -> async.upload("/A/C/x").join());
        Busy busy = assertInstanceOf(Busy.class, failed.getCause());
        assertEquals(move.token(), busy.blockers().get(0).token());
        // Argument mistakes throw at once, before anything is sent.
        assertThrows(IllegalArgumentException.class, () -> async.move("/A", "/A/C"));
        // A waiting acquire, cancelled, leaves the server's queue and is never granted.
        CompletableFuture<Lease> waiting = async.upload("/B/C/x", AcquireOptions.with().waitFor(Duration.ofSeconds(30)));
        Support.waitUntil("the wait on the server", 5000, () -> info("pathlock_clients_waiting") == 1);
        assertTrue(waiting.cancel(true));
        Support.waitUntil("the wait to leave the queue", 5000, () -> info("pathlock_clients_waiting") == 0);
        // Nested locks and release, without blocking.
        long fence = within(move.lockAsync(List.of(LockRequest.write("/B/C/new.txt")), AcquireOptions.NONE), 3000);
        assertEquals(move.fence() + 1, fence);
        assertEquals(3, within(async.locks(null, move.token()), 3000).size());
        CompletableFuture<LeaseLost> lost = move.lost();
        within(move.releaseAsync(), 3000);
        assertTrue(lost.isCancelled());
        assertEquals(List.of(), within(async.locks(null, null), 3000));
        assertEquals(List.of(), within(async.waiters(null), 3000));
        assertThrows(CancellationException.class, () -> move.lost().join());
    }

    @Test
    void aClosedHandleFamilyRefusesNewCallsAndAUriHandleOwnsItsClient() {
        PathLocks own = PathLocks.of("redis://127.0.0.1:" + server.port, project());
        try (Lease lease = own.create("/D/N")) {
            assertEquals(1, own.locks().size());
            assertFalse(lease.isLost());
        } finally {
            own.close();
        }
        assertThrows(ConnectionException.class, own::locks);
    }

    private static long connectionsReceived() {
        Matcher m = Pattern.compile("total_connections_received:(\\d+)").matcher(server.info("stats"));
        assertTrue(m.find());
        return Long.parseLong(m.group(1));
    }

    @Test
    void eightThreadsWaitingOnAFewHotFoldersForThreeSecondsOpenNoMoreThanTheCap() throws Exception {
        // The FolderService in small: 8 threads moving and uploading in 3 folders, each
        // acquire waiting up to 2 s for busy locks. The old client opened a connection per waiting
        // call (48 in 10 s); this one opens its shared connection and at most the cap.
        PathLocks family = PathLocks.builder(server.client(server.uri())).maxWaitingConnections(4).build("unused");
        server.track(family);
        PathLocks locks = family.project(project());
        long before = connectionsReceived();
        AtomicInteger granted = new AtomicInteger();
        AtomicInteger busy = new AtomicInteger();
        long until = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(3);
        List<CompletableFuture<Void>> threads = new ArrayList<>();
        for (int t = 0; t < 8; t++) {
            int thread = t;
            threads.add(Support.async(() -> {
                AcquireOptions wait = AcquireOptions.with().waitFor(Duration.ofSeconds(2));
                for (int i = 0; i < 10_000 && System.nanoTime() < until; i++) {
                    String folder = "/F" + (i + thread) % 3;
                    try (Lease lease = i % 2 == 0 ? locks.move(folder + "/x" + thread, "/F" + (i + thread + 1) % 3, wait)
                            : locks.upload(folder + "/f", wait)) {
                        Servers.sleep(5);
                        assertFalse(lease.isLost());
                        granted.incrementAndGet();
                    } catch (Busy e) {
                        busy.incrementAndGet();
                    }
                }
                return null;
            }));
        }
        for (CompletableFuture<Void> thread : threads) {
            within(thread, 20000);
        }
        long opened = connectionsReceived() - before;
        System.out.printf("# 8 threads, 3 s: %d granted, %d busy, %d connections opened (cap 4, and 1 shared)%n",
                granted.get(), busy.get(), opened);
        assertTrue(granted.get() > 50, "granted " + granted.get());
        assertTrue(opened <= 5, "connections opened: " + opened);
        assertTrue(family.redis().dedicatedConnections() <= 4);
        assertEquals(List.of(), locks.locks());
    }

    @Test
    void aWaitingCallMadeOnANettyThreadReturnsAtOnceAndCompletes() {
        // Made on one of Lettuce's Netty threads, a call that must open a dedicated connection and
        // wait on the server returns its future at once: nothing in it blocks the thread.
        PathLocks family = PathLocks.builder(server.client(server.uri())).uri(server.uri()).build("unused");
        server.track(family);
        PathLocks locks = family.project(project());
        Lease holder = locks.upload("/A");
        String[] thread = new String[1];
        long[] callMs = new long[1];
        CompletableFuture<Lease> chained = CompletableFuture.supplyAsync(() -> {
            thread[0] = Thread.currentThread().getName();
            long started = System.nanoTime();
            CompletableFuture<Lease> waiting = locks.async().upload("/A/x", AcquireOptions.with().waitFor(Duration.ofSeconds(5)));
            callMs[0] = (System.nanoTime() - started) / 1_000_000;
            return waiting;
        }, Servers.RESOURCES.eventExecutorGroup()).thenCompose(waiting -> waiting);
        Support.waitUntil("the wait on the server", 5000, () -> info("pathlock_clients_waiting") == 1);
        assertTrue(thread[0].startsWith("lettuce-"), "made on " + thread[0]);
        assertTrue(callMs[0] < 1000, "the call took " + callMs[0] + " ms to return");
        holder.release();
        Lease granted = within(chained, 5000);
        granted.release();
        assertEquals(List.of(), locks.locks());
    }

    @Test
    void onANettyEventLoopABlockingCallIsRefusedAndAReleaseDoesNotWait() {
        // In a callback of the asynchronous API, which runs where the reply was read: on a Netty
        // event loop of Lettuce's. The server is paused for writes while each call is chained, so
        // that its reply comes later and the callback surely runs there. The TTL is 60 s, and so is
        // the client's command timeout: a release that waited there for the server's answer (which
        // that thread itself would have to read) would hold the thread, and the call, for either.
        PathLocks locks = server.connect().project(project()).ttl(Duration.ofSeconds(60));
        boolean[] onLoop = new boolean[2];
        String[] thread = new String[2];
        server.command("CLIENT", "PAUSE", "300", "WRITE");
        CompletableFuture<Long> closed = locks.async().upload("/A").thenApply(lease -> {
            thread[0] = Thread.currentThread().getName();
            onLoop[0] = Futures.mustNotBlock();
            try (lease) {                       // close(): starts the release and returns
                return lease.fence();
            }
        });
        assertTrue(within(closed, 10_000) > 0);
        assertTrue(onLoop[0], "the callback ran on " + thread[0]);
        Support.waitUntil("the release", 5000, () -> locks.locks().isEmpty());

        // A blocking acquire there is refused before anything is sent, saying what to do instead.
        long acquires = acquireCalls();
        server.command("CLIENT", "PAUSE", "300", "WRITE");
        CompletableFuture<Lease> nested = locks.async().upload("/B").thenApply(outer -> {
            thread[1] = Thread.currentThread().getName();
            onLoop[1] = Futures.mustNotBlock();
            try (outer) {
                return locks.upload("/C");
            }
        });
        // (A TimeoutException here, rather than the refusal, is the call hanging on the event loop.)
        Throwable refused = assertThrows(ExecutionException.class, () -> nested.get(10, TimeUnit.SECONDS)).getCause();
        assertTrue(onLoop[1], "the callback ran on " + thread[1]);
        IllegalStateException cause = assertInstanceOf(IllegalStateException.class, refused);
        assertTrue(cause.getMessage().contains("Netty event loop") && cause.getMessage().contains("locks.async()"),
                cause.getMessage());
        assertEquals(acquires + 1, acquireCalls(), "only the outer acquire was sent");
        Support.waitUntil("the outer release", 5000, () -> locks.locks().isEmpty());
    }

    private static long acquireCalls() {
        Matcher m = Pattern.compile("cmdstat_pathlock\\.acquire:calls=(\\d+)", Pattern.CASE_INSENSITIVE)
                .matcher(server.info("commandstats"));
        return m.find() ? Long.parseLong(m.group(1)) : 0;
    }
}
