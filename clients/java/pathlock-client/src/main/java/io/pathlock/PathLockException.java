package io.pathlock;

/** Base class of every exception this client throws on its own (argument errors aside). */
public class PathLockException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public PathLockException(String message) {
        super(message);
    }

    public PathLockException(String message, Throwable cause) {
        super(message, cause);
    }
}
