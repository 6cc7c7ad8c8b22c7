package io.pathlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.RedisURI;
import io.lettuce.core.cluster.RedisClusterClient;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The application user of docs/operations.md's ACL recipe on a 3-master cluster, set on every
 * node (ACL users are per node). Lettuce reads the topology with {@code CLUSTER NODES}; the other
 * additions of the documented line are for the other drivers. Lettuce's refused {@code INFO},
 * {@code CLIENT SETNAME} and {@code CLUSTER MYID} of a topology refresh are not needed.
 */
class AclClusterTest {
    /** The rules docs/operations.md adds to the recipe on a cluster. */
    private static final List<String> CLUSTER_RULES =
            List.of("+cluster|slots", "+cluster|nodes", "+cluster|info", "+command", "+ping");

    private static Servers.Cluster cluster;

    @BeforeAll
    static void start() {
        cluster = Servers.Cluster.start();
    }

    @AfterAll
    static void stop() {
        cluster.stop();
    }

    /** Sets the recipe user {@code name} (password pw), with extra rules, on every node. */
    private static RedisClusterClient user(String name, List<String> extra) {
        for (Servers.Server node : cluster.nodes()) {
            boolean categories = node.command("ACL", "CAT").contains("pathlock");
            List<Object> command = new ArrayList<>(List.of("ACL", "SETUSER", name, "reset", "on", ">pw", "~proj:*"));
            command.addAll(categories
                    ? List.of("+@pathlock")
                    : List.of("+pathlock.acquire", "+pathlock.release", "+pathlock.renew", "+pathlock.locks",
                            "+pathlock.check", "+pathlock.waiters"));
            command.addAll(extra);
            node.command(command.toArray());
        }
        RedisURI uri = RedisURI.builder(cluster.nodes().get(0).uri()).withAuthentication(name, "pw").build();
        RedisClusterClient client = RedisClusterClient.create(Servers.RESOURCES, uri);
        cluster.nodes().get(0).track(client::shutdown);
        return client;
    }

    @Test
    void theRecipeUserWithTheClusterRulesLocksAndWaitsOnEveryMaster() {
        try (PathLocks all = PathLocks.of(user("app", CLUSTER_RULES), "unused")) {
            for (int i = 0; i < 4; i++) {
                PathLocks locks = all.project("proj:acl" + i).ttl(Duration.ofMillis(300));
                Lease holder = locks.delete("/A");
                CompletableFuture.delayedExecutor(400, TimeUnit.MILLISECONDS).execute(holder::close);
                Lease waited = locks.upload("/A/f", AcquireOptions.with().waitFor(Duration.ofSeconds(5)));
                assertFalse(holder.isLost(), "renewed past its ttl");
                waited.close();
                assertEquals(List.of(), locks.locks());
            }
        }
    }

    @Test
    void withoutClusterNodesLettuceCannotReadTheTopology() {
        List<String> others = CLUSTER_RULES.stream().filter(r -> !r.equals("+cluster|nodes")).toList();
        try (PathLocks all = PathLocks.of(user("app-no-nodes", others), "unused")) {
            ConnectionException refused = assertThrows(ConnectionException.class,
                    () -> all.project("proj:acl").delete("/A"));
            assertTrue(refused.getMessage().contains("Cannot retrieve cluster partitions"), refused.getMessage());
        }
    }
}
