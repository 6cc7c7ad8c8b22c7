package io.pathlock;

/** Why a lease was lost. */
public enum LostReason {
    /** A renewal answered 0, or fewer locks than the lease held: the locks expired, were released with the token, or the key was deleted. */
    GONE("a renewal answered 0, or fewer locks than the lease held: the locks expired, were released with the "
            + "lease's token, or the key was deleted"),
    /** No renewal succeeded before the deadline the client last knew, on the client's own clock. */
    EXPIRED("no renewal succeeded before the lease's deadline (the server was unreachable, paused or stopped)"),
    /** The key now holds a value of another type (a renewal answered WRONGTYPE). */
    REPLACED("the key no longer holds a pathlock project (a renewal answered WRONGTYPE)");

    private final String description;

    LostReason(String description) {
        this.description = description;
    }

    /**
     * A sentence saying what happened.
     *
     * @return the description
     */
    public String description() {
        return description;
    }
}
