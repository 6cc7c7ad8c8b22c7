package io.pathlock.spring;

import static org.assertj.core.api.Assertions.assertThat;

import io.pathlock.TestServers;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.data.redis.autoconfigure.DataRedisAutoConfiguration;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.Status;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/** The health indicator against a server with the module and one without it. */
class PathLockHealthIndicatorTest {
    static TestServers.Single server;
    static TestServers.Bare bare;

    final ApplicationContextRunner runner = new ApplicationContextRunner()
            .withConfiguration(AutoConfigurations.of(DataRedisAutoConfiguration.class, PathLockAutoConfiguration.class,
                    PathLockHealthContributorAutoConfiguration.class));

    @BeforeAll
    static void start() {
        server = TestServers.single();
        bare = TestServers.bare();
    }

    @AfterAll
    static void stop() {
        server.close();
        bare.close();
    }

    @Test
    void upWithTheModulesVersion() {
        runner.withPropertyValues("spring.data.redis.port=" + server.port()).run(context -> {
            Health health = context.getBean(PathLockHealthIndicator.class).health();
            assertThat(health.getStatus()).isEqualTo(Status.UP);
            assertThat(health.getDetails()).containsEntry("version", 1L)
                    .containsEntry("nodes", Map.of("localhost:" + server.port(), 1L));
        });
    }

    @Test
    void downWhereTheModuleIsNotLoaded() {
        runner.withPropertyValues("spring.data.redis.port=" + bare.port()).run(context -> {
            Health health = context.getBean(PathLockHealthIndicator.class).health();
            assertThat(health.getStatus()).isEqualTo(Status.DOWN);
            String node = "localhost:" + bare.port();
            assertThat(health.getDetails()).containsEntry("missing", List.of(node))
                    .containsEntry("nodes", Map.of(node, "not loaded")).doesNotContainKey("version");
        });
    }

    @Test
    void downWhenTheServerCannotBeAsked() {
        TestServers.Bare gone = TestServers.bare();
        gone.close();
        runner.withPropertyValues("spring.data.redis.port=" + gone.port(), "spring.data.redis.timeout=500ms").run(context -> {
            Health health = context.getBean(PathLockHealthIndicator.class).health();
            assertThat(health.getStatus()).isEqualTo(Status.DOWN);
            assertThat(health.getDetails()).containsKey("error");
        });
    }

    @Test
    void offByProperty() {
        runner.withPropertyValues("spring.data.redis.port=" + server.port(), "management.health.pathlock.enabled=false")
                .run(context -> assertThat(context).doesNotHaveBean(PathLockHealthIndicator.class));
    }
}
