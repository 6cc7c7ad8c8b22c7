package io.pathlock.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.lettuce.core.RedisClient;
import io.micrometer.core.instrument.MeterRegistry;
import io.pathlock.Busy;
import io.pathlock.Lease;
import io.pathlock.PathLocks;
import io.pathlock.TestServers;
import java.io.IOException;
import java.io.StringReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.context.properties.source.InvalidConfigurationPropertyValueException;
import org.springframework.boot.data.redis.autoconfigure.DataRedisAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;

/**
 * The auto-configuration on Spring Boot's own Redis auto-configuration, against a real server with
 * the module (one for the class, and one with a password): the beans, the properties, the
 * application's connection settings reused, and every bean stepping back for the application's own.
 */
class PathLockAutoConfigurationTest {
    static TestServers.Single server;

    final ApplicationContextRunner runner = new ApplicationContextRunner()
            .withConfiguration(AutoConfigurations.of(DataRedisAutoConfiguration.class, PathLockAutoConfiguration.class))
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
    void aTemplateOnTheConnectionFactorysClientWithTheDefaults() {
        runner.run(context -> {
            assertThat(context).hasSingleBean(PathLocks.class).hasSingleBean(PathLockTemplate.class);
            PathLockTemplate template = context.getBean(PathLockTemplate.class);
            PathLocks project = template.project("defaults");
            assertThat(project.key()).isEqualTo("pathlock:defaults");
            assertThat(project.ttl()).isEqualTo(Duration.ofSeconds(30));
            assertThat(project.waitFor()).isZero();
            assertThat(project.replicas()).isZero();
            assertThat(project.maxWaitingConnections()).isEqualTo(8);
            try (Lease lease = project.move("/A/C", "/B")) {
                assertThat(server.command("PATHLOCK.LOCKS", "pathlock:defaults")).hasSize(2);
                assertThat(lease.note()).isEqualTo("move /A/C -> /B");
            }
            assertThat(server.command("PATHLOCK.LOCKS", "pathlock:defaults")).isEmpty();
        });
    }

    @Test
    void thePropertiesAreEveryHandlesDefaults() {
        runner.withPropertyValues("pathlock.ttl=5s", "pathlock.wait=250ms", "pathlock.replicas-timeout=2s",
                "pathlock.note=drive-service", "pathlock.key-prefix=drive:", "pathlock.max-waiting-connections=3")
                .run(context -> {
                    PathLocks project = context.getBean(PathLockTemplate.class).project("props");
                    assertThat(project.key()).isEqualTo("drive:props");
                    assertThat(project.ttl()).isEqualTo(Duration.ofSeconds(5));
                    assertThat(project.waitFor()).isEqualTo(Duration.ofMillis(250));
                    assertThat(project.replicasTimeout()).isEqualTo(Duration.ofSeconds(2));
                    assertThat(project.note()).isEqualTo("drive-service");
                    assertThat(project.maxWaitingConnections()).isEqualTo(3);
                    try (Lease held = project.upload("/A/f.txt")) {
                        assertThat(held.note()).isEqualTo("drive-service");
                        long started = System.nanoTime();
                        assertThatThrownBy(() -> project.upload("/A/f.txt")).isInstanceOf(Busy.class)
                                .satisfies(e -> assertThat(((Busy) e).blockers()).singleElement()
                                        .satisfies(b -> assertThat(b.note()).isEqualTo("drive-service")));
                        // The wait of 250 ms was waited on the server before the refusal.
                        assertThat(System.nanoTime() - started).isGreaterThanOrEqualTo(Duration.ofMillis(240).toNanos());
                    }
                });
    }

    @Test
    void anEmptyNoteIsNoneSoTheOperationsNoteTheirLocks() {
        // pathlock.note= in a properties file binds the empty string: no note of the application's,
        // so each lock's note names its operation; operation-notes=false is what sends none.
        runner.withPropertyValues("pathlock.note=").run(context -> {
            PathLocks project = context.getBean(PathLockTemplate.class).project("empty-note");
            assertThat(project.note()).isNull();
            try (Lease lease = project.move("/A/C", "/B")) {
                assertThat(lease.note()).isEqualTo("move /A/C -> /B");
                assertThat(server.command("PATHLOCK.LOCKS", "pathlock:empty-note").get(0).toString())
                        .contains("move /A/C -> /B");
            }
        });
        runner.withPropertyValues("pathlock.note=", "pathlock.operation-notes=false").run(context -> {
            try (Lease lease = context.getBean(PathLockTemplate.class).project("no-note").upload("/f")) {
                assertThat(lease.note()).isNull();
            }
        });
    }

