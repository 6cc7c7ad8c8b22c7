package io.pathlock;

import static io.pathlock.Support.SLACK_MS;
import static io.pathlock.Support.lostAt;
import static io.pathlock.Support.within;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.cluster.SlotHash;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** A real 3-master Redis Cluster through a Lettuce RedisClusterClient. */
class ClusterTest {
    private static Servers.Cluster cluster;

    @BeforeAll
    static void start() {
        cluster = Servers.Cluster.start();
    }

    @AfterAll
    static void stop() {
        cluster.stop();
    }

    private static long moved(Servers.Server node) {
        Matcher m = Pattern.compile("errorstat_MOVED:count=(\\d+)").matcher(node.info("errorstats"));
        return m.find() ? Long.parseLong(m.group(1)) : 0;
    }

    /** The node that serves the key's slot now, by its own cluster's word. */
    private static Servers.Server owner(String key) {
        int slot = SlotHash.getSlot(key);
        for (Object entry : cluster.nodes().get(0).command("CLUSTER", "SLOTS")) {
            List<Object> range = Admin.array(entry);
            if (Admin.integer(range.get(0)) <= slot && slot <= Admin.integer(range.get(1))) {
                long port = Admin.integer(Admin.array(range.get(2)).get(1));
                return cluster.nodes().stream().filter(n -> n.port == port).findFirst().orElseThrow();
            }
        }
        throw new AssertionError("no node serves slot " + slot);
    }

    @Test
    void locksProjectsOnEveryShardEachOnTheMasterOfItsSlotWithoutRedirects() {
        PathLocks connection = cluster.connect();
        for (Servers.Server node : cluster.nodes()) {
            node.command("CONFIG", "RESETSTAT");
        }
        List<Lease> leases = new ArrayList<>();
        for (int i = 0; i < 30; i++) {
            leases.add(connection.project("proj:" + i).ttl(Duration.ofMillis(600)).move("/A/C", "/B"));
        }
        // The watchdogs keep the 600 ms leases for 1.5 s, on whichever node holds each.
        Servers.sleep(1500);
        assertTrue(leases.stream().noneMatch(Lease::isLost));
        // Commands went straight to the right master: no node answered one with -MOVED.
        for (Servers.Server node : cluster.nodes()) {
            assertEquals(0, moved(node), node.info("errorstats"));
        }
        // Every project's locks live on exactly one node (the others answer -MOVED), and every node has some.
        int[] perNode = new int[3];
        for (int n = 0; n < 3; n++) {
            for (int i = 0; i < 30; i++) {
                try {
                    if (!cluster.nodes().get(n).command("PATHLOCK.LOCKS", "proj:" + i).isEmpty()) {
                        perNode[n]++;
                    }
                } catch (RedisCommandExecutionException e) {
                    assertTrue(e.getMessage().startsWith("MOVED"), e.getMessage());
                }
            }
        }
        assertEquals(30, perNode[0] + perNode[1] + perNode[2]);
        assertTrue(perNode[0] > 0 && perNode[1] > 0 && perNode[2] > 0, "projects per node: " + List.of(perNode[0], perNode[1], perNode[2]));
        leases.forEach(Lease::release);
        for (int i = 0; i < 30; i++) {
            assertEquals(List.of(), connection.project("proj:" + i).locks());
        }
    }

    @Test
    void refusesWithBlockersWaitsAndDetectsADeletedKey() throws Exception {
        PathLocks connection = cluster.connect();
        PathLocks locks = connection.project("{proj:c}:locks").ttl(Duration.ofMillis(600));
        Lease move = locks.move("/A/C", "/B");
        Busy busy = assertThrows(Busy.class, () -> locks.upload("/B/C/x"));
        assertEquals(List.of(List.of("/B/C", "WRITE", move.token())), Support.shape(busy.blockers()));
        CompletableFuture<Lease> waiting = Support.async(
                () -> locks.upload("/B/C/x", AcquireOptions.with().waitFor(Duration.ofSeconds(2))));
        Servers.sleep(300);
        move.release();
        Lease upload = within(waiting, 3000);
        assertEquals(move.fence() + 1, upload.fence());
        CompletableFuture<Double> lost = lostAt(upload);
        double deletedAt = Servers.nowMs();
        assertEquals(1L, owner("{proj:c}:locks").integer("DEL", "{proj:c}:locks"));
        double elapsed = within(lost, 2000) - deletedAt;
        assertTrue(elapsed <= 200 + SLACK_MS, "lost " + elapsed + " ms after DEL");
        upload.release();
    }

    /** Starts moving the key's slot from its node to another: IMPORTING, MIGRATING, then the key itself. */
    private static Servers.Server[] migrate(String key) {
        Servers.Server source = owner(key);
        Servers.Server target = cluster.nodes().stream().filter(n -> n != source).findFirst().orElseThrow();
        int slot = SlotHash.getSlot(key);
        String sourceId = source.text("CLUSTER", "MYID");
        String targetId = target.text("CLUSTER", "MYID");
        target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", sourceId);
        source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", targetId);
        assertEquals("OK", source.text("MIGRATE", "127.0.0.1", target.port, key, 0, 5000));
        return new Servers.Server[] {source, target};
    }

