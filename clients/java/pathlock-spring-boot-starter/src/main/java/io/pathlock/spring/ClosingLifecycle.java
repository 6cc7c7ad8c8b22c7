package io.pathlock.spring;

import org.springframework.context.SmartLifecycle;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;

/**
 * Closes pathlock's connections on the connection factory's Lettuce client (every {@code
 * PathLocks} bean's, the application's own among them, and the health check's) when the
 * application context stops, while that client is still alive.
 *
 * <p>Spring Data Redis's {@link LettuceConnectionFactory} is a {@link SmartLifecycle} whose {@code
 * stop()} shuts its client down, and lifecycle beans stop before any bean is destroyed: a destroy
 * method found the client gone, and Lettuce logged "Connection is already closed" for each
 * connection. Spring stops the higher phases first, so this runs one phase above the factory's;
 * it also depends on the factory (its bean method takes it), which Spring stops after its
 * dependents within one phase, should the factory's phase leave no room above it. Web servers'
 * graceful shutdown stops in far higher phases, so requests have drained by then. The beans keep
 * their destroy methods for a context that fails before it starts, and closing twice does nothing.
 */
final class ClosingLifecycle implements SmartLifecycle {
    private final AutoCloseable resource;
    private final int phase;
    private boolean running;
    private boolean closed;

    /**
     * Closes {@code resource} when the context stops, before {@code factory} stops.
     *
     * @param resource what was opened on the factory's client
     * @param factory  the factory whose client it is
     */
    ClosingLifecycle(AutoCloseable resource, LettuceConnectionFactory factory) {
        this.resource = resource;
        this.phase = above(factory.getPhase());
    }

    /** The phase just above {@code phase}, or the highest one when there is none above. */
    static int above(int phase) {
        return phase == Integer.MAX_VALUE ? phase : phase + 1;
    }

    @Override
    public synchronized void start() {
        // What was closed stays closed: a context started again after a stop gets its factory a
        // new client, which a closed handle does not follow.
        running = !closed;
    }

    @Override
    public synchronized void stop() {
        running = false;
        if (!closed) {
            closed = true;
            try {
                resource.close();
            } catch (Exception e) {
                throw new IllegalStateException("closing " + resource + " failed", e);
            }
        }
    }

    @Override
    public synchronized boolean isRunning() {
        return running;
    }

    @Override
    public int getPhase() {
        return phase;
    }
}
