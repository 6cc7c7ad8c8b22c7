package io.pathlock.spring;

import io.pathlock.PathLocks;
import java.time.Duration;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBooleanProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnSingleCandidate;
import org.springframework.boot.health.autoconfigure.contributor.ConditionalOnEnabledHealthIndicator;
import org.springframework.boot.health.contributor.HealthIndicator;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;

/**
 * {@link EnableAutoConfiguration Auto-configuration} of {@link PathLockHealthIndicator} (Spring
 * Boot 4's health API, with Actuator), named {@code pathlock} in the health endpoint, when there is
 * a {@link PathLocks} handle (the starter's, or the application's own) and a Lettuce connection
 * factory to ask through; {@code management.health.pathlock.enabled=false} turns it off, as {@code
 * pathlock.enabled=false} and excluding {@link PathLockAutoConfiguration} do.
 */
@AutoConfiguration(after = PathLockAutoConfiguration.class)
@ConditionalOnClass({ HealthIndicator.class, ConditionalOnEnabledHealthIndicator.class, PathLocks.class,
        LettuceConnectionFactory.class })
@ConditionalOnBean(PathLocks.class)
@ConditionalOnBooleanProperty(name = "pathlock.enabled", matchIfMissing = true)
@ConditionalOnEnabledHealthIndicator("pathlock")
public class PathLockHealthContributorAutoConfiguration {
    /** How long a health check waits for the servers' answers. */
    static final Duration TIMEOUT = Duration.ofSeconds(5);

    /** Creates the auto-configuration; Spring does. */
    public PathLockHealthContributorAutoConfiguration() {
    }

    /**
     * The starter's check, unless the application has one, and what closes its connection in
     * time. Member classes are read before the beans of the class that holds them, so the
     * indicator below finds this check.
     */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnMissingBean(ModuleCheck.class)
    @ConditionalOnSingleCandidate(LettuceConnectionFactory.class)
    static class CheckConfiguration {
        /**
         * The check, on the connection factory's Lettuce client. Its connection closes when the
         * context stops, before the factory shuts its client down ({@link
         * #pathLockModuleCheckLifecycle}); the destroy method is for a context that never started.
         *
         * @param factory the application's connection factory
         * @return the check
         */
        @Bean(destroyMethod = "close")
        ModuleCheck pathLockModuleCheck(LettuceConnectionFactory factory) {
            return new ModuleCheck(PathLockAutoConfiguration.nativeClient(factory), describe(factory), TIMEOUT);
        }

        /**
         * Closes the check's connection when the context stops, in a phase above the factory's.
         *
         * @param pathLockModuleCheck the starter's check
         * @param factory             the application's connection factory
         * @return the lifecycle
         */
        @Bean
        ClosingLifecycle pathLockModuleCheckLifecycle(ModuleCheck pathLockModuleCheck, LettuceConnectionFactory factory) {
            return new ClosingLifecycle(pathLockModuleCheck, factory);
        }
    }

    /**
     * The indicator.
     *
     * @param check the module check
     * @return the indicator
     */
    @Bean
    @ConditionalOnBean(ModuleCheck.class)
    @ConditionalOnMissingBean(name = "pathlockHealthIndicator")
    public PathLockHealthIndicator pathlockHealthIndicator(ModuleCheck check) {
        return new PathLockHealthIndicator(check);
    }

    /** The server of a standalone or Sentinel setup, as the health details name it. */
    static String describe(LettuceConnectionFactory factory) {
        if (factory.isRedisSentinelAware() && factory.getSentinelConfiguration() != null) {
            return "sentinel master " + factory.getSentinelConfiguration().getMaster().getName();
        }
        RedisStandaloneConfiguration standalone = factory.getStandaloneConfiguration();
        return standalone.getHostName() + ":" + standalone.getPort();
    }
}
