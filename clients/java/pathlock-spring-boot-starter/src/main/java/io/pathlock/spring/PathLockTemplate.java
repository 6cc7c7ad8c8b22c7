package io.pathlock.spring;

import io.pathlock.PathLocks;
import java.util.Objects;

/**
 * The application's way to the locks of each project: {@code template.project("42")} is the
 * {@link PathLocks} handle of the Redis key {@code <pathlock.key-prefix>42} ({@code pathlock:42} by
 * default), with the {@code pathlock.*} defaults, on the connections the starter opened on the
 * application's Lettuce client. A handle costs nothing: get one per request.
 *
 * <pre>{@code
 * @Service
 * class FolderService {
 *     private final PathLockTemplate locks;
 *
 *     FolderService(PathLockTemplate locks) {
 *         this.locks = locks;
 *     }
 *
 *     void move(String project, String path, String intoFolder) {
 *         try (Lease lease = locks.project(project).move(path, intoFolder)) {
 *             storage.move(path, intoFolder, lease.fence());
 *         }
 *     }
 * }
 * }</pre>
 */
public class PathLockTemplate {
    private final PathLocks locks;
    private final String keyPrefix;

    /**
     * A template over {@code locks}, whose connections and settings every project's handle shares.
     *
     * @param locks     the handle the starter made (or the application's own)
     * @param keyPrefix put before each project's id to make its key
     */
    public PathLockTemplate(PathLocks locks, String keyPrefix) {
        this.locks = Objects.requireNonNull(locks, "locks");
        this.keyPrefix = keyPrefix == null ? "" : keyPrefix;
    }

    /**
     * The handle of one project, whose locks live in the key {@link #key(String)}.
     *
     * @param projectId the project's id
     * @return its handle, with the application's defaults
     */
    public PathLocks project(String projectId) {
        return locks.project(key(projectId));
    }

    /**
     * The Redis key of a project: the key prefix, then its id.
     *
     * @param projectId the project's id
     * @return the key
     */
    public String key(String projectId) {
        Objects.requireNonNull(projectId, "projectId");
        if (projectId.isEmpty()) {
            throw new IllegalArgumentException("the project id must not be empty");
        }
        return keyPrefix + projectId;
    }

    /**
     * The prefix of project keys ({@code pathlock.key-prefix}).
     *
     * @return the prefix
     */
    public String keyPrefix() {
        return keyPrefix;
    }

    /**
     * The handle the template derives every project's from (its connections, its defaults).
     *
     * @return the handle
     */
    public PathLocks locks() {
        return locks;
    }
}
