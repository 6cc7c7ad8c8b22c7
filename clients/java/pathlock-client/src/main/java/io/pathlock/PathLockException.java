package io.pathlock;

/** Base class of every exception this client throws on its own (argument errors aside). */
public class PathLockException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /**
     * A failure saying what happened.
     *
     * @param message what happened
     */
    public PathLockException(String message) {
        super(message);
    }

    /**
     * A failure saying what happened, and why.
     *
     * @param message what happened
     * @param cause the failure underneath
     */
    public PathLockException(String message, Throwable cause) {
        super(message, cause);
    }
}
