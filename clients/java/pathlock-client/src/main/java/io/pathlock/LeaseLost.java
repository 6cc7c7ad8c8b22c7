package io.pathlock;

/**
 * The lease is no longer held: work under it must stop, and its fence must not be used again.
 * Thrown by {@link Lease#throwIfLost()} and {@link Lease#lock}, and the value {@link Lease#lost()}
 * completes with and the listeners get.
 */
public class LeaseLost extends PathLockException {
    private static final long serialVersionUID = 1L;

    private final String key;
    private final String token;
    private final LostReason reason;

    public LeaseLost(String key, String token, LostReason reason) {
        super("lease " + token + " on " + Paths.quote(key) + " is lost: " + reason.description());
        this.key = key;
        this.token = token;
        this.reason = reason;
    }

    public String key() {
        return key;
    }

    public String token() {
        return token;
    }

    /** Why the lease was lost. */
    public LostReason reason() {
        return reason;
    }
}
