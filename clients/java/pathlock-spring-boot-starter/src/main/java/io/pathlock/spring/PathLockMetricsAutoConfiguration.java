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
 * MeterRegistry} (Spring Boot's Actuator makes one). It runs before {@link
 * PathLockAutoConfiguration}, whose handle reports to it; {@code pathlock.metrics.enabled=false}
 * turns it off.
 */
@AutoConfiguration(before = PathLockAutoConfiguration.class, afterName = {
        // Where Spring Boot 4, then Spring Boot 3, makes the application's registry.
        "org.springframework.boot.micrometer.metrics.autoconfigure.CompositeMeterRegistryAutoConfiguration",
        "org.springframework.boot.actuate.autoconfigure.metrics.CompositeMeterRegistryAutoConfiguration" })
@ConditionalOnClass({ MeterRegistry.class, PathLocks.class })
@ConditionalOnBean(MeterRegistry.class)
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
