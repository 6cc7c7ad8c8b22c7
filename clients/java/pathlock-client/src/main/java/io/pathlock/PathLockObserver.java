package io.pathlock;

import java.time.Duration;

/**
 * What a handle family reports as it works, for metrics: each acquire with its outcome and time,
 * each renewal, and each lease from its grant to its end. Set once on the connections with {@link
 * PathLocks.Builder#observer(PathLockObserver)}; every handle derived from that one reports to it.
 * The Spring Boot starter turns these into Micrometer meters.
 *
 * <p>The methods are called on the threads that learn of the event (Lettuce's event loops, the
 * watchdog's thread, the caller's), so they must be quick and must not block, as a counter's
 * increment is. An exception thrown by one is logged and otherwise ignored.
 */
public interface PathLockObserver {
    /** How an acquire ended. */
    enum Outcome {
        /** Granted at once. */
        GRANTED,
        /** Granted after waiting: refused at first, then granted within the call's wait. */
        WAITED,
        /** Refused: {@link Busy}, at once or when the wait ran out. */
        BUSY,
        /** Failed otherwise: no answer, an error reply, {@link NotReplicated}, a call given up. */
        ERROR
    }

    /** An observer that does nothing. */
    PathLockObserver NONE = new PathLockObserver() {
    };

    /**
     * An acquire ended: an operation of a handle ({@code operation} is its name, {@code "move"},
     * {@code "upload"}, ..., or {@code "lock"}), or more locks under a lease ({@code "nested"}).
     * A request refused before anything was sent (an {@code IllegalArgumentException}) is not
     * reported.
     *
     * @param key       the project key
     * @param operation the operation's name
     * @param outcome   how it ended
     * @param took      from the call to its end
     */
    default void acquired(String key, String operation, Outcome outcome, Duration took) {
    }

    /**
     * A renewal was answered ({@code answered}: the server renewed the lease, or said it is gone,
     * which {@link #leaseEnded} then reports as a loss) or failed (no answer in time, an error
     * reply: the watchdog tries again until the lease's deadline).
     *
     * @param key      the project key
     * @param answered whether the server answered it
     */
    default void renewed(String key, boolean answered) {
    }

    /**
     * A lease was granted and handed out; {@link #leaseEnded} follows exactly once.
     *
     * @param lease the lease
     */
    default void leaseStarted(Lease lease) {
    }

    /**
     * A lease ended: released ({@code lost} is null), or lost first ({@code lost} says why).
     *
     * @param lease the lease
     * @param lost  the loss, or null for a normal release
     */
    default void leaseEnded(Lease lease, LeaseLost lost) {
    }
}
