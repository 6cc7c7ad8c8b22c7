package io.pathlock;

import java.time.Duration;
import java.util.function.Consumer;

/**
 * Per-call overrides of a handle's defaults: {@code locks.move("/A/C", "/B",
 * AcquireOptions.with().ttl(Duration.ofMinutes(2)).note("Alice"))}. Immutable; each method returns
 * a copy with one more override. What is not set comes from the handle.
 */
public final class AcquireOptions {
    /** No override at all. */
    public static final AcquireOptions NONE = new AcquireOptions(null, null, null, null, null, null);

    private final Duration ttl;
    private final Duration waitFor;
    private final Integer replicas;
    private final Duration replicasTimeout;
    private final String note;
    private final Consumer<LeaseLost> onLost;

    private AcquireOptions(Duration ttl, Duration waitFor, Integer replicas, Duration replicasTimeout,
            String note, Consumer<LeaseLost> onLost) {
        this.ttl = ttl;
        this.waitFor = waitFor;
        this.replicas = replicas;
        this.replicasTimeout = replicasTimeout;
        this.note = note;
        this.onLost = onLost;
    }

    /**
     * Starts a set of overrides (the same as {@link #NONE}).
     *
     * @return no override yet
     */
    public static AcquireOptions with() {
        return NONE;
    }

    /**
     * The lease's length; the watchdog renews it every third of it. At least 1 ms; a fraction of a millisecond is rounded up.
     *
     * @param ttl the length
     * @return a copy with this override
     */
    public AcquireOptions ttl(Duration ttl) {
        Settings.ttlMs(ttl);
        return new AcquireOptions(ttl, waitFor, replicas, replicasTimeout, note, onLost);
    }

    /**
     * How long to wait for busy locks (first come, first served); 0 fails at once.
     *
     * @param wait 0 or more
     * @return a copy with this override
     */
    public AcquireOptions waitFor(Duration wait) {
        Settings.waitMs(wait);
        return new AcquireOptions(ttl, wait, replicas, replicasTimeout, note, onLost);
    }

    /**
     * How many replicas must acknowledge the grant ({@code WAIT}) before it is handed out.
     *
     * @param replicas 0 or more
     * @return a copy with this override
     */
    public AcquireOptions replicas(int replicas) {
        Settings.replicas(replicas);
        return new AcquireOptions(ttl, waitFor, replicas, replicasTimeout, note, onLost);
    }

    /**
     * How long to wait for those acknowledgements. At least 1 ms.
     *
     * @param timeout the timeout
     * @return a copy with this override
     */
    public AcquireOptions replicasTimeout(Duration timeout) {
        Settings.replicasTimeoutMs(timeout);
        return new AcquireOptions(ttl, waitFor, replicas, timeout, note, onLost);
    }

    /**
     * What the locks are for, shown to whoever they block ({@code PATHLOCK.ACQUIRE}'s {@code NOTE} in docs/commands.md).
     *
     * @param note the note
     * @return a copy with this override
     */
    public AcquireOptions note(String note) {
        return new AcquireOptions(ttl, waitFor, replicas, replicasTimeout, note, onLost);
    }

    /**
     * Called (on another thread) if the lease is lost, beside the handle's listener.
     *
     * @param listener the listener
     * @return a copy with this override
     */
    public AcquireOptions onLost(Consumer<LeaseLost> listener) {
        return new AcquireOptions(ttl, waitFor, replicas, replicasTimeout, note, listener);
    }

    Duration ttl() {
        return ttl;
    }

    Duration waitFor() {
        return waitFor;
    }

    Integer replicas() {
        return replicas;
    }

    Duration replicasTimeout() {
        return replicasTimeout;
    }

    String note() {
        return note;
    }

    Consumer<LeaseLost> onLost() {
        return onLost;
    }
}
