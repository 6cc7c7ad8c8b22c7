package io.pathlock.spring;

import static org.assertj.core.api.Assertions.assertThat;

import io.pathlock.Lease;
import io.pathlock.LostReason;
import io.pathlock.PathLocks;
import io.pathlock.TestServers;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.data.redis.autoconfigure.DataRedisAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;

/**
 * The application context's close under a held lease, against a real server: pathlock's
 * connections (the handle's, the health check's) close while the connection factory's Lettuce
 * client is still alive, so Lettuce has nothing to warn about, and none is left on the server.
 */
@ExtendWith(OutputCaptureExtension.class)
class PathLockShutdownTest {
    static TestServers.Single server;

    final ApplicationContextRunner runner = new ApplicationContextRunner()
            .withConfiguration(AutoConfigurations.of(DataRedisAutoConfiguration.class, PathLockAutoConfiguration.class,
                    PathLockHealthContributorAutoConfiguration.class))
            .withPropertyValues("spring.data.redis.host=127.0.0.1", "spring.data.redis.port=" + server.port());

    @BeforeAll
    static void start() {
        server = TestServers.single();
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    @Test
    void theConnectionsCloseBeforeTheFactorysClientAndTheHeldLeaseLapses(CapturedOutput output) throws Exception {
        Lease[] held = new Lease[1];
        runner.withPropertyValues("spring.data.redis.client-name=stopping", "pathlock.ttl=1s").run(context -> {
            LettuceConnectionFactory factory = context.getBean(LettuceConnectionFactory.class);
            assertThat(context.getBean("pathLocksLifecycle", ClosingLifecycle.class).getPhase())
                    .isGreaterThan(factory.getPhase());
            // The health check opens its connection too.
            assertThat(context.getBean(PathLockHealthIndicator.class).health().getStatus().getCode()).isEqualTo("UP");
            held[0] = context.getBean(PathLockTemplate.class).project("stopping").move("/A/C", "/B");
            assertThat(clients()).anyMatch(line -> line.contains("name=stopping"));
        });
        Lease lease = held[0];
        // Closed, never released behind the work that holds it: its locks stay until their TTL,
        // and it is lost at its deadline, so that such work stops.
        assertThat(server.command("PATHLOCK.LOCKS", "pathlock:stopping")).hasSize(2);
        assertThat(lease.isReleased()).isFalse();
        assertThat(lease.lost().get(3, TimeUnit.SECONDS).reason()).isEqualTo(LostReason.EXPIRED);
        for (int i = 0; i < 100 && clients().stream().anyMatch(line -> line.contains("name=stopping")); i++) {
            PathLockAutoConfigurationTest.sleep(20);
        }
        assertThat(clients()).noneMatch(line -> line.contains("name=stopping"));
        assertThat(output).doesNotContain("Connection is already closed");
        lease.close();
    }

    @Test
    void theApplicationsOwnHandleClosesBeforeTheFactorysClientToo(CapturedOutput output) throws Exception {
        // A PathLocks bean of the application's (the README's way, a destroy method that closes
        // it) on the factory's client: the starter closes it with its own, while that client lives.
        Lease[] held = new Lease[1];
        runner.withUserConfiguration(PathLockAutoConfigurationTest.OwnHandle.class)
                .withPropertyValues("spring.data.redis.client-name=own-stopping").run(context -> {
                    assertThat(context).hasSingleBean(PathLocks.class).hasBean("ownLocks");
                    LettuceConnectionFactory factory = context.getBean(LettuceConnectionFactory.class);
                    assertThat(context.getBean("pathLocksLifecycle", ClosingLifecycle.class).getPhase())
                            .isGreaterThan(factory.getPhase());
                    held[0] = context.getBean(PathLockTemplate.class).project("own-stopping").ttl(Duration.ofSeconds(1))
                            .move("/A/C", "/B");
                    assertThat(held[0].note()).isEqualTo("own");
                    assertThat(clients()).anyMatch(line -> line.contains("name=own-stopping"));
                });
        Lease lease = held[0];
        assertThat(server.command("PATHLOCK.LOCKS", lease.key())).hasSize(2);
        assertThat(lease.isReleased()).isFalse();
        assertThat(lease.lost().get(3, TimeUnit.SECONDS).reason()).isEqualTo(LostReason.EXPIRED);
        for (int i = 0; i < 100 && clients().stream().anyMatch(line -> line.contains("name=own-stopping")); i++) {
            PathLockAutoConfigurationTest.sleep(20);
        }
        assertThat(clients()).noneMatch(line -> line.contains("name=own-stopping"));
        assertThat(output).doesNotContain("Connection is already closed");
        lease.close();
    }

    @Test
    void thePhaseIsJustAboveTheFactorysAndNeverOverflows() {
        assertThat(ClosingLifecycle.above(0)).isEqualTo(1);
        assertThat(ClosingLifecycle.above(-5)).isEqualTo(-4);
        assertThat(ClosingLifecycle.above(Integer.MAX_VALUE)).isEqualTo(Integer.MAX_VALUE);
    }

    static List<String> clients() {
        return ((String) server.command("CLIENT", "LIST").get(0)).lines().toList();
    }
}
