package io.pathlock;

/** The server answered an error (e.g. {@code ERR invalid path: ".." is not allowed}). */
public class ServerException extends PathLockException {
    private static final long serialVersionUID = 1L;

    /** The server's error reply. */
    private final String reply;

    /**
     * An error reply, with a message of the client's.
     *
     * @param message what happened, in the client's words
     * @param reply the server's error reply
     */
    public ServerException(String message, String reply) {
        super(message);
        this.reply = reply;
    }

    /**
     * An error reply, as the message.
     *
     * @param reply the server's error reply
     */
    public ServerException(String reply) {
        this(reply, reply);
    }

    /**
     * The server's error reply as it came, e.g. {@code ERR invalid TTL: ...}.
     *
     * @return the reply
     */
    public String reply() {
        return reply;
    }
}