    @Test
    void theReadmesPropertiesBindAsPrinted() throws IOException {
        // The Spring Boot section's properties block of the client's README, read as Spring reads
        // an application.properties (its spring.data.redis.url names a server of the README's own).
        Properties readme = readmeProperties();
        String[] pathlock = readme.stringPropertyNames().stream().filter(name -> name.startsWith("pathlock."))
                .map(name -> name + "=" + readme.getProperty(name)).sorted().toArray(String[]::new);
        assertThat(pathlock).hasSizeGreaterThanOrEqualTo(6);
        runner.withPropertyValues(pathlock).run(context -> {
            assertThat(context).hasNotFailed();
            PathLocks project = context.getBean(PathLockTemplate.class).project("42");
            // What the README's comments say the block gives.
            assertThat(project.key()).isEqualTo("drive:42");
            assertThat(project.ttl()).isEqualTo(Duration.ofSeconds(60));
            assertThat(project.waitFor()).isZero();
            assertThat(project.replicas()).isZero();
            assertThat(project.replicasTimeout()).isEqualTo(Duration.ofSeconds(1));
            assertThat(project.maxWaitingConnections()).isEqualTo(8);
            try (Lease lease = project.move("/A/C", "/B")) {
                assertThat(lease.note()).isEqualTo("move /A/C -> /B");
            }
        });
    }

    /** The first properties block of the client README's Spring Boot section. */
    static Properties readmeProperties() throws IOException {
        String readme = Files.readString(Path.of("..", "README.md"));
        String section = readme.substring(readme.indexOf("\n## Spring Boot\n"));
        int start = section.indexOf("```properties\n") + "```properties\n".length();
        Properties properties = new Properties();
        properties.load(new StringReader(section.substring(start, section.indexOf("```", start))));
        return properties;
    }

    @Test
    void theApplicationsConnectionSettingsArePathlocks() {
        // The database, the client name and an ACL user come from spring.data.redis.*, through the
        // factory's client.
        server.command("ACL", "SETUSER", "drive", "on", ">s3cret", "~*", "+@all");
        runner.withPropertyValues("spring.data.redis.database=3", "spring.data.redis.client-name=drive-app",
                "spring.data.redis.username=drive", "spring.data.redis.password=s3cret")
                .run(context -> {
                    LettuceConnectionFactory factory = context.getBean(LettuceConnectionFactory.class);
                    assertThat(factory.getNativeClient()).isInstanceOf(RedisClient.class);
                    try (Lease lease = context.getBean(PathLockTemplate.class).project("db3").upload("/f")) {
                        String clients = (String) server.command("CLIENT", "LIST").get(0);
                        assertThat(clients.lines().filter(l -> l.contains("name=drive-app")))
                                .isNotEmpty().allSatisfy(l -> assertThat(l).contains("user=drive").contains("db=3"));
                        server.command("SELECT", "3");
                        assertThat(server.command("EXISTS", "pathlock:db3")).containsExactly(1L);
                        server.command("SELECT", "0");
                        assertThat(server.command("EXISTS", "pathlock:db3")).containsExactly(0L);
                        assertThat(lease.fence()).isPositive();
                    }
                });
    }

