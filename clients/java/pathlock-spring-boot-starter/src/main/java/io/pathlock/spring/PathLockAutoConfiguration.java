package io.pathlock.spring;

import io.lettuce.core.AbstractRedisClient;
import io.lettuce.core.RedisClient;
import io.lettuce.core.cluster.RedisClusterClient;
import io.pathlock.PathLockObserver;
import io.pathlock.PathLocks;
import java.util.List;
import java.util.function.Function;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.config.ConfigurableListableBeanFactory;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBooleanProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnSingleCandidate;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.context.properties.source.InvalidConfigurationPropertyValueException;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;

/**
 * {@link EnableAutoConfiguration Auto-configuration} of pathlock on the application's Spring Data
 * Redis setup: the {@link PathLocks} handle opens its connections on the Lettuce client of the
 * application's {@link LettuceConnectionFactory} (its native {@code RedisClient} or {@code
 * RedisClusterClient}, with its client resources), so whatever {@code spring.data.redis.*}
 * configured (a standalone server, Sentinel, a cluster with its topology refresh, TLS, an ACL
 * user, the database, timeouts) is pathlock's too. {@link PathLockTemplate} gives a handle per
 * project with the key prefix applied.
 *
 * <p>Every bean steps back when the application defines its own. With Jedis instead of Lettuce
 * there is no Lettuce client to reuse: the application then defines its own {@code PathLocks}
 * bean (for example {@code PathLocks.of("redis://...", key)}), which the template, the meters and
 * the Spring MVC problem details then go with; the {@code pathlock.*} defaults and the meters
 * reach that handle only as the application applies them ({@link
 * PathLockProperties#applyTo(PathLocks)}, {@code PathLocks.builder(client).observer(meters)}).
 * Every {@code PathLocks} bean, the application's own too, is closed when the context stops,
 * before a Lettuce connection factory shuts its client down. {@code pathlock.enabled=false} turns
 * the starter off.
 */
@AutoConfiguration(afterName = {
        // Spring Boot 4's, then Spring Boot 3's, auto-configuration of the connection factory.
        "org.springframework.boot.data.redis.autoconfigure.DataRedisAutoConfiguration",
        "org.springframework.boot.autoconfigure.data.redis.RedisAutoConfiguration" })
@ConditionalOnClass({ PathLocks.class, LettuceConnectionFactory.class })
@ConditionalOnBooleanProperty(name = "pathlock.enabled", matchIfMissing = true)
@EnableConfigurationProperties(PathLockProperties.class)
public class PathLockAutoConfiguration {
    /** The placeholder key of the handle every project's handle is derived from. */
    static final String BASE_KEY = "default";

    /** Creates the auto-configuration; Spring does. */
    public PathLockAutoConfiguration() {
    }

    /**
     * The starter's own handle, unless the application has one. Member classes are read before the
     * beans of the class that holds them, so the template and the lifecycle below find this handle.
     */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnMissingBean(PathLocks.class)
    @ConditionalOnSingleCandidate(LettuceConnectionFactory.class)
    static class HandleConfiguration {
        /**
         * The handle on the connection factory's Lettuce client, with the {@code pathlock.*}
         * defaults, reporting to every {@link PathLockObserver} bean (the Micrometer meters among
         * them). Its connections close when the application context stops, before the factory
         * shuts its client down ({@link PathLockAutoConfiguration#pathLocksLifecycle}); the destroy
         * method is for a context that never started.
         *
         * @param factory    the application's connection factory
         * @param properties the {@code pathlock.*} properties
         * @param observers  the observers
         * @return the handle
         */
        @Bean(destroyMethod = "close")
        PathLocks pathLocks(LettuceConnectionFactory factory, PathLockProperties properties,
                ObjectProvider<PathLockObserver> observers) {
            AbstractRedisClient client = nativeClient(factory);
            PathLockObserver observer = CompositeObserver.of(observers.orderedStream().toList());
            PathLocks.Builder builder;
            if (client instanceof RedisClusterClient cluster) {
                builder = PathLocks.builder(cluster);
            } else if (client instanceof RedisClient standalone) {
                builder = PathLocks.builder(standalone);
            } else {
                throw new IllegalStateException("pathlock needs a RedisClient or a RedisClusterClient, and the "
                        + "LettuceConnectionFactory has " + client);
            }
            PathLocks locks = property("pathlock.max-waiting-connections", properties.getMaxWaitingConnections(),
                    builder::maxWaitingConnections).observer(observer).build(properties.getKeyPrefix() + BASE_KEY);
            return configure(locks, properties);
        }
    }

