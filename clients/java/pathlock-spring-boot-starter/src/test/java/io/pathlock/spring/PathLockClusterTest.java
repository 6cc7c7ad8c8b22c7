package io.pathlock.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.SlotHash;
import io.pathlock.AcquireOptions;
import io.pathlock.Busy;
import io.pathlock.Lease;
import io.pathlock.PathLocks;
import io.pathlock.TestServers;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.data.redis.autoconfigure.DataRedisAutoConfiguration;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.Status;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;

/**
 * The starter on a 3-master cluster configured as spring.data.redis.cluster.nodes: projects on
 * every shard through the factory's RedisClusterClient, a wait on a shard, and the health of every
 * master. One cluster for the class.
 */
class PathLockClusterTest {
    static TestServers.Cluster cluster;

    static ApplicationContextRunner runner() {
        return new ApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(DataRedisAutoConfiguration.class, PathLockAutoConfiguration.class,
                        PathLockHealthContributorAutoConfiguration.class))
                .withPropertyValues("spring.data.redis.cluster.nodes=" + cluster.nodes());
    }

    @BeforeAll
    static void start() {
        cluster = TestServers.cluster();
    }

    @AfterAll
    static void stop() {
        cluster.close();
    }

    @Test
    void projectsOnEveryShard() {
        runner().run(context -> {
            assertThat(context.getBean(LettuceConnectionFactory.class).getNativeClient()).isInstanceOf(RedisClusterClient.class);
            PathLockTemplate template = context.getBean(PathLockTemplate.class);
            // Projects whose keys fall in each third of the slots, so on each master.
            Set<Integer> thirds = new HashSet<>();
            List<Lease> leases = new ArrayList<>();
            for (int i = 0; thirds.size() < 3 && i < 1000; i++) {
                String id = "p" + i;
                if (thirds.add(SlotHash.getSlot(template.key(id)) * 3 / SlotHash.SLOT_COUNT)) {
                    leases.add(template.project(id).move("/A/C", "/B"));
                }
            }
            assertThat(thirds).hasSize(3);
            for (Lease lease : leases) {
                PathLocks project = template.locks().project(lease.key());
                assertThat(project.locksOf(lease.token())).hasSize(2);
                assertThatThrownBy(() -> project.upload("/A/C/f")).isInstanceOf(Busy.class);
                lease.release();
                assertThat(project.locks()).isEmpty();
            }
        });
    }

    @Test
    void aWaitOnAShard() {
        runner().run(context -> {
            PathLocks project = context.getBean(PathLockTemplate.class).project("waits");
            Lease holder = project.delete("/A");
            CompletableFuture<Lease> waiting = project.async().upload("/A/f", AcquireOptions.with().waitFor(Duration.ofSeconds(10)));
            Thread.sleep(100);
            assertThat(waiting).isNotDone();
            holder.release();
            try (Lease granted = waiting.get(10, TimeUnit.SECONDS)) {
                assertThat(granted.fence()).isGreaterThan(holder.fence());
            }
        });
    }

    @Test
    void healthUpOnEveryMaster() {
        runner().run(context -> {
            Health health = context.getBean(PathLockHealthIndicator.class).health();
            assertThat(health.getStatus()).isEqualTo(Status.UP);
            assertThat(health.getDetails()).containsEntry("version", 1L);
            @SuppressWarnings("unchecked")
            Map<String, Object> nodes = (Map<String, Object>) health.getDetails().get("nodes");
            assertThat(nodes.keySet()).containsExactlyInAnyOrderElementsOf(
                    cluster.ports().stream().map(port -> "127.0.0.1:" + port).toList());
            assertThat(nodes.values()).containsOnly(1L);
        });
    }
}
