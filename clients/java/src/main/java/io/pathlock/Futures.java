package io.pathlock;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/** Waiting for the client's futures from the caller's thread. */
final class Futures {
    private Futures() {
    }

    /** The cause a future failed with, without the wrappers CompletableFuture adds. */
    static Throwable unwrap(Throwable error) {
        while ((error instanceof CompletionException || error instanceof ExecutionException)
                && error.getCause() != null) {
            error = error.getCause();
        }
        return error;
    }

    /**
     * The future's value, its own exception rethrown as it is (unchecked), a ConnectionException
     * after {@code timeoutMs}, and an {@link Interrupted} if the thread is interrupted (its flag set
     * again).
     */
    static <T> T await(CompletableFuture<T> future, long timeoutMs) {
        try {
            return future.get(timeoutMs, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new Interrupted(e);
        } catch (TimeoutException e) {
            throw new ConnectionException("no reply within " + timeoutMs + " ms", e);
        } catch (ExecutionException e) {
            Throwable cause = unwrap(e);
            if (cause instanceof RuntimeException runtime) {
                throw runtime;
            }
            if (cause instanceof Error error) {
                throw error;
            }
            throw new PathLockException(cause.toString(), cause);
        }
    }

    /** The calling thread was interrupted while it waited for the server. */
    static final class Interrupted extends PathLockException {
        private static final long serialVersionUID = 1L;

        Interrupted(InterruptedException cause) {
            super("interrupted while waiting for the server", cause);
        }
    }
}
