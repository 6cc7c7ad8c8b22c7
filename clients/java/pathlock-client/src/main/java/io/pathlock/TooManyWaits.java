package io.pathlock;

/**
 * Every connection for waiting calls was in use for this call's whole budget, so nothing was sent
 * (the cap is {@code PathLocks.builder(client).maxWaitingConnections(n)}, 8 by default). An
 * acquire without replicas never throws it: when its wait runs out while it waits for a
 * connection, it asks once more without waiting, which grants it or throws {@link Busy}. A call
 * with replicas needs a connection of its own for {@code WAIT}, and throws this instead.
 */
public class TooManyWaits extends PathLockException {
    private static final long serialVersionUID = 1L;

    /** The cap on connections for waiting calls. */
    private final int maxWaitingConnections;
    /** How long the call waited for one. */
    private final long budgetMs;

    /**
     * The refusal of a call that waited {@code budgetMs} for one of {@code maxWaitingConnections}.
     *
     * @param maxWaitingConnections the cap on connections for waiting calls
     * @param budgetMs              how long the call waited for one
     */
    public TooManyWaits(int maxWaitingConnections, long budgetMs) {
        super("all " + maxWaitingConnections + " connections for waiting calls were in use for the call's whole budget of "
                + budgetMs + " ms, so nothing was sent; allow more with PathLocks.builder(client).maxWaitingConnections(n)");
        this.maxWaitingConnections = maxWaitingConnections;
        this.budgetMs = budgetMs;
    }

    /**
     * The cap on connections for waiting calls.
     *
     * @return the handle's {@code maxWaitingConnections}
     */
    public int maxWaitingConnections() {
        return maxWaitingConnections;
    }

    /**
     * How long the call waited for a connection.
     *
     * @return milliseconds
     */
    public long budgetMs() {
        return budgetMs;
    }
}
