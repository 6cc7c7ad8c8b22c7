package io.pathlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/** {@code replicas}: a grant is handed out only once a real replica acknowledged it. */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ReplicasTest {
    private static Servers.Replicated servers;

    @BeforeAll
    static void start() {
        servers = Servers.Replicated.start();
    }

    @AfterAll
    static void stop() {
        servers.replica().stop();
        servers.master().stop();
    }

    @Test
    @Order(1)
    void handsOutAGrantThatTheReplicaHolds() {
        PathLocks locks = servers.master().connect().project("proj:r1").replicas(1);
        try (Lease lease = locks.move("/A/C", "/B")) {
            // WAIT 1 answered: the replica has the grant, with the same token and fence.
            List<Object> onReplica = servers.replica().command("PATHLOCK.LOCKS", "proj:r1");
            assertEquals(2, onReplica.size());
            for (Object entry : onReplica) {
                List<Object> lock = Admin.array(entry);
                assertEquals(lease.token(), Admin.str(lock.get(2)));
                assertEquals(lease.fence(), Admin.integer(lock.get(4)));
            }
            assertEquals(List.of("/A/C", "/B/C"), onReplica.stream().map(e -> Admin.str(Admin.array(e).get(0))).toList());
            // More locks under the lease, replicated too.
            long fence = lease.lock(List.of(LockRequest.write("/B/C/x")), AcquireOptions.with().replicas(1));
            assertEquals(lease.fence() + 1, fence);
            assertEquals(3, servers.replica().command("PATHLOCK.LOCKS", "proj:r1").size());
        }
        // A waiting acquire with replicas also works (both block; neither holds up the watchdog).
        locks.upload("/A/C/x", AcquireOptions.with().waitFor(Duration.ofMillis(200))).release();
    }

    @Test
    @Order(2)
    void locksAddedUnderALeaseButNotReplicatedLeaveItsListToo() throws InterruptedException {
        PathLocks locks = servers.master().connect().project("proj:r2");
        try (Lease lease = locks.upload("/A/f")) {
            // Two replicas asked for, one there: the grant of /B is released, and the lease's list
            // must say what the server holds (it kept naming /B, which nothing renewed).
            NotReplicated refused = assertThrows(NotReplicated.class, () -> lease.lock(
                    List.of(LockRequest.write("/B")),
                    AcquireOptions.with().replicas(2).replicasTimeout(Duration.ofMillis(100))));
            assertTrue(refused.getMessage().contains("2"), refused.getMessage());
            assertEquals(List.of("/A/f"), lease.locks().stream().map(LockRequest::path).toList());
            long until = System.nanoTime() + Duration.ofSeconds(5).toNanos();
            List<Object> held = servers.master().command("PATHLOCK.LOCKS", "proj:r2");
            while (held.size() != 1 && System.nanoTime() < until) {
                Thread.sleep(20);
                held = servers.master().command("PATHLOCK.LOCKS", "proj:r2");
            }
            assertEquals(List.of("/A/f"), held.stream().map(e -> Admin.str(Admin.array(e).get(0))).toList());
        }
    }

}
