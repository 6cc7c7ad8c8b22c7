package io.pathlock;

import io.netty.util.concurrent.FastThreadLocalThread;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Supplier;

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
     * True on a thread that must not block: one of Netty's event loops (Lettuce's among them, where
     * the asynchronous API's futures complete), which Netty marks as such. A blocking call there
     * waits for a reply that may have to be read by that very thread: it would hang until the
     * command timeout and then report a reply that never came, and stall every connection served by
     * that loop in the meantime, the application's own Redis commands included.
     */
    static boolean mustNotBlock() {
        return Thread.currentThread() instanceof FastThreadLocalThread thread && !thread.permitBlockingCalls();
    }

    /**
     * A call of the blocking API: refused on a thread that must not block (before anything is
     * sent), else {@code call}'s future awaited.
     */
    static <T> T blocking(Supplier<CompletableFuture<T>> call) {
        if (mustNotBlock()) {
            throw new IllegalStateException("a blocking pathlock call on " + Thread.currentThread().getName()
                    + ", a Netty event loop thread, which must not block (the reply it would wait for may need this"
                    + " very thread): use the asynchronous API (locks.async(), lease.lockAsync(...)), or run blocking"
                    + " work off Lettuce's threads (thenApplyAsync(..., executor))");
        }
        return await(call.get());
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

    /**
     * The future an acquire hands to the caller, completed by the client only through
     * {@link #settle}; any other completion (cancel, {@code orTimeout}, {@code completeOnTimeout},
     * {@code complete}, {@code completeExceptionally}, {@code obtrude*}) is the caller's and runs
     * {@code giveUp}. The caller's completions count alike because a Java caller bounds a future
     * with {@code orTimeout} (which completes this very instance) or completes it itself, and
     * expects any of them to end the call as {@code cancel} does; otherwise the wait would stay
     * queued on the server until its own end and its grant would be held until then.
     */
    static final class Handed<T> {
        private final CompletableFuture<T> future = new CompletableFuture<>();
        private final AtomicBoolean settling = new AtomicBoolean();

        /**
         * {@code giveUp} runs on the thread that completes the future, a JDK timer thread for
         * {@code orTimeout}, so it must not block.
         */
        Handed(Runnable giveUp) {
            future.whenComplete((value, error) -> {
                // Set before the client completes the future: a completion that comes first is
                // the caller's. One that comes between the two is seen by settle, which gives up
                // what the client was about to hand out.
                if (!settling.get()) {
                    giveUp.run();
                }
            });
        }

        CompletableFuture<T> future() {
            return future;
        }

        /**
         * The client's own completion: true if the caller gets {@code value}, false if the caller
         * had completed the future first, when whatever {@code value} holds is the client's to free.
         */
        boolean settle(T value) {
            settling.set(true);
            return future.complete(value);
        }

        /** The client's own failure; if the caller completed the future first, it is dropped. */
        void fail(Throwable error) {
            settling.set(true);
            future.completeExceptionally(error);
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