    /**
     * Closes every {@link PathLocks} bean when the context stops, in a phase above the factory's:
     * the starter's handle, and an application's own, which its destroy method would close only
     * after the factory had shut its client down (Lettuce then warned "Connection is already
     * closed" for each connection). Leases still held then are not released behind the work that
     * holds them: they stop renewing and lapse at their TTL, each reported lost at its deadline
     * (see {@link PathLocks#close()}).
     *
     * @param beans   the context's beans, asked for its handles when it stops
     * @param factory the application's connection factory
     * @return the lifecycle
     */
    @Bean
    @ConditionalOnBean(PathLocks.class)
    @ConditionalOnSingleCandidate(LettuceConnectionFactory.class)
    ClosingLifecycle pathLocksLifecycle(ConfigurableListableBeanFactory beans, LettuceConnectionFactory factory) {
        return new ClosingLifecycle(new Handles(beans), factory);
    }

    /**
     * The context's {@link PathLocks} singletons that exist when it stops, closed together. A bean
     * not made by then (a lazy one never asked for) is left alone rather than made only to be
     * closed; closing a handle twice, or one derived from another, does nothing more.
     */
    record Handles(ConfigurableListableBeanFactory beans) implements AutoCloseable {
        @Override
        public void close() {
            RuntimeException failed = null;
            for (String name : beans.getBeanNamesForType(PathLocks.class, false, false)) {
                if (beans.containsSingleton(name) && beans.getSingleton(name) instanceof PathLocks locks) {
                    // Each handle is closed even if another's close failed: their connections are separate.
                    try {
                        locks.close();
                    } catch (RuntimeException e) {
                        if (failed == null) {
                            failed = e;
                        } else {
                            failed.addSuppressed(e);
                        }
                    }
                }
            }
            if (failed != null) {
                throw failed;
            }
        }

        @Override
        public String toString() {
            return "the context's PathLocks beans";
        }
    }

    /**
     * The application's defaults on a handle: the TTL, the wait, the replicas and their timeout,
     * the note, and whether operations note themselves.
     *
     * @param locks      a handle
     * @param properties the {@code pathlock.*} properties
     * @return the handle with those defaults
     */
    static PathLocks configure(PathLocks locks, PathLockProperties properties) {
        locks = property("pathlock.ttl", properties.getTtl(), locks::ttl);
        locks = property("pathlock.wait", properties.getWait(), locks::waitFor);
        locks = property("pathlock.replicas", properties.getReplicas(), locks::replicas);
        locks = property("pathlock.replicas-timeout", properties.getReplicasTimeout(), locks::replicasTimeout);
        return locks.note(properties.getNote()).operationNotes(properties.isOperationNotes());
    }

    /**
     * One {@code pathlock.*} value handed to the client, which checks it. A value it refuses stops
     * the application with the property named: Spring Boot's failure analysis then prints the
     * property, its value and where it was set, with the client's reason, rather than a bean's
     * stack trace that names a setter of the client.
     */
    private static <T, R> R property(String name, T value, Function<T, R> apply) {
        try {
            return apply.apply(value);
        } catch (IllegalArgumentException e) {
            throw new InvalidConfigurationPropertyValueException(name, value, e.getMessage());
        }
    }

    /**
     * The template the application's services take their projects' handles from.
     *
     * @param locks      the handle (the starter's, or the application's own)
     * @param properties the {@code pathlock.*} properties
     * @return the template
     */
    @Bean
    @ConditionalOnMissingBean
    @ConditionalOnSingleCandidate(PathLocks.class)
    public PathLockTemplate pathLockTemplate(PathLocks locks, PathLockProperties properties) {
        return new PathLockTemplate(locks, properties.getKeyPrefix());
    }

    /**
     * The factory's Lettuce client. A factory created with early startup off makes its client only
     * when it starts; it is started here then, as its first connection would.
     */
    static AbstractRedisClient nativeClient(LettuceConnectionFactory factory) {
        AbstractRedisClient client = factory.getNativeClient();
        if (client == null) {
            factory.start();
            client = factory.getRequiredNativeClient();
        }
        return client;
    }

    /** Several observers as one, each told in order. */
    record CompositeObserver(List<PathLockObserver> observers) implements PathLockObserver {
        static PathLockObserver of(List<PathLockObserver> observers) {
            return switch (observers.size()) {
                case 0 -> PathLockObserver.NONE;
                case 1 -> observers.get(0);
                default -> new CompositeObserver(List.copyOf(observers));
            };
        }

        @Override
        public void acquired(String key, String operation, Outcome outcome, java.time.Duration took) {
            observers.forEach(o -> o.acquired(key, operation, outcome, took));
        }

        @Override
        public void renewed(String key, boolean answered) {
            observers.forEach(o -> o.renewed(key, answered));
        }

        @Override
        public void leaseStarted(io.pathlock.Lease lease) {
            observers.forEach(o -> o.leaseStarted(lease));
        }

        @Override
        public void leaseEnded(io.pathlock.Lease lease, io.pathlock.LeaseLost lost) {
            observers.forEach(o -> o.leaseEnded(lease, lost));
        }
    }
}
