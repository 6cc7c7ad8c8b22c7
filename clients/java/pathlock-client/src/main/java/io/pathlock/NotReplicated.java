package io.pathlock;

/**
 * Fewer replicas than asked for acknowledged the grant in time ({@code WAIT}). The lease has been
 * released, because a failover could hand the same paths to someone else.
 */
public class NotReplicated extends PathLockException {
    private static final long serialVersionUID = 1L;

    /** The project key. */
    private final String key;
    /** How many replicas were asked for. */
    private final int replicas;
    /** How many acknowledged. */
    private final long acknowledged;

    /**
     * The refusal of a grant on {@code key}.
     *
     * @param key the project key
     * @param replicas how many replicas were asked for
     * @param acknowledged how many acknowledged in time
     */
    public NotReplicated(String key, int replicas, long acknowledged) {
        super("grant on " + Paths.quote(key) + " reached " + acknowledged + " of the " + replicas
                + " replicas asked for in time; it was released");
        this.key = key;
        this.replicas = replicas;
        this.acknowledged = acknowledged;
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
     * How many replicas were asked for.
     *
     * @return the count
     */
    public int replicas() {
        return replicas;
    }

    /**
     * How many acknowledged.
     *
     * @return the count
     */
    public long acknowledged() {
        return acknowledged;
    }
}
