package io.pathlock;

/**
 * The server could not be reached, or did not answer in time: a command's fate is unknown. An
 * acquire is retried with its token before this is thrown (and that token is released once the
 * server answers again, in case a grant happened); a renewal is retried while the lease's
 * deadline is ahead.
 */
public class ConnectionException extends PathLockException {
    private static final long serialVersionUID = 1L;

    /**
     * A failure saying what happened.
     *
     * @param message what happened
     */
    public ConnectionException(String message) {
        super(message);
    }

    /**
     * A failure saying what happened, and why.
     *
     * @param message what happened
     * @param cause the failure underneath
     */
    public ConnectionException(String message, Throwable cause) {
        super(message, cause);
    }
}
