package io.pathlock.example.drive;

import io.pathlock.Lease;
import io.pathlock.PathLocks;
import io.pathlock.spring.PathLockTemplate;
import org.springframework.stereotype.Service;

/**
 * The drive's operations, each under the locks of its one {@code PATHLOCK.ACQUIRE} (a move locks
 * its source and its target, a copy reads its source and writes its target, and so on), with a
 * note that tells whoever it blocks who is doing what. The storage gets the lease's fence with
 * every write. A {@code Busy} goes up to the starter, which answers 409 with the blockers.
 */
@Service
public class FolderService {
    private final PathLockTemplate locks;
    private final FencedStorage storage;

    public FolderService(PathLockTemplate locks, FencedStorage storage) {
        this.locks = locks;
        this.storage = storage;
    }

    private PathLocks as(String project, String user, String what) {
        return locks.project(project).note(user + ": " + what);
    }

    public long upload(String project, String user, String path, String content) {
        try (Lease lease = as(project, user, "upload " + path).upload(path)) {
            storage.put(project, path, content, lease.fence());
            return lease.fence();
        }
    }

    public int move(String project, String user, String path, String intoFolder) {
        try (Lease lease = as(project, user, "move " + path + " -> " + intoFolder).move(path, intoFolder)) {
            String target = lease.locks().get(1).path();
            lease.throwIfLost();
            return storage.move(project, path, target, lease.fence());
        }
    }

    public int copy(String project, String user, String path, String intoFolder) {
        try (Lease lease = as(project, user, "copy " + path + " -> " + intoFolder).copy(path, intoFolder)) {
            String target = lease.locks().get(1).path();
            return storage.copy(project, path, target, lease.fence());
        }
    }

    public int rename(String project, String user, String path, String newName) {
        try (Lease lease = as(project, user, "rename " + path + " -> " + newName).rename(path, newName)) {
            String target = lease.locks().get(1).path();
            lease.throwIfLost();
            return storage.move(project, path, target, lease.fence());
        }
    }

    public int delete(String project, String user, String path) {
        try (Lease lease = as(project, user, "delete " + path).delete(path)) {
            return storage.delete(project, path, lease.fence());
        }
    }
}
