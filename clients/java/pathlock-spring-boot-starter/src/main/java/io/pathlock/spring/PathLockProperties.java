package io.pathlock.spring;

import io.pathlock.PathLocks;
import java.time.Duration;
import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * The {@code pathlock.*} properties: the defaults of every lease the application's handles take,
 * the key prefix of its projects, and the connections pathlock opens on the application's Lettuce
 * client. Each default is the client's own (see the client's README, Settings).
 */
@ConfigurationProperties("pathlock")
public class PathLockProperties {
    /** Whether the starter configures pathlock: false leaves out every bean of its own (the handle, the template, the meters, the health indicator, the Spring MVC problem details). */
    private boolean enabled = true;

    /** The length of a lease; the watchdog renews it every third of it. At least 1 ms. */
    private Duration ttl = Duration.ofSeconds(30);

    /** How long an acquire waits on the server for busy locks, first come first served; 0 refuses at once (Busy). */
    private Duration wait = Duration.ZERO;

    /** How many replicas must acknowledge a grant (WAIT) before it is handed out. */
    private int replicas = 0;

    /** How long to wait for those replicas' acknowledgements before NotReplicated. */
    private Duration replicasTimeout = Duration.ofSeconds(1);

    /** A note kept with every lock and shown to whoever it blocks; none (unset or blank): each lock's note names its operation. */
    private String note;

    /** Whether locks taken without a note get one naming their operation ("move /A/C -> /B"). */
    private boolean operationNotes = true;

    /** Put before a project's id to make its Redis key: PathLockTemplate.project("42") locks in "pathlock:42". */
    private String keyPrefix = "pathlock:";

    /** The most connections pathlock opens for calls that wait on the server, beside its one shared connection. */
    private int maxWaitingConnections = 8;

    private final Metrics metrics = new Metrics();

    private final Mvc mvc = new Mvc();

    /**
     * Whether the starter configures pathlock.
     *
     * @return whether it does
     */
    public boolean isEnabled() {
        return enabled;
    }

    /**
     * Sets whether the starter configures pathlock.
     *
     * @param enabled whether it does
     */
    public void setEnabled(boolean enabled) {
        this.enabled = enabled;
    }

    /**
     * These defaults on a handle of the application's own, as the starter's handle has them: the
     * TTL, the wait, the replicas and their timeout, the note, and whether operations note
     * themselves ({@code pathlock.max-waiting-connections} and the meters are the builder's:
     * {@code PathLocks.builder(client).maxWaitingConnections(n).observer(meters)}). A value the
     * client refuses throws Spring Boot's {@code InvalidConfigurationPropertyValueException},
     * naming the property.
     *
     * @param locks a handle
     * @return the handle with these defaults (handles are immutable: a new one)
     */
    public PathLocks applyTo(PathLocks locks) {
        return PathLockAutoConfiguration.configure(locks, this);
    }

    /**
     * The lease length.
     *
     * @return the TTL
     */
    public Duration getTtl() {
        return ttl;
    }

    /**
     * Sets the lease length.
     *
     * @param ttl the TTL
     */
    public void setTtl(Duration ttl) {
        this.ttl = ttl;
    }

    /**
     * How long an acquire waits.
     *
     * @return the wait
     */
    public Duration getWait() {
        return wait;
    }

    /**
     * Sets how long an acquire waits.
     *
     * @param wait the wait
     */
    public void setWait(Duration wait) {
        this.wait = wait;
    }

    /**
     * The replicas a grant waits for.
     *
     * @return the count
     */
    public int getReplicas() {
        return replicas;
    }

    /**
     * Sets the replicas a grant waits for.
     *
     * @param replicas the count
     */
    public void setReplicas(int replicas) {
        this.replicas = replicas;
    }

    /**
     * How long to wait for the replicas.
     *
     * @return the timeout
     */
    public Duration getReplicasTimeout() {
        return replicasTimeout;
    }

    /**
     * Sets how long to wait for the replicas.
     *
     * @param replicasTimeout the timeout
     */
    public void setReplicasTimeout(Duration replicasTimeout) {
        this.replicasTimeout = replicasTimeout;
    }

    /**
     * The note kept with every lock.
     *
     * @return the note, or null
     */
    public String getNote() {
        return note;
    }

    /**
     * Sets the note kept with every lock. A blank one ({@code pathlock.note=} in a properties file
     * binds the empty string) is none, so that each lock's note names its operation, as the
     * property's description says; {@code pathlock.operation-notes=false} is how to send no note at
     * all.
     *
     * @param note the note, or null or blank for none
     */
    public void setNote(String note) {
        this.note = note == null || note.isBlank() ? null : note;
    }

    /**
     * Whether locks without a note get their operation's.
     *
     * @return whether they do
     */
    public boolean isOperationNotes() {
        return operationNotes;
    }

    /**
     * Sets whether locks without a note get their operation's.
     *
     * @param operationNotes whether they do
     */
    public void setOperationNotes(boolean operationNotes) {
        this.operationNotes = operationNotes;
    }

    /**
     * The prefix of project keys.
     *
     * @return the prefix
     */
    public String getKeyPrefix() {
        return keyPrefix;
    }

    /**
     * Sets the prefix of project keys.
     *
     * @param keyPrefix the prefix
     */
    public void setKeyPrefix(String keyPrefix) {
        this.keyPrefix = keyPrefix;
    }

    /**
     * The cap on connections for waiting calls.
     *
     * @return the cap
     */
    public int getMaxWaitingConnections() {
        return maxWaitingConnections;
    }

    /**
     * Sets the cap on connections for waiting calls.
     *
     * @param maxWaitingConnections the cap
     */
    public void setMaxWaitingConnections(int maxWaitingConnections) {
        this.maxWaitingConnections = maxWaitingConnections;
    }

    /**
     * The Micrometer meters' settings.
     *
     * @return them
     */
    public Metrics getMetrics() {
        return metrics;
    }

    /**
     * The Spring MVC settings.
     *
     * @return them
     */
    public Mvc getMvc() {
        return mvc;
    }

    /** {@code pathlock.metrics.*}. */
    public static class Metrics {
        /** Whether pathlock's meters are registered when Micrometer and a MeterRegistry are there. */
        private boolean enabled = true;

        /**
         * Whether the meters are registered.
         *
         * @return whether they are
         */
        public boolean isEnabled() {
            return enabled;
        }

        /**
         * Sets whether the meters are registered.
         *
         * @param enabled whether they are
         */
        public void setEnabled(boolean enabled) {
            this.enabled = enabled;
        }
    }

    /** {@code pathlock.mvc.*}. */
    public static class Mvc {
        private final ProblemDetails problemdetails = new ProblemDetails();

        /**
         * The problem details' settings.
         *
         * @return them
         */
        public ProblemDetails getProblemdetails() {
            return problemdetails;
        }

        /** {@code pathlock.mvc.problemdetails.*}. */
        public static class ProblemDetails {
            /** Whether a Busy thrown by a Spring MVC handler is answered 409 Conflict with the blockers as RFC 9457 problem details. */
            private boolean enabled = true;

            /**
             * Whether Busy is answered as problem details.
             *
             * @return whether it is
             */
            public boolean isEnabled() {
                return enabled;
            }

            /**
             * Sets whether Busy is answered as problem details.
             *
             * @param enabled whether it is
             */
            public void setEnabled(boolean enabled) {
                this.enabled = enabled;
            }
        }
    }
}
