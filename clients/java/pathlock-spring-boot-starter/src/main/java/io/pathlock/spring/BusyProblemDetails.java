package io.pathlock.spring;

import io.pathlock.Busy;
import io.pathlock.HeldLock;
import io.pathlock.LockRequest;
import jakarta.servlet.http.HttpServletRequest;
import java.net.URI;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.springframework.core.annotation.Order;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpStatus;
import org.springframework.http.ProblemDetail;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.ControllerAdvice;
import org.springframework.web.bind.annotation.ExceptionHandler;

/**
 * A {@link Busy} thrown by a Spring MVC handler, answered {@code 409 Conflict} with RFC 9457
 * problem details ({@code application/problem+json}) that name what is in the way:
 *
 * <pre>{@code
 * {"type": "urn:pathlock:busy", "title": "Locked", "status": 409,
 *  "detail": "/A/C is locked: WRITE /A/C (alice: move /A/C -> /B)",
 *  "instance": "/projects/42/move",
 *  "requested": [{"mode": "WRITE", "path": "/A/C/D/new.txt"}],
 *  "blockers": [{"path": "/A/C", "mode": "WRITE", "note": "alice: move /A/C -> /B", "ttlMs": 28731}]}
 * }</pre>
 *
 * When nothing holds the paths any more (the holders let go between the refusal and the client's
 * {@code CHECK}, or only an earlier waiting request was in the way), {@code blockers} is empty, the
 * detail says to try again, and {@code Retry-After: 1} says when. When the blockers could not be
 * read ({@link Busy#checkError()}), {@code blockers} is empty too, with {@code Retry-After: 1} and a
 * detail that says so, never that nothing holds the paths. Blockers' tokens are left out: a token
 * lets whoever has it release or renew the owner's locks.
 *
 * <p>Its order is 0, ahead of an application's advice without one (which would otherwise take a
 * {@code Busy} for any other exception); {@code pathlock.mvc.problemdetails.enabled=false} leaves
 * {@code Busy} to the application.
 */
@ControllerAdvice
@Order(0)
public class BusyProblemDetails {
    /** The problem type of a refusal. */
    public static final URI TYPE = URI.create("urn:pathlock:busy");

    /** Creates the advice; Spring does. */
    public BusyProblemDetails() {
    }

    /**
     * The answer to a refusal.
     *
     * @param busy    the refusal
     * @param request the request it refused
     * @return 409 with the problem details
     */
    @ExceptionHandler(Busy.class)
    public ResponseEntity<ProblemDetail> busy(Busy busy, HttpServletRequest request) {
        ProblemDetail problem = problem(busy);
        problem.setInstance(URI.create(request.getRequestURI()));
        ResponseEntity.BodyBuilder response = ResponseEntity.status(HttpStatus.CONFLICT);
        if (busy.blockers().isEmpty()) {
            response.header(HttpHeaders.RETRY_AFTER, "1");
        }
        return response.body(problem);
    }

    /**
     * The problem details of a refusal, without the request's own {@code instance}.
     *
     * @param busy the refusal
     * @return the problem details
     */
    public static ProblemDetail problem(Busy busy) {
        String wanted = busy.requests().stream().map(LockRequest::path).distinct().collect(Collectors.joining(", "));
        // A failed CHECK is not named to the HTTP client (its text may name the application's ACL
        // user or server); the Busy's own message, with it, is for the application's log.
        String detail = busy.blockers().isEmpty() && busy.checkError().isPresent()
                ? "the locks in the way of " + wanted + " could not be read; try again"
                : busy.blockers().isEmpty()
                ? "nothing holds " + wanted + " now: the holders let go in between, or an earlier waiting request "
                        + "goes first; try again"
                : busy.blockers().get(0).path() + " is locked: " + busy.blockers().stream()
                        .map(b -> b.mode() + " " + b.path() + (b.note() == null ? "" : " (" + b.note() + ")"))
                        .collect(Collectors.joining("; "));
        ProblemDetail problem = ProblemDetail.forStatusAndDetail(HttpStatus.CONFLICT, detail);
        problem.setType(TYPE);
        problem.setTitle("Locked");
        problem.setProperty("requested", busy.requests().stream().map(r -> Map.of("mode", r.mode().name(), "path", r.path())).toList());
        problem.setProperty("blockers", blockers(busy.blockers()));
        return problem;
    }

    private static List<Map<String, Object>> blockers(List<HeldLock> blockers) {
        return blockers.stream().map(b -> {
            Map<String, Object> entry = new LinkedHashMap<>();
            entry.put("path", b.path());
            entry.put("mode", b.mode().name());
            entry.put("note", b.note());
            entry.put("ttlMs", b.ttlMs());
            return entry;
        }).toList();
    }
}
