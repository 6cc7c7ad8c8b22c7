package io.pathlock.example.drive;

import io.pathlock.LeaseLost;
import java.util.Map;
import org.springframework.http.HttpStatus;
import org.springframework.http.ProblemDetail;
import org.springframework.web.bind.annotation.DeleteMapping;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.PutMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;

/**
 * The drive's REST endpoints. {@code X-User} names the user in the locks' notes. A refusal because
 * another operation holds the paths is the starter's 409 with the blockers; the drive adds its own
 * answers for a stale fence, a lost lease and a request that cannot be right.
 */
@RestController
public class DriveController {
    private final FolderService folders;
    private final FencedStorage storage;

    public DriveController(FolderService folders, FencedStorage storage) {
        this.folders = folders;
        this.storage = storage;
    }

    @PutMapping("/projects/{project}/files")
    public Map<String, Object> upload(@PathVariable String project, @RequestParam String path,
            @RequestHeader(name = "X-User", defaultValue = "anonymous") String user, @RequestBody String content) {
        return Map.of("uploaded", path, "fence", folders.upload(project, user, path, content));
    }

    @PostMapping("/projects/{project}/move")
    public Map<String, Object> move(@PathVariable String project, @RequestParam String path, @RequestParam String into,
            @RequestHeader(name = "X-User", defaultValue = "anonymous") String user) {
        return Map.of("moved", folders.move(project, user, path, into));
    }

    @PostMapping("/projects/{project}/copy")
    public Map<String, Object> copy(@PathVariable String project, @RequestParam String path, @RequestParam String into,
            @RequestHeader(name = "X-User", defaultValue = "anonymous") String user) {
        return Map.of("copied", folders.copy(project, user, path, into));
    }

    @PostMapping("/projects/{project}/rename")
    public Map<String, Object> rename(@PathVariable String project, @RequestParam String path, @RequestParam String name,
            @RequestHeader(name = "X-User", defaultValue = "anonymous") String user) {
        return Map.of("renamed", folders.rename(project, user, path, name));
    }

    @DeleteMapping("/projects/{project}/files")
    public Map<String, Object> delete(@PathVariable String project, @RequestParam String path,
            @RequestHeader(name = "X-User", defaultValue = "anonymous") String user) {
        return Map.of("deleted", folders.delete(project, user, path));
    }

    @GetMapping("/projects/{project}/files")
    public Map<String, String> files(@PathVariable String project) {
        return storage.files(project);
    }

    @ExceptionHandler(StaleFence.class)
    ProblemDetail stale(StaleFence stale) {
        ProblemDetail problem = ProblemDetail.forStatusAndDetail(HttpStatus.CONFLICT, stale.getMessage());
        problem.setTitle("Stale fence");
        problem.setProperty("path", stale.path());
        return problem;
    }

    @ExceptionHandler(LeaseLost.class)
    ProblemDetail lost(LeaseLost lost) {
        return ProblemDetail.forStatusAndDetail(HttpStatus.SERVICE_UNAVAILABLE,
                "the operation lost its locks before it was done (" + lost.reason() + "): try again");
    }

    @ExceptionHandler(IllegalArgumentException.class)
    ProblemDetail refused(IllegalArgumentException refused) {
        return ProblemDetail.forStatusAndDetail(HttpStatus.BAD_REQUEST, refused.getMessage());
    }
}