    /** Ends the move: the slot belongs to the target, as every node is told. */
    private static void assign(String key, Servers.Server target) {
        int slot = SlotHash.getSlot(key);
        String targetId = target.text("CLUSTER", "MYID");
        target.command("CLUSTER", "SETSLOT", slot, "NODE", targetId);
        for (Servers.Server node : cluster.nodes()) {
            if (node != target) {
                node.command("CLUSTER", "SETSLOT", slot, "NODE", targetId);
            }
        }
    }

    @Test
    void followsAskWhileTheKeysSlotMigratesAndMovedOnceItHasMoved() {
        String key = "proj:moving";
        PathLocks connection = cluster.connect();
        // 3 s: the nodes write their nodes.conf (with an fsync) as the slot changes hands, which
        // holds them up for a moment on a busy machine (800 ms seen) while renewals wait.
        PathLocks locks = connection.project(key).ttl(Duration.ofSeconds(3));
        Lease lease = locks.move("/A/C", "/B");
        CompletableFuture<Double> lost = lostAt(lease);
        Servers.Server[] ends = migrate(key);
        Servers.Server source = ends[0];
        Servers.Server target = ends[1];
        // The key is on the target, the slot still the source's: the source answers -ASK, and the
        // client follows it (ASKING, then the command) for renewals and new grants alike.
        Servers.sleep(3200);
        assertFalse(lease.isLost());
        try (Lease beside = locks.upload("/D/f")) {
            // The key carried its fences to the target.
            assertEquals(lease.fence() + 1, beside.fence());
        }
        Matcher asks = Pattern.compile("errorstat_ASK:count=(\\d+)").matcher(source.info("errorstats"));
        assertTrue(asks.find() && Long.parseLong(asks.group(1)) >= 2, source.info("errorstats"));
        // Now the slot is the target's: the source answers -MOVED at most a few times (none if a
        // topology refresh came first), and the client's slot map sends everything after it
        // straight to the target.
        long movedBefore = moved(source);
        assign(key, target);
        Servers.sleep(2500);
        assertFalse(lease.isLost());
        assertFalse(lost.isDone());
        long redirected = moved(source) - movedBefore;
        assertTrue(redirected <= 3, "-MOVED answered " + redirected + " times");
        assertEquals(List.of(List.of("/A/C", "WRITE", lease.token()), List.of("/B/C", "WRITE", lease.token())),
                Support.shape(locks.locks()));
        lease.release();
        assertEquals(List.of(), target.command("PATHLOCK.LOCKS", key));
    }

    @Test
    void keepsALeaseThroughTheFailoverOfItsMaster() {
        // Its own cluster, with a replica per master, that fails a node after 1 s.
        Servers.Cluster replicated = Servers.Cluster.start(1, 1000);
        try {
            String key = "proj:failover";
            PathLocks connection = replicated.connect();
            // A 10 s lease, granted once the master's replica has it.
            PathLocks locks = connection.project(key).ttl(Duration.ofSeconds(10)).replicas(1);
            Lease lease = locks.move("/A/C", "/B");
            Servers.Server master = ownerIn(replicated, key, null);
            master.kill();
            double killedAt = Servers.nowMs();
            // Renewals fail, the client reloads the slot map from the nodes left, and once the
            // replica is promoted they reach it.
            Support.waitUntil("the replica to take the slot over", 20000, () -> ownerIn(replicated, key, master) != master);
            Support.waitUntil("a renewal on the new master", 10000, () -> lease.remaining().toMillis() > 9000);
            System.out.printf("# failover: the lease renewed on the new master %.0f ms after its master was killed%n",
                    Servers.nowMs() - killedAt);
            assertFalse(lease.isLost());
            assertEquals(List.of(List.of("/A/C", "WRITE", lease.token()), List.of("/B/C", "WRITE", lease.token())),
                    Support.shape(locks.locks()));
            lease.release();
            assertEquals(List.of(), locks.locks());
            assertTrue(lease.isReleased() && !lease.isLost());
        } finally {
            replicated.stop();
        }
    }

    /** The master of the key's slot as a live node of {@code cluster} sees it (asking none of {@code dead}). */
    private static Servers.Server ownerIn(Servers.Cluster cluster, String key, Servers.Server dead) {
        int slot = SlotHash.getSlot(key);
        Servers.Server asked = cluster.nodes().stream().filter(n -> n != dead && n.isAlive()).findFirst().orElseThrow();
        for (Object entry : asked.command("CLUSTER", "SLOTS")) {
            List<Object> range = Admin.array(entry);
            if (Admin.integer(range.get(0)) <= slot && slot <= Admin.integer(range.get(1))) {
                long port = Admin.integer(Admin.array(range.get(2)).get(1));
                return cluster.nodes().stream().filter(n -> n.port == port).findFirst().orElseThrow();
            }
        }
        throw new AssertionError("no node serves slot " + slot);
    }
}
