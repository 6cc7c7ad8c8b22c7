package io.pathlock;

import java.time.Duration;

/** The settings of one acquire in milliseconds, checked: a handle's defaults with a call's overrides. */
record Settings(long ttlMs, long waitMs, int replicas, long replicasTimeoutMs) {
    static final Settings DEFAULTS = new Settings(30_000, 0, 0, 1000);

    /** Milliseconds between renewals: a third of the TTL, so that two may fail before the lease ends. */
    long periodMs() {
        return Math.max(1, ttlMs / 3);
    }

    Settings with(AcquireOptions options) {
        return new Settings(
                options.ttl() == null ? ttlMs : ttlMs(options.ttl()),
                options.waitFor() == null ? waitMs : waitMs(options.waitFor()),
                options.replicas() == null ? replicas : replicas(options.replicas()),
                options.replicasTimeout() == null ? replicasTimeoutMs : replicasTimeoutMs(options.replicasTimeout()));
    }

    /**
     * A lease's TTL in whole milliseconds (a fraction of one is rounded up): at least 1 ms, the
     * smallest the server takes. Its upper bound is the server's {@code pathlock.max-ttl}, which the
     * client cannot know; the server refuses a longer one.
     */
    static long ttlMs(Duration ttl) {
        return atLeast("ttl", ttl, 1);
    }

    /** How long an acquire waits: 0 (fail at once when busy) or more. */
    static long waitMs(Duration wait) {
        return atLeast("wait", wait, 0);
    }

    /** WAIT's timeout: at least 1 ms, since {@code WAIT n 0} would block forever. */
    static long replicasTimeoutMs(Duration timeout) {
        return atLeast("replicasTimeout", timeout, 1);
    }

    static int replicas(int replicas) {
        if (replicas < 0) {
            throw new IllegalArgumentException("replicas must be a whole number of replicas, at least 0; got " + replicas);
        }
        return replicas;
    }

    private static long atLeast(String name, Duration value, long leastMs) {
        if (value == null) {
            throw new NullPointerException(name);
        }
        if (value.compareTo(Duration.ofMillis(leastMs)) < 0) {
            throw new IllegalArgumentException(name + " must be a number of milliseconds, at least " + leastMs
                    + "; got " + Paths.describe(value));
        }
        if (value.getSeconds() >= Integer.MAX_VALUE / 1000) {
            throw new IllegalArgumentException(name + " must be a number of milliseconds under " + Integer.MAX_VALUE
                    + "; got " + Paths.describe(value));
        }
        long ms = value.toMillis();
        return value.minusMillis(ms).isZero() ? ms : ms + 1;
    }
}
