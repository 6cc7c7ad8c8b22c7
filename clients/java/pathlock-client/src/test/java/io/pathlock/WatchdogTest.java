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
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.atomic.AtomicInteger;
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
    void refusesASecondOwnerWithTheBlockersAndGrantsItAfterRelease() {
        String key = project();
        PathLocks alice = connection.project(key);
        PathLocks bob = server.connect().project(key);
        Lease move = alice.move("/A/C", "/B");
        assertEquals(List.of(LockRequest.write("/A/C"), LockRequest.write("/B/C")), move.locks());
        Busy refusal = assertThrows(Busy.class, () -> bob.upload("/A/C/D/new.txt"));
        assertEquals(1, refusal.blockers().size());
        HeldLock blocker = refusal.blockers().get(0);
        assertEquals("/A/C", blocker.path());
        assertEquals(Mode.WRITE, blocker.mode());
        assertEquals(move.token(), blocker.token());
        assertEquals(move.fence(), blocker.fence());
        assertTrue(blocker.ttlMs() > 29000, "ttl " + blocker.ttlMs());
        assertEquals(List.of(LockRequest.write("/A/C/D/new.txt")), refusal.requests());
        assertTrue(refusal.getMessage().contains("WRITE /A/C held by " + move.token()), refusal.getMessage());
        // Beside the moved folder, work goes on.
        try (Lease beside = bob.upload("/A/CD/notes.txt")) {
            assertEquals(move.fence() + 1, beside.fence());
        }
        move.release();
        try (Lease upload = bob.upload("/A/C/D/new.txt")) {
            assertEquals(move.fence() + 2, upload.fence());
            assertFalse(upload.isLost());
        }
    }

    @Test
    void asksForExactlyTheLocksOfEachOperation() {
        PathLocks locks = connection.project(project());
        record Case(Lease lease, List<List<String>> expected) {
        }
        List<Case> cases = List.of(
                new Case(locks.create("/D/N"), List.of(List.of("/D/N", "WRITE"))),
                new Case(locks.read("/R/f"), List.of(List.of("/R/f", "READ"))),
                new Case(locks.rename("/E/f", "g"), List.of(List.of("/E/f", "WRITE"), List.of("/E/g", "WRITE"))),
                new Case(locks.copy("/F/a.txt", "/G/"), List.of(List.of("/F/a.txt", "READ"), List.of("/G/a.txt", "WRITE"))),
                new Case(locks.move("//A/./C/", "B"), List.of(List.of("/A/C", "WRITE"), List.of("/B/C", "WRITE"))),
                new Case(locks.delete("/H"), List.of(List.of("/H", "WRITE"))),
                new Case(locks.purge("/bin/1", "/bin/2"), List.of(List.of("/bin/1", "WRITE"), List.of("/bin/2", "WRITE"))),
                new Case(locks.lock(LockRequest.read("/S"), LockRequest.write("/S/x")),
                        List.of(List.of("/S", "READ"), List.of("/S/x", "WRITE"))));
        for (Case c : cases) {
            List<List<String>> held = locks.locks().stream().filter(l -> l.token().equals(c.lease.token()))
                    .map(l -> List.of(l.path(), l.mode().name())).toList();
            assertEquals(c.expected, held);
            c.lease.release();
        }
        assertEquals(List.of(), locks.locks());
        // Requests that cannot be right fail before anything is sent, saying why.
        assertThrows(IllegalArgumentException.class, () -> locks.lock());
        assertThrows(IllegalArgumentException.class, () -> locks.purge());
        for (String root : List.of("", "/", "//", "/./")) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> locks.upload(root));
            assertTrue(e.getMessage().contains("whole project"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> locks.move(root, "/B"));
            assertThrows(IllegalArgumentException.class, () -> locks.delete(root));
            assertThrows(IllegalArgumentException.class, () -> LockRequest.write(root));
        }
        IllegalArgumentException zero = assertThrows(IllegalArgumentException.class,
                () -> locks.upload("/A", AcquireOptions.with().ttl(Duration.ZERO)));
        assertEquals("ttl must be a number of milliseconds, at least 1; got 0 us", zero.getMessage());
        IllegalArgumentException micro = assertThrows(IllegalArgumentException.class,
                () -> locks.ttl(Duration.ofNanos(500_000)));
        assertEquals("ttl must be a number of milliseconds, at least 1; got 500 us", micro.getMessage());
        assertThrows(IllegalArgumentException.class, () -> locks.replicasTimeout(Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> locks.waitFor(Duration.ofMillis(-1)));
        assertThrows(IllegalArgumentException.class, () -> locks.replicas(-1));
        // The server's own refusals come through with its message.
        ServerException dots = assertThrows(ServerException.class, () -> locks.upload("/A/../B"));
        assertTrue(dots.getMessage().startsWith("ERR"), dots.getMessage());
        ServerException longTtl = assertThrows(ServerException.class,
                () -> locks.upload("/A", AcquireOptions.with().ttl(Duration.ofDays(2))));
        assertTrue(longTtl.getMessage().contains("172800000 ms"), longTtl.getMessage());
        // The whole project, asked for explicitly.
        try (Lease all = locks.lock(LockRequest.wholeProject(Mode.READ))) {
            assertEquals(List.of(List.of("/", "READ", all.token())), Support.shape(locks.locks()));
            assertThrows(Busy.class, () -> locks.upload("/anything"));
        }
    }

    @Test
    void reportsTheLossWithinOneRenewalPeriodWhenTheTokenIsReleasedElsewhere() {
        String key = project();
        AtomicInteger handleCalls = new AtomicInteger();
        PathLocks locks = connection.project(key).ttl(Duration.ofMillis(600))
                .onLost(lost -> handleCalls.incrementAndGet());
        Lease lease = locks.move("/A/C", "/B");
        CompletableFuture<Double> lost = lostAt(lease);
        CompletableFuture<LeaseLost> reason = lease.lost();
        Servers.sleep(250);
        double releasedAt = Servers.nowMs();
        assertEquals(2L, server.integer("PATHLOCK.RELEASE", key, lease.token()));
        double elapsed = within(lost, 2000) - releasedAt;
        assertTrue(elapsed <= 200 + SLACK_MS, "lost " + elapsed + " ms after the release");
        assertTrue(lease.isLost());
        assertEquals(LostReason.GONE, within(reason, 1000).reason());
        LeaseLost thrown = assertThrows(LeaseLost.class, lease::throwIfLost);
        assertTrue(thrown.getMessage().contains("a renewal answered 0"), thrown.getMessage());
        Support.waitUntil("the handle's listener", 1000, () -> handleCalls.get() == 1);
        // A listener added after the loss hears of it too.
        CompletableFuture<LostReason> late = new CompletableFuture<>();
        lease.onLost(e -> late.complete(e.reason()));
        assertEquals(LostReason.GONE, within(late, 1000));
        // Releasing a lost lease, and releasing twice, are not errors.
        lease.release();
        lease.close();
        System.out.printf("# token released elsewhere: lost after %.0f ms (period 200 ms)%n", elapsed);
    }

    @Test
    void reportsTheLossWithinOneRenewalPeriodWhenTheKeyIsDeleted() {
        String key = project();
        PathLocks locks = connection.project(key).ttl(Duration.ofMillis(600));
        Lease lease = locks.upload("/A");
        CompletableFuture<Double> lost = lostAt(lease);
        Servers.sleep(120);
        double deletedAt = Servers.nowMs();
        assertEquals(1L, server.integer("DEL", key));
        double elapsed = within(lost, 2000) - deletedAt;
        assertTrue(elapsed <= 200 + SLACK_MS, "lost " + elapsed + " ms after DEL");
        assertEquals(LostReason.GONE, within(lease.lost(), 1000).reason());
        lease.release();
        System.out.printf("# key deleted: lost after %.0f ms (period 200 ms)%n", elapsed);
    }

    @Test
    void reportsTheLossAtTheDeadlineWhenTheServerIsPausedPastIt() {
        PathLocks locks = connection.project(project()).ttl(Duration.ofMillis(600));
        Lease lease = locks.upload("/A");
        Servers.sleep(100);
        CompletableFuture<Double> lost = lostAt(lease);
        double pausedAt = Servers.nowMs();
        double expectedBy = pausedAt + lease.remaining().toNanos() / 1e6;
        server.command("CLIENT", "PAUSE", 1500, "WRITE");
        double at = within(lost, 3000);
        // The deadline is the send time of the last renewal that succeeded plus the TTL, so loss
        // comes after at least the part of the lease that had not yet run when the pause began.
        assertTrue(at >= expectedBy - 5, "lost " + (expectedBy - at) + " ms before its deadline");
        assertTrue(at - expectedBy <= SLACK_MS, "lost " + (at - expectedBy) + " ms after its deadline");
        assertEquals(LostReason.EXPIRED, within(lease.lost(), 1000).reason());
        lease.release();
        Servers.sleep((long) Math.max(0, 1500 - (Servers.nowMs() - pausedAt) + 50));
        System.out.printf("# paused: lost %.0f ms into the pause, %.0f ms after the deadline%n", at - pausedAt,
                at - expectedBy);
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
    void doesNotStallRenewalsWhileAnotherAcquireWaitsOnTheServer() throws Exception {
        PathLocks locks = connection.project(project()).ttl(Duration.ofMillis(300));
        Lease held = locks.upload("/A");
        Lease other = locks.upload("/B");
        // This waits on the server for /A for 1.5 s on a connection of its own; /B's watchdog
        // keeps renewing meanwhile on the shared one.
        CompletableFuture<Lease> waiting = Support.async(
                () -> locks.upload("/A/x", AcquireOptions.with().waitFor(Duration.ofMillis(1500))));
        Servers.sleep(1000);
        assertFalse(other.isLost());
        assertFalse(held.isLost());
        held.release();
        Lease granted = within(waiting, 2000);
        assertFalse(granted.isLost());
        Servers.sleep(400);
        assertFalse(granted.isLost());
        granted.release();
        other.release();
        assertEquals(List.of(), locks.locks());
    }

    @Test
    void aHolderAndAWaiterSharingOneHandleKeepTheHoldersLeaseForItsWholeRun() throws Exception {
        // The scenario of issue 30 with one connection and one handle: a move held for 5 s with a
        // 3 s TTL, and an upload into it that waits on the same handle.
        PathLocks locks = connection.project(project()).ttl(Duration.ofSeconds(3));
        Lease move = locks.move("/A/C", "/B");
        CompletableFuture<Double> moveLost = lostAt(move);
        double[] grantedAt = new double[1];
        CompletableFuture<Lease> upload = Support.async(() -> {
            Lease lease = locks.upload("/B/C/new.txt", AcquireOptions.with().waitFor(Duration.ofSeconds(10)));
            grantedAt[0] = Servers.nowMs();
            return lease;
        });
        Servers.sleep(5000);
        assertFalse(move.isLost(), "the move lost its lease while the upload waited");
        assertFalse(moveLost.isDone());
        assertFalse(upload.isDone(), "the upload was granted during the move");
        double releasedAt = Servers.nowMs();
        move.release();
        Lease granted = within(upload, 3000);
        assertTrue(grantedAt[0] >= releasedAt, "granted before the move was released");
        assertEquals(move.fence() + 1, granted.fence());
        granted.release();
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
    void takesMoreLocksUnderTheLeaseRenewedAndReleasedWithIt() {
        String key = project();
        PathLocks locks = connection.project(key).ttl(Duration.ofMillis(300));
        PathLocks others = connection.project(key);
        Lease move = locks.move("/A/C", "/B");
        // Another owner cannot write inside the move's target; the move itself can.
        assertThrows(Busy.class, () -> others.upload("/B/C/new.txt"));
        long fence = move.lock(LockRequest.write("/B/C/new.txt"), LockRequest.read("/T"));
        assertEquals(move.fence() + 1, fence);
        assertEquals(List.of(LockRequest.write("/A/C"), LockRequest.write("/B/C"), LockRequest.write("/B/C/new.txt"),
                LockRequest.read("/T")), move.locks());
        // Well past the TTL, the watchdog has kept all four.
        Servers.sleep(1000);
        assertFalse(move.isLost());
        assertEquals(4, locks.locks().stream().filter(l -> l.token().equals(move.token())).count());
        assertThrows(Busy.class, () -> others.upload("/T/x"));
        // A conflict with someone else is Busy, and the lease keeps what it had.
        try (Lease theirs = others.upload("/Z")) {
            Busy busy = assertThrows(Busy.class, () -> move.lock(LockRequest.read("/Z/y")));
            assertEquals(List.of(theirs.token()), busy.blockers().stream().map(HeldLock::token).toList());
        }
        assertFalse(move.isLost());
        assertThrows(IllegalArgumentException.class,
                () -> move.lock(List.of(LockRequest.read("/Q")), AcquireOptions.with().ttl(Duration.ofSeconds(5))));
        move.release();
        assertEquals(List.of(), locks.locks());
        assertThrows(IllegalStateException.class, () -> move.lock(LockRequest.read("/Q")));
    }

    @Test
    void aLeaseMissingSomeOfItsLocksIsLostAndALostLeaseTakesNoMore() {
        String key = project();
        PathLocks locks = connection.project(key).ttl(Duration.ofMillis(600));
        // One path of a move released elsewhere with its token: the move no longer covers its work.
        Lease move = locks.move("/A/C", "/B");
        CompletableFuture<Double> lost = lostAt(move);
        Servers.sleep(250);
        double releasedAt = Servers.nowMs();
        assertEquals(1L, server.integer("PATHLOCK.RELEASE", key, move.token(), "/B/C"));
        double elapsed = within(lost, 2000) - releasedAt;
        assertTrue(elapsed <= 200 + SLACK_MS, "lost " + elapsed + " ms after one path was released");
        assertEquals(LostReason.GONE, within(move.lost(), 1000).reason());
        move.release();
        // A lease whose key was deleted before its next renewal takes no new locks under its
        // token (they would keep answering its renewals and hide the loss): lock() reports it.
        Lease upload = locks.upload("/D/f");
        assertEquals(1L, server.integer("DEL", key));
        LeaseLost refused = assertThrows(LeaseLost.class, () -> upload.lock(LockRequest.write("/D/g")));
        assertEquals(LostReason.GONE, refused.reason());
        assertTrue(upload.isLost());
        assertEquals(List.of(), locks.locks());
        upload.release();
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
    void refusesTheEmptyPathAndTheEmptyFolderEveryWay() {
        PathLocks locks = connection.project(project());
        assertThrows(IllegalArgumentException.class, () -> new LockRequest(Mode.WRITE, ""));
        assertThrows(IllegalArgumentException.class, () -> locks.move("/A/C", ""));
        assertThrows(IllegalArgumentException.class, () -> locks.copy("/A/C", ""));
        assertEquals(List.of(), locks.locks());
        // The root written out is the whole project, as in the other clients' lock().
        try (Lease into = locks.move("/A/C", "/")) {
            assertEquals(List.of(LockRequest.write("/A/C"), LockRequest.write("/C")), into.locks());
        }
    }

    @Test
    void aKeyOfAnotherTypeIsNamedInTheErrorAndLosesTheLease() {
        String key = project();
        server.command("SET", key, "not a project");
        PathLocks locks = connection.project(key).ttl(Duration.ofMillis(300));
        WrongType wrong = assertThrows(WrongType.class, () -> locks.upload("/A"));
        assertEquals(key, wrong.key());
        assertTrue(wrong.getMessage().startsWith("key \"" + key + "\" is not a pathlock project"), wrong.getMessage());
        assertThrows(WrongType.class, locks::locks);
        server.command("DEL", key);
        Lease lease = locks.upload("/A");
        CompletableFuture<LeaseLost> lost = lease.lost();
        server.command("SET", key, "replaced");
        assertEquals(LostReason.REPLACED, within(lost, 1000).reason());
        lease.release();
    }

    @Test
    void refusesAMoveIntoItselfOrItsOwnFolderAndARenameThatIsNotANameBeforeSendingAnything() {
        String key = project();
        PathLocks locks = connection.project(key);
        server.command("CONFIG", "RESETSTAT");
        for (String[] into : new String[][] {{"/A", "/A/C"}, {"/A/C", "/A"}, {"/A", "/A"}, {"/A/C", "/A/./"}}) {
            assertThrows(IllegalArgumentException.class, () -> locks.move(into[0], into[1]));
            assertThrows(IllegalArgumentException.class, () -> locks.copy(into[0], into[1]));
        }
        for (String name : List.of("/C2", "B/C2", "", ".", "..", "C")) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> locks.rename("/A/C", name));
            assertTrue(e.getMessage().contains("to change folders, use move(path, intoFolder)"), e.getMessage());
        }
        assertFalse(server.info("commandstats").contains("cmdstat_pathlock.acquire"), "an ACQUIRE was sent");
        // Beside the source, and a new name in the same folder, are fine.
        try (Lease move = locks.move("/A/C", "/A/CD"); Lease rename = locks.rename("/E/C", "C2")) {
            assertEquals(List.of(LockRequest.write("/A/C"), LockRequest.write("/A/CD/C")), move.locks());
            assertEquals(List.of(LockRequest.write("/E/C"), LockRequest.write("/E/C2")), rename.locks());
        }
    }

    @Test
    void theLostFutureIsCancelledByANormalReleaseAndNeverHangs() throws Exception {
        PathLocks locks = connection.project(project()).ttl(Duration.ofMillis(300));
        Lease lease = locks.upload("/A");
        CompletableFuture<LeaseLost> before = lease.lost();
        Servers.sleep(400);
        lease.release();
        assertTrue(before.isCancelled());
        assertTrue(lease.lost().isCancelled());
        assertThrows(java.util.concurrent.CancellationException.class, () -> before.get(1, java.util.concurrent.TimeUnit.SECONDS));
        assertFalse(lease.isLost());
        // A lost lease's future completes with the reason, and a release after that changes nothing.
        Lease other = locks.upload("/B");
        server.integer("PATHLOCK.RELEASE", locks.key(), other.token());
        assertEquals(LostReason.GONE, within(other.lost(), 2000).reason());
        other.release();
        assertEquals(LostReason.GONE, within(other.lost(), 1000).reason());
        assertTrue(other.isLost());
    }

    @Test
    void aBusyWithNoHolderLeftSaysSoRatherThanNamingNobody() throws Exception {
        PathLocks locks = connection.project(project());
        try (Lease holder = locks.upload("/A/x")) {
            // A waiter for all of /A queues behind the holder; a read of /A/y conflicts with no
            // live lock, only with that earlier waiter, so it is refused with no blocker to name.
            CompletableFuture<Lease> waiter = locks.async().create("/A", AcquireOptions.with().waitFor(Duration.ofSeconds(10)));
            Support.waitUntil("the waiter", 3000, () -> locks.waiters().size() == 1);
            Busy busy = assertThrows(Busy.class, () -> locks.read("/A/y"));
            assertEquals(List.of(), busy.blockers());
            assertTrue(busy.getMessage().contains("nothing holds these paths now"), busy.getMessage());
            assertTrue(busy.getMessage().endsWith("try again"), busy.getMessage());
            holder.release();
            within(waiter, 3000).release();
        }
    }
}
