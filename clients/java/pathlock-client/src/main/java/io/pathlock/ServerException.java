package io.pathlock;

/** The server answered an error (e.g. {@code ERR invalid path: ".." is not allowed}). */
public class ServerException extends PathLockException {
    private static final long serialVersionUID = 1L;

    private final String reply;

    public ServerException(String message, String reply) {
        super(message);
        this.reply = reply;
    }

    public ServerException(String reply) {
        this(reply, reply);
    }

    /** The server's error reply as it came, e.g. {@code ERR invalid TTL: ...}. */
    public String reply() {
        return reply;
    }
}
