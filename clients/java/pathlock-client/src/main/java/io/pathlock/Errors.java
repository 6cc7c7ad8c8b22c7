package io.pathlock;

import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisCommandTimeoutException;
import io.lettuce.core.RedisException;
import java.util.concurrent.CancellationException;
import java.util.concurrent.TimeoutException;

/** Lettuce's failures as the client's exceptions. */
final class Errors {
    private Errors() {
    }

    /**
     * What a failed command throws: an error reply a {@link ServerException} ({@link WrongType}
     * for {@code WRONGTYPE}, naming the key), no reply in time or a connection that failed a
     * {@link ConnectionException}; the client's own exceptions and cancellations as they are.
     */
    static RuntimeException of(Throwable failure, String key, Settings merged) {
        Throwable error = Futures.unwrap(failure);
        if (error instanceof PathLockException || error instanceof CancellationException
                || error instanceof IllegalArgumentException || error instanceof IllegalStateException) {
            return (RuntimeException) error;
        }
        if (error instanceof RedisCommandExecutionException reply) {
            return serverError(key, String.valueOf(reply.getMessage()), merged);
        }
        if (error instanceof RedisCommandTimeoutException || error instanceof TimeoutException) {
            // The client's own timeouts (CompletableFuture.orTimeout) carry no message.
            return new ConnectionException("no reply in time" + (error.getMessage() == null ? "" : " (" + error.getMessage() + ")")
                    + "; the command's fate is unknown", error);
        }
        if (error instanceof RedisException) {
            return new ConnectionException("the server could not be reached (" + error.getMessage()
                    + "); the command's fate is unknown", error);
        }
        if (error instanceof RuntimeException runtime) {
            return runtime;
        }
        return new PathLockException(error.toString(), error);
    }

    /**
     * An error reply as the exception to throw: WRONGTYPE names the key, a refused TTL gets its
     * units, and a server that does not know pathlock's commands is said to lack the module.
     */
    static ServerException serverError(String key, String reply, Settings merged) {
        if (reply.startsWith("WRONGTYPE")) {
            return new WrongType(key, reply);
        }
        // Redis and Valkey alike: ERR unknown command 'PATHLOCK.ACQUIRE', with args beginning with: ...
        if (reply.startsWith("ERR unknown command '") && reply.regionMatches(true, "ERR unknown command '".length(),
                "pathlock.", 0, "pathlock.".length())) {
            return new ServerException("the pathlock module is not loaded on the server that serves " + Paths.quote(key)
                    + " (" + reply.strip() + ")", reply);
        }
        if (merged != null && reply.startsWith("ERR invalid TTL")) {
            return new ServerException("the server refused a ttl of " + merged.ttlMs() + " ms (" + reply
                    + "; the server's pathlock.max-ttl, in ms, is the most it takes)", reply);
        }
        return new ServerException(reply);
    }

    /** True when the failure is an error reply, as opposed to no reply. */
    static boolean isReply(Throwable failure) {
        return Futures.unwrap(failure) instanceof RedisCommandExecutionException;
    }

    /** The error reply's text, or null when the failure is not one. */
    static String reply(Throwable failure) {
        return Futures.unwrap(failure) instanceof RedisCommandExecutionException e ? String.valueOf(e.getMessage()) : null;
    }
}
