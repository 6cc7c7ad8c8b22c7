package io.pathlock;

/** The project key holds a value of another type: it is not a pathlock project. {@link #reply()} is the server's {@code WRONGTYPE} text. */
public class WrongType extends ServerException {
    private static final long serialVersionUID = 1L;

    /** The project key. */
    private final String key;

    /**
     * The refusal of a command on {@code key}.
     *
     * @param key the key
     * @param reply the server's WRONGTYPE reply
     */
    public WrongType(String key, String reply) {
        super("key " + Paths.quote(key) + " is not a pathlock project: it holds another type of value (check the key name)", reply);
        this.key = key;
    }

    /**
     * The key.
     *
     * @return the key
     */
    public String key() {
        return key;
    }
}
