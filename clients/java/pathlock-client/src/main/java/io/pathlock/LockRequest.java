package io.pathlock;

import java.util.Objects;

/**
 * One {@code (mode, path)} pair of a request, e.g. {@code LockRequest.write("/A/C")}.
 *
 * <p>A path is split on {@code /}; empty segments and {@code .} are dropped, so {@code /A//C/} and
 * {@code A/C} are the same path. A path with no segment left ({@code ""}, {@code "/"}) names the
 * project root, whose lock covers the whole project: that is refused here, so that an empty string
 * from a form never locks everything by mistake, and asked for with {@link #wholeProject(Mode)}.
 */
public record LockRequest(Mode mode, String path) {
    /**
     * A pair as given; the empty path is refused (the whole project is {@link #wholeProject(Mode)}).
     *
     * @param mode READ or WRITE
     * @param path the path, as the module splits it
     */
    public LockRequest {
        Objects.requireNonNull(mode, "mode");
        Objects.requireNonNull(path, "path");
        if (path.isEmpty()) {
            // As in the other clients, the empty string is never taken for the root: it is
            // most often a missing value.
            throw new IllegalArgumentException("an empty path is refused; the whole project is "
                    + "LockRequest.wholeProject(Mode." + mode + ")");
        }
    }

    /**
     * {@code mode path}; refuses the project root (use {@link #wholeProject(Mode)} for it).
     *
     * @param mode READ or WRITE
     * @param path the path
     * @return the pair
     */
    public static LockRequest of(Mode mode, String path) {
        Objects.requireNonNull(path, "path");
        if (Paths.isRoot(path)) {
            throw new IllegalArgumentException("\"" + path + "\" names the project root, which would "
                    + mode + "-lock the whole project; ask for that with LockRequest.wholeProject(Mode."
                    + mode + ")");
        }
        return new LockRequest(mode, path);
    }

    /**
     * {@code READ path}: reading or downloading. Refuses the project root.
     *
     * @param path the path
     * @return the pair
     */
    public static LockRequest read(String path) {
        return of(Mode.READ, path);
    }

    /**
     * {@code WRITE path}: writing, creating, deleting. Refuses the project root.
     *
     * @param path the path
     * @return the pair
     */
    public static LockRequest write(String path) {
        return of(Mode.WRITE, path);
    }

    /**
     * {@code mode /}: a lock on the project root, which covers every path of the project.
     *
     * @param mode READ or WRITE
     * @return the pair
     */
    public static LockRequest wholeProject(Mode mode) {
        return new LockRequest(mode, "/");
    }

    @Override
    public String toString() {
        return mode + " " + path;
    }
}
