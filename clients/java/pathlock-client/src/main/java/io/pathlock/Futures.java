package io.pathlock;

import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

/** Waiting for the client's futures from the caller's thread, and taking them apart. */
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
     * The blocking API's wait: the future's value, or its exception rethrown as it is
     * (unchecked). Every future the client hands out ends by its own timeouts, so this waits
     * without one. An interrupt cancels the future (which gives up what it was doing: a wait on
     * the server leaves the server's queue) and throws {@link Interrupted}, the flag set again.
     */
    static <T> T await(CompletableFuture<T> future) {
        try {
            return future.get();
        } catch (InterruptedException e) {
            future.cancel(true);
            Thread.currentThread().interrupt();
            throw new Interrupted(e);
        } catch (CancellationException e) {
            throw e;
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

    /** A future that fails with the exception {@code call} throws, or is the one it returns. */
    static <T> CompletableFuture<T> guard(java.util.function.Supplier<CompletableFuture<T>> call) {
        try {
            return call.get();
        } catch (RuntimeException e) {
            return CompletableFuture.failedFuture(e);
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
