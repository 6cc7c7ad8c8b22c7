package io.pathlock;

/** Why a lease was lost. */
public enum LostReason {
    /** A renewal answered 0, or fewer locks than the lease held: the locks expired, were released with the token, or the key was deleted. */
    GONE("a renewal answered 0, or fewer locks than the lease held: its locks expired, were released with its "
            + "token, or the key was deleted"),
    /** No renewal succeeded before the deadline the client last knew, on the client's own clock. */
    EXPIRED("no renewal succeeded before its deadline, counted on the client's own clock"),
    /** The key now holds a value of another type (a renewal answered WRONGTYPE). */
    REPLACED("the key now holds another type of value, and the locks went with the old one");

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
