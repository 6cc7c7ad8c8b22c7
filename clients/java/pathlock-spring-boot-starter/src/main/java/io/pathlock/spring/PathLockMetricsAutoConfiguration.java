package io.pathlock.spring;

import io.micrometer.core.instrument.MeterRegistry;
import io.pathlock.PathLocks;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBooleanProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.context.annotation.Bean;

/**
 * {@link EnableAutoConfiguration Auto-configuration} of pathlock's Micrometer meters ({@link
 * PathLockMeters}), when Micrometer is on the classpath and the application has a {@link
 * MeterRegistry} (Spring Boot's Actuator makes one) and a {@link PathLocks} handle (the starter's,
 * or the application's own). It runs after {@link PathLockAutoConfiguration}, so that it goes when
 * that one is excluded or turned off ({@code pathlock.enabled=false}); the starter's handle still
 * reports to the meters, as it looks for its observers only when it is made, after every bean is
 * defined. An application's own handle reports to them when it is built with {@code
 * .observer(pathLockMeters)}. {@code pathlock.metrics.enabled=false} turns it off.
 */
@AutoConfiguration(after = PathLockAutoConfiguration.class, afterName = {
        // Where Spring Boot 4, then Spring Boot 3, makes the application's registry.
        "org.springframework.boot.micrometer.metrics.autoconfigure.CompositeMeterRegistryAutoConfiguration",
        "org.springframework.boot.actuate.autoconfigure.metrics.CompositeMeterRegistryAutoConfiguration" })
@ConditionalOnClass({ MeterRegistry.class, PathLocks.class })
@ConditionalOnBean({ MeterRegistry.class, PathLocks.class })
@ConditionalOnBooleanProperty(name = "pathlock.enabled", matchIfMissing = true)
@ConditionalOnBooleanProperty(name = "pathlock.metrics.enabled", matchIfMissing = true)
public class PathLockMetricsAutoConfiguration {
    /** Creates the auto-configuration; Spring does. */
    public PathLockMetricsAutoConfiguration() {
    }

    /**
     * The meters, in the application's registry.
     *
     * @param registry the registry
     * @return the observer that feeds them
     */
    @Bean
    @ConditionalOnMissingBean
    public PathLockMeters pathLockMeters(MeterRegistry registry) {
        return new PathLockMeters(registry);
    }
}
