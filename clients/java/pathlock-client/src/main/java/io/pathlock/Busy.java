package io.pathlock;

import java.util.List;
import java.util.Optional;
import java.util.stream.Collectors;

/**
 * The locks an operation needs are held by someone else, or an earlier waiter is queued for them
 * (the server serves waiters first come, first served), or the wait for them ran out.
 *
 * <p>{@link #blockers()} are the live locks {@code PATHLOCK.CHECK} reported right after the
 * refusal, with their notes, so that an application can tell its user "{@code /A/C} is being moved
 * by Alice". It is empty when nothing holds those paths any more by the time {@code CHECK} ran:
 * the holders let go in between, or only an earlier waiting request was in the way (it goes
 * first). The message then says so; an application retries, or tells its user to try again, and
 * never names a holder that is not there.
 *
 * <p>They are also empty when the {@code CHECK} itself failed (a connection error, an ACL user
 * without {@code PATHLOCK.CHECK}): the refusal stands, but who holds the paths is unknown. Then
 * {@link #checkError()} is that failure (also the {@linkplain #getCause() cause}), and the message
 * says that the locks in the way could not be read, never that nothing holds them.
 */
public class Busy extends PathLockException {
    private static final long serialVersionUID = 1L;

    /** The project key. */
    private final String key;
    private final transient List<LockRequest> requests;
    private final transient List<HeldLock> blockers;

    /**
     * A refusal of {@code requests} on {@code key}.
     *
     * @param key      the project key
     * @param requests what was asked for
     * @param blockers the live locks in the way (empty if none was left)
     */
    public Busy(String key, List<LockRequest> requests, List<HeldLock> blockers) {
        this(key, requests, blockers, null);
    }

    /**
     * A refusal of {@code requests} on {@code key}, whose blockers could not be read when {@code
     * checkError} is not null.
     *
     * @param key        the project key
     * @param requests   what was asked for
     * @param blockers   the live locks in the way (empty if none was left, or they could not be read)
     * @param checkError why {@code PATHLOCK.CHECK} failed, or null when it answered
     */
    public Busy(String key, List<LockRequest> requests, List<HeldLock> blockers, Throwable checkError) {
        // The cause is set even when null, so that it stays what checkError() reports.
        super(message(key, requests, blockers, checkError), checkError);
        this.key = key;
        this.requests = List.copyOf(requests);
        this.blockers = List.copyOf(blockers);
    }

    /**
     * The project key.
     *
     * @return the key
     */
    public String key() {
        return key;
    }

    /**
     * What was asked for.
     *
     * @return the requests
     */
    public List<LockRequest> requests() {
        return requests;
    }

    /**
     * The live locks in the way, as {@code PATHLOCK.CHECK} reports them; empty when none was left,
     * or when the check failed ({@link #checkError()}).
     *
     * @return the blockers
     */
    public List<HeldLock> blockers() {
        return blockers;
    }

    /**
     * Why the blockers could not be read: the failure of the {@code PATHLOCK.CHECK} that followed
     * the refusal (a {@link ConnectionException}, or a {@link ServerException} such as {@code
     * NOPERM}), empty when it answered. When present, {@link #blockers()} is empty because nobody
     * knows who holds the paths, not because nobody does.
     *
     * @return the check's failure, if it failed
     */
    public Optional<Throwable> checkError() {
        return Optional.ofNullable(getCause());
    }

    /**
     * The contract's text (clients/contract/contract.json's busy, blocker and busy_nobody), and
     * the Python client's when the check failed.
     */
    private static String message(String key, List<LockRequest> requests, List<HeldLock> blockers, Throwable checkError) {
        String wanted = requests.stream().map(LockRequest::toString).collect(Collectors.joining(", "));
        if (blockers.isEmpty() && checkError != null) {
            // Never "nothing holds these paths": the client does not know who does.
            return "busy: " + wanted + " in " + Paths.quote(key) + ": the locks in the way could not be read ("
                    + checkError.getClass().getSimpleName() + ": " + checkError.getMessage() + "); try again";
        }
        if (blockers.isEmpty()) {
            return "busy: " + wanted + " in " + Paths.quote(key) + ": nothing holds these paths now: the holders "
                    + "let go in between, or an earlier waiting request goes first; try again";
        }
        return "busy: " + wanted + " in " + Paths.quote(key) + ": " + blockers.stream()
                .map(b -> b.mode() + " " + b.path() + " held by " + b.token() + (b.note() == null ? "" : " (" + b.note() + ")")
                        + " for " + b.ttlMs() + " ms more")
                .collect(Collectors.joining("; "));
    }
}
