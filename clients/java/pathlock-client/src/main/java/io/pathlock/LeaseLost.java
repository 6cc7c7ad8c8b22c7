package io.pathlock;

/**
 * The lease is no longer held: work under it must stop, and its fence must not be used again.
 * Thrown by {@link Lease#throwIfLost()} and {@link Lease#lock}, and the value {@link Lease#lost()}
 * completes with and the listeners get.
 */
public class LeaseLost extends PathLockException {
    private static final long serialVersionUID = 1L;

    /** The project key. */
    private final String key;
    /** The lease's owner. */
    private final String token;
    /** Why it was lost. */
    private final LostReason reason;

    /**
     * The loss of the lease of {@code token} on {@code key}.
     *
     * @param key the project key
     * @param token the lease's owner
     * @param reason why it was lost
     */
    public LeaseLost(String key, String token, LostReason reason) {
        super("lease " + token + " on " + Paths.quote(key) + " is lost: " + reason.description());
        this.key = key;
        this.token = token;
        this.reason = reason;
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
     * The lease's owner.
     *
     * @return the token
     */
    public String token() {
        return token;
    }

    /**
     * Why the lease was lost.
     *
     * @return the reason
     */
    public LostReason reason() {
        return reason;
    }
}
