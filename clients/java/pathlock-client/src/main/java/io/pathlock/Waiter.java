package io.pathlock;

import java.util.List;

/**
 * A request queued on the server by an acquire that waits ({@code PATHLOCK.WAITERS}).
 *
 * @param token    the owner it would be granted to
 * @param requests what it asks for
 * @param waitedMs how long it has waited so far
 * @param leftMs   how long it will still wait
 * @param note     its note, or null
 */
public record Waiter(String token, List<LockRequest> requests, long waitedMs, long leftMs, String note) {
    /**
     * A waiter, its requests copied.
     *
     * @param token    the owner it would be granted to
     * @param requests what it asks for
     * @param waitedMs how long it has waited so far
     * @param leftMs   how long it will still wait
     * @param note     its note, or null
     */
    public Waiter {
        requests = List.copyOf(requests);
    }
}
