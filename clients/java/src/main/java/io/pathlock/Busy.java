package io.pathlock;

import java.util.List;
import java.util.stream.Collectors;

/**
 * The locks an operation needs are held by someone else, or an earlier waiter is queued for them
 * (the server serves waiters first come, first served), or the wait for them ran out.
 *
 * <p>{@link #blockers()} are the live locks {@code PATHLOCK.CHECK} reported right after the
 * refusal, with their notes, so that an application can tell its user "{@code /A/C} is being moved
 * by Alice". It is empty when only a queued waiter stood in the way, or the holder let go in
 * between.
 */
public class Busy extends PathLockException {
    private static final long serialVersionUID = 1L;

    private final String key;
    private final transient List<LockRequest> requests;
    private final transient List<HeldLock> blockers;

    public Busy(String key, List<LockRequest> requests, List<HeldLock> blockers) {
        super(message(key, requests, blockers));
        this.key = key;
        this.requests = List.copyOf(requests);
        this.blockers = List.copyOf(blockers);
    }

    /** The project key. */
    public String key() {
        return key;
    }

    /** What was asked for. */
    public List<LockRequest> requests() {
        return requests;
    }

    /** The live locks in the way, as {@code PATHLOCK.CHECK} reports them. */
    public List<HeldLock> blockers() {
        return blockers;
    }

    private static String message(String key, List<LockRequest> requests, List<HeldLock> blockers) {
        String wanted = requests.stream().map(LockRequest::toString).collect(Collectors.joining(", "));
        if (blockers.isEmpty()) {
            return "busy: " + wanted + " in " + Paths.quote(key)
                    + " (an earlier request is waiting for it, or its holder has just let go)";
        }
        return "busy: " + wanted + " in " + Paths.quote(key) + " is blocked by "
                + blockers.stream().map(HeldLock::toString).collect(Collectors.joining("; "));
    }
}
