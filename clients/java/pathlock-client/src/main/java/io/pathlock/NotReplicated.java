package io.pathlock;

/**
 * Fewer replicas than asked for acknowledged the grant in time ({@code WAIT}). The lease has been
 * released, because a failover could hand the same paths to someone else.
 */
public class NotReplicated extends PathLockException {
    private static final long serialVersionUID = 1L;

    private final String key;
    private final int replicas;
    private final long acknowledged;

    public NotReplicated(String key, int replicas, long acknowledged) {
        super("grant on " + Paths.quote(key) + " reached " + acknowledged + " of the " + replicas
                + " replicas asked for in time; it was released");
        this.key = key;
        this.replicas = replicas;
        this.acknowledged = acknowledged;
    }

    public String key() {
        return key;
    }

    /** How many replicas were asked for. */
    public int replicas() {
        return replicas;
    }

    /** How many acknowledged. */
    public long acknowledged() {
        return acknowledged;
    }
}
