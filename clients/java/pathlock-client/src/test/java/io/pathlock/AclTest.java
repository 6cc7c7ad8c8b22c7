package io.pathlock;

import static io.pathlock.Support.within;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The application user of docs/operations.md's ACL recipe (the lock commands on {@code proj:*}
 * keys, nothing else) uses every feature of the client but {@code replicas}, which needs
 * {@code WAIT}: without it the call fails with the server's NOPERM and holds nothing.
 */
class AclTest {
    private static Servers.Server server;

    @BeforeAll
    static void start() {
        server = Servers.Server.start();
        // The pathlock category where the server has module categories, the commands by name on
        // Redis 7.0.
        boolean categories = server.command("ACL", "CAT").contains("pathlock");
        List<Object> rules = categories
                ? List.of("~proj:*", "+@pathlock")
                : List.of("~proj:*", "+pathlock.acquire", "+pathlock.release", "+pathlock.renew", "+pathlock.locks",
                        "+pathlock.check", "+pathlock.waiters");
        List<Object> command = new java.util.ArrayList<>(List.of("ACL", "SETUSER", "app", "reset", "on", ">pw"));
        command.addAll(rules);
        server.command(command.toArray());
    }

    @AfterAll
    static void stop() {
        server.stop();
    }

    @Test
    void theRecipeUserLocksWaitsGivesUpAndCannotAskForReplicas() {
        RedisURI uri = RedisURI.builder(server.uri()).withAuthentication("app", "pw").build();
        PathLocks locks = server.connect(uri).project("proj:java").ttl(Duration.ofMillis(400));
        Lease holder = locks.delete("/A");
        Servers.sleep(600);
        assertFalse(holder.isLost(), "renewed past its ttl");
        // A waiting acquire is granted when the holder lets go.
        CompletableFuture.delayedExecutor(300, java.util.concurrent.TimeUnit.MILLISECONDS).execute(holder::close);
        Lease waited = locks.upload("/A/f", AcquireOptions.with().waitFor(Duration.ofSeconds(5)));
        // A cancelled waiting acquire leaves the server's queue.
        CompletableFuture<Lease> waiting = locks.async().upload("/A/f", AcquireOptions.with().waitFor(Duration.ofSeconds(30)));
        Support.waitUntil("the wait on the server", 5000, () -> locks.waiters().size() == 1);
        assertTrue(waiting.cancel(true));
        Support.waitUntil("the wait to leave the queue", 5000, () -> locks.waiters().isEmpty());
        // Replicas need WAIT: refused, and the grant is released.
        PathLockException refused = assertThrows(PathLockException.class,
                () -> locks.upload("/B", AcquireOptions.with().replicas(1).replicasTimeout(Duration.ofMillis(100))));
        assertTrue(refused.getMessage().contains("NOPERM"), refused.getMessage());
        Support.waitUntil("the refused grant to be released", 5000, () -> locks.locks().size() == 1);
        waited.close();
        assertEquals(List.of(), within(locks.async().locks(null, null), 3000));
    }
}
