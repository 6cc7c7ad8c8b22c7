package io.pathlock.example.drive;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.springframework.stereotype.Component;

/**
 * The drive's files, in memory, as the storage a lock protects: every write carries the fence of
 * the lease it is made under, and the storage keeps, <b>for each path it writes</b>, the highest
 * fence seen for that path, refusing a write whose fence is lower than that path's
 * ({@link StaleFence}). Never one global "highest fence": unrelated operations hold unrelated
 * fences, and a lower fence on another path is no sign of a lost lease. An operation checks every
 * path it writes, each against its own: a move writes its source (removed) and its target
 * (created), and every file beneath them.
 *
 * <p>A real storage makes the check and the write one atomic step (a conditional update of the
 * row or object, a compare-and-set on its version); here one lock per project does.
 */
@Component
public class FencedStorage {
    private final Map<String, Project> projects = new HashMap<>();

    /** One project's files (path to content) and the highest fence seen per path. */
    private static final class Project {
        final TreeMap<String, String> files = new TreeMap<>();
        final Map<String, Long> fences = new HashMap<>();
    }

    private synchronized Project project(String id) {
        return projects.computeIfAbsent(id, key -> new Project());
    }

    /**
     * Writes a file.
     *
     * @throws StaleFence if the path has been written with a higher fence
     */
    public void put(String project, String path, String content, long fence) {
        Project p = project(project);
        synchronized (p) {
            check(p, List.of(path), fence);
            p.files.put(path, content);
        }
    }

    /** Moves a file or folder (and everything under it) to {@code target}. */
    public int move(String project, String path, String target, long fence) {
        Project p = project(project);
        synchronized (p) {
            Map<String, String> moved = under(p, path);
            List<String> written = new ArrayList<>(List.of(path, target));
            moved.keySet().forEach(from -> {
                written.add(from);
                written.add(target + from.substring(path.length()));
            });
            check(p, written, fence);
            moved.forEach((from, content) -> {
                p.files.remove(from);
                p.files.put(target + from.substring(path.length()), content);
            });
            return moved.size();
        }
    }

    /** Copies a file or folder (and everything under it) to {@code target}: only the target is written. */
    public int copy(String project, String path, String target, long fence) {
        Project p = project(project);
        synchronized (p) {
            Map<String, String> copied = under(p, path);
            List<String> written = new ArrayList<>(List.of(target));
            copied.keySet().forEach(from -> written.add(target + from.substring(path.length())));
            check(p, written, fence);
            copied.forEach((from, content) -> p.files.put(target + from.substring(path.length()), content));
            return copied.size();
        }
    }

    /** Deletes a file or folder and everything under it. */
    public int delete(String project, String path, long fence) {
        Project p = project(project);
        synchronized (p) {
            Map<String, String> gone = under(p, path);
            List<String> written = new ArrayList<>(List.of(path));
            written.addAll(gone.keySet());
            check(p, written, fence);
            gone.keySet().forEach(p.files::remove);
            return gone.size();
        }
    }

    /** The files of a project, path to content, in path order. */
    public Map<String, String> files(String project) {
        Project p = project(project);
        synchronized (p) {
            return new TreeMap<>(p.files);
        }
    }

    /** The highest fence seen for a path, 0 if none. */
    public long highestFence(String project, String path) {
        Project p = project(project);
        synchronized (p) {
            return p.fences.getOrDefault(path, 0L);
        }
    }

    /** The file at {@code path}, or the files under the folder {@code path} (segment by segment: /A/C is not under /A/CD). */
    private static Map<String, String> under(Project p, String path) {
        Map<String, String> found = new TreeMap<>();
        if (p.files.containsKey(path)) {
            found.put(path, p.files.get(path));
        }
        found.putAll(p.files.subMap(path + "/", true, path + "0", false));
        return found;
    }

    /**
     * Refuses the whole write if any path it writes has seen a higher fence, then records the fence
     * for each: all or nothing, so a refused operation leaves no path half written.
     */
    private static void check(Project p, List<String> paths, long fence) {
        for (String path : paths) {
            long highest = p.fences.getOrDefault(path, 0L);
            if (fence < highest) {
                throw new StaleFence(path, fence, highest);
            }
        }
        for (String path : paths) {
            p.fences.merge(path, fence, Math::max);
        }
    }
}
