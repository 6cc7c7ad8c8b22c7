package io.pathlock;

/**
 * A live lock as {@code PATHLOCK.LOCKS} and {@code PATHLOCK.CHECK} report it: the blockers of a
 * {@link Busy}, and the entries of {@link PathLocks#locks()}.
 *
 * @param path  the normalised path, e.g. {@code /A/C}; the root is {@code /}
 * @param mode  READ or WRITE
 * @param token the owner
 * @param ttlMs milliseconds left on the lock's lease when the server answered
 * @param fence the fence of the grant that took or last refreshed it
 * @param note  what the owner said it is doing (e.g. {@code move /A/C -> /B}), or null
 */
public record HeldLock(String path, Mode mode, String token, long ttlMs, long fence, String note) {
    @Override
    public String toString() {
        return mode + " " + path + " (owner " + token + (note == null ? "" : ", \"" + note + "\"")
                + ", " + ttlMs + " ms left, fence " + fence + ")";
    }
}
