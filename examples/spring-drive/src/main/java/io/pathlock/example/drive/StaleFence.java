package io.pathlock.example.drive;

/**
 * A write whose fence is lower than the highest the storage has seen for that path: its writer's
 * lease was lost (it paused past its TTL, say) and someone else has written the path since.
 */
public class StaleFence extends RuntimeException {
    private final String path;
    private final long fence;
    private final long highest;

    StaleFence(String path, long fence, long highest) {
        super("stale fence " + fence + " for " + path + ": it has been written with fence " + highest);
        this.path = path;
        this.fence = fence;
        this.highest = highest;
    }

    public String path() {
        return path;
    }

    public long fence() {
        return fence;
    }

    public long highest() {
        return highest;
    }
}