    @Test
    void aUrlWithAUserAndPasswordIsUsed() {
        server.command("ACL", "SETUSER", "urluser", "on", ">pw2", "~*", "+@all");
        new ApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(DataRedisAutoConfiguration.class, PathLockAutoConfiguration.class))
                .withPropertyValues("spring.data.redis.url=redis://urluser:pw2@127.0.0.1:" + server.port())
                .run(context -> {
                    try (Lease lease = context.getBean(PathLockTemplate.class).project("url").delete("/A")) {
                        assertThat(lease.locks()).hasSize(1);
                        assertThat((String) server.command("CLIENT", "LIST").get(0)).contains("user=urluser");
                    }
                });
    }

    @Test
    void aBadPropertyStopsTheApplicationNamingThePropertyWithTheClientsReason() {
        // As Spring Boot's own properties do: its failure analysis prints the property, the value
        // as written and where, and the reason.
        runner.withPropertyValues("pathlock.ttl=0s").run(context -> assertThat(context).hasFailed()
                .getFailure().rootCause().isInstanceOfSatisfying(InvalidConfigurationPropertyValueException.class, e -> {
                    assertThat(e.getName()).isEqualTo("pathlock.ttl");
                    assertThat(e.getReason()).contains("millisecond");
                }));
        runner.withPropertyValues("pathlock.max-waiting-connections=0").run(context -> assertThat(context).hasFailed()
                .getFailure().rootCause().isInstanceOfSatisfying(InvalidConfigurationPropertyValueException.class,
                        e -> assertThat(e.getName()).isEqualTo("pathlock.max-waiting-connections")));
        runner.withPropertyValues("pathlock.replicas=-1").run(context -> assertThat(context).hasFailed()
                .getFailure().rootCause().isInstanceOfSatisfying(InvalidConfigurationPropertyValueException.class,
                        e -> assertThat(e.getName()).isEqualTo("pathlock.replicas")));
        runner.withPropertyValues("pathlock.replicas-timeout=0ms").run(context -> assertThat(context).hasFailed()
                .getFailure().rootCause().isInstanceOfSatisfying(InvalidConfigurationPropertyValueException.class, e -> {
                    assertThat(e.getName()).isEqualTo("pathlock.replicas-timeout");
                    assertThat(e.getReason()).startsWith("replicasTimeout must be a number of milliseconds");
                }));
    }

    @Test
    void theApplicationsOwnHandleIsTheTemplates() {
        runner.withUserConfiguration(OwnHandle.class).run(context -> {
            assertThat(context).hasSingleBean(PathLocks.class);
            assertThat(context.getBean(PathLocks.class).note()).isEqualTo("own");
            assertThat(context.getBean(PathLockTemplate.class).project("x").note()).isEqualTo("own");
        });
    }

    @Test
    void theApplicationsOwnTemplateStays() {
        runner.withUserConfiguration(OwnTemplate.class).run(context ->
                assertThat(context.getBean(PathLockTemplate.class).keyPrefix()).isEqualTo("mine/"));
    }

    /** The whole starter in a Spring MVC application with a meter registry. */
    final WebApplicationContextRunner everything = new WebApplicationContextRunner()
            .withConfiguration(AutoConfigurations.of(DataRedisAutoConfiguration.class, PathLockAutoConfiguration.class,
                    PathLockMetricsAutoConfiguration.class, PathLockHealthContributorAutoConfiguration.class,
                    PathLockWebMvcAutoConfiguration.class))
            .withUserConfiguration(PathLockMetersTest.Registry.class)
            .withPropertyValues("spring.data.redis.host=127.0.0.1", "spring.data.redis.port=" + server.port());

    /** Every bean the starter can make. */
    static final List<Class<?>> STARTERS_BEANS = List.of(PathLocks.class, PathLockTemplate.class, PathLockMeters.class,
            ModuleCheck.class, PathLockHealthIndicator.class, BusyProblemDetails.class, PathLockProperties.class);

    @Test
    void pathlockEnabledFalseLeavesOutEveryBean() {
        everything.run(context -> STARTERS_BEANS.forEach(type -> assertThat(context).hasSingleBean(type)));
        everything.withPropertyValues("pathlock.enabled=false").run(context -> {
            assertThat(context).hasNotFailed();
            STARTERS_BEANS.forEach(type -> assertThat(context).doesNotHaveBean(type));
            assertThat(context).doesNotHaveBean(ClosingLifecycle.class);
        });
    }

    @Test
    void excludingTheAutoConfigurationTakesTheMetersHealthAndAdviceWithIt() {
        // As spring.autoconfigure.exclude=io.pathlock.spring.PathLockAutoConfiguration does, on
        // @EnableAutoConfiguration's own reading of the starter's imports file.
        new WebApplicationContextRunner()
                .withUserConfiguration(AllAutoConfiguration.class)
                .withPropertyValues("spring.data.redis.host=127.0.0.1", "spring.data.redis.port=" + server.port(),
                        "spring.autoconfigure.exclude=io.pathlock.spring.PathLockAutoConfiguration")
                .run(context -> {
                    assertThat(context).hasNotFailed().hasSingleBean(LettuceConnectionFactory.class);
                    STARTERS_BEANS.forEach(type -> assertThat(context).doesNotHaveBean(type));
                });
        // Without the exclusion, the same application has them all.
        new WebApplicationContextRunner()
                .withUserConfiguration(AllAutoConfiguration.class)
                .withPropertyValues("spring.data.redis.host=127.0.0.1", "spring.data.redis.port=" + server.port())
                .run(context -> STARTERS_BEANS.forEach(type -> assertThat(context).hasSingleBean(type)));
    }

    @Configuration(proxyBeanMethods = false)
    @EnableAutoConfiguration
    static class AllAutoConfiguration {
    }

    @Test
    void theApplicationsOwnHandleTakesTheDefaultsAndMetersAsTheReadmeShows() throws IOException {
        // OwnConfigured's bean method is the README's, as printed.
        String readme = Files.readString(Path.of("..", "README.md"));
        assertThat(readme).contains("PathLocks pathLocks(LettuceConnectionFactory factory, PathLockProperties properties,"
                + " PathLockMeters meters) {\n    RedisClient client = (RedisClient) factory.getRequiredNativeClient();\n"
                + "    return properties.applyTo(PathLocks.builder(client)\n"
                + "            .maxWaitingConnections(properties.getMaxWaitingConnections())\n"
                + "            .observer(meters)");

        everything.withUserConfiguration(OwnConfigured.class)
                .withPropertyValues("pathlock.ttl=7s", "pathlock.note=own-app", "pathlock.key-prefix=own:",
                        "pathlock.max-waiting-connections=2")
                .run(context -> {
                    assertThat(context).hasSingleBean(PathLocks.class).hasBean("pathLocksLifecycle")
                            .hasSingleBean(PathLockMeters.class).hasSingleBean(BusyProblemDetails.class);
                    PathLocks project = context.getBean(PathLockTemplate.class).project("configured");
                    assertThat(project.key()).isEqualTo("own:configured");
                    assertThat(project.ttl()).isEqualTo(Duration.ofSeconds(7));
                    assertThat(project.note()).isEqualTo("own-app");
                    assertThat(project.maxWaitingConnections()).isEqualTo(2);
                    try (Lease lease = project.upload("/f")) {
                        assertThat(lease.note()).isEqualTo("own-app");
                    }
                    assertThat(PathLockMetersTest.count(context.getBean(MeterRegistry.class), "upload", "granted"))
                            .isEqualTo(1);
                });
    }

    /** The README's handle of the application's own, with the starter's defaults and meters. */
    @Configuration(proxyBeanMethods = false)
    static class OwnConfigured {
        @Bean(destroyMethod = "close")
        PathLocks pathLocks(LettuceConnectionFactory factory, PathLockProperties properties, PathLockMeters meters) {
            RedisClient client = (RedisClient) factory.getRequiredNativeClient();
            return properties.applyTo(PathLocks.builder(client)
                    .maxWaitingConnections(properties.getMaxWaitingConnections())
                    .observer(meters)                                  // the starter's Micrometer meters
                    .build(properties.getKeyPrefix() + "default"));
        }
    }

    /** A handle of the application's own made from a URL, which nothing here uses: it never connects. */
    @Configuration(proxyBeanMethods = false)
    static class UrlHandle {
        @Bean(destroyMethod = "close")
        PathLocks urlLocks() {
            return PathLocks.of("redis://127.0.0.1:6379", "url:default");
        }
    }

    @Test
    void nothingWithoutAConnectionFactory() {
        new ApplicationContextRunner().withConfiguration(AutoConfigurations.of(PathLockAutoConfiguration.class))
                .run(context -> assertThat(context).doesNotHaveBean(PathLocks.class).doesNotHaveBean(PathLockTemplate.class));
    }

    @Test
    void theHandlesConnectionsCloseWithTheContext() {
        List<Object> before = server.command("CLIENT", "LIST");
        long open = ((String) before.get(0)).lines().count();
        runner.withPropertyValues("spring.data.redis.client-name=closing").run(context -> {
            try (Lease lease = context.getBean(PathLockTemplate.class).project("c").upload("/f")) {
                assertThat((String) server.command("CLIENT", "LIST").get(0)).contains("name=closing");
                assertThat(lease.isLost()).isFalse();
            }
        });
        // Every connection the context opened (the factory's and pathlock's) is gone with it.
        for (int i = 0; i < 100 && ((String) server.command("CLIENT", "LIST").get(0)).contains("name=closing"); i++) {
            sleep(20);
        }
        String after = (String) server.command("CLIENT", "LIST").get(0);
        assertThat(after).doesNotContain("name=closing");
        assertThat(after.lines().count()).isEqualTo(open);
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError(e);
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class OwnHandle {
        @Bean(destroyMethod = "close")
        PathLocks ownLocks(LettuceConnectionFactory factory) {
            return PathLocks.of((RedisClient) factory.getRequiredNativeClient(), "own:base").note("own");
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class OwnTemplate {
        @Bean
        PathLockTemplate ownTemplate(PathLocks locks) {
            return new PathLockTemplate(locks, "mine/");
        }
    }
}
