package io.pathlock.example.drive;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.pathlock.Lease;
import io.pathlock.PathLocks;
import io.pathlock.TestServers;
import io.pathlock.spring.PathLockTemplate;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.core.ParameterizedTypeReference;
import org.springframework.http.HttpStatusCode;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.client.RestClient;

/**
 * The drive as it runs: the application on a real HTTP port against a real server with the
 * module, each endpoint called over HTTP; a 409 with the blockers while another operation holds a
 * folder; and the storage refusing a stale fence for one path while a lower fence on another path
 * goes through.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class DriveApplicationTest {
    static TestServers.Single server;

    @DynamicPropertySource
    static void redis(DynamicPropertyRegistry registry) {
        registry.add("spring.data.redis.port", () -> server().port());
    }

    static synchronized TestServers.Single server() {
        if (server == null) {
            server = TestServers.single();
        }
        return server;
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    @Value("${local.server.port}")
    int port;

    @Autowired
    PathLockTemplate locks;

    @Autowired
    FencedStorage storage;

    RestClient http;

    @BeforeEach
    void client() {
        // Non-2xx answers are returned, not thrown, so that each test reads the status itself.
        http = RestClient.builder().baseUrl("http://127.0.0.1:" + port)
                .defaultStatusHandler(HttpStatusCode::isError, (request, response) -> { })
                .build();
    }

    ResponseEntity<Map<String, Object>> call(String method, String uri, String body) {
        RestClient.RequestBodySpec spec = http.method(org.springframework.http.HttpMethod.valueOf(method)).uri(uri)
                .header("X-User", "alice");
        if (body != null) {
            spec = spec.contentType(MediaType.TEXT_PLAIN).body(body);
        }
        return spec.retrieve().toEntity(new ParameterizedTypeReference<>() { });
    }

    Map<String, Object> files(String project) {
        return call("GET", "/projects/" + project + "/files", null).getBody();
    }

    @Test
    void everyEndpoint() {
        assertThat(call("PUT", "/projects/1/files?path=/A/C/a.txt", "hello").getStatusCode().value()).isEqualTo(200);
        assertThat(call("PUT", "/projects/1/files?path=/A/C/D/b.txt", "world").getStatusCode().value()).isEqualTo(200);
        assertThat(call("POST", "/projects/1/move?path=/A/C&into=/B", null).getBody()).containsEntry("moved", 2);
        assertThat(files("1")).containsOnlyKeys("/B/C/a.txt", "/B/C/D/b.txt");
        assertThat(call("POST", "/projects/1/copy?path=/B/C&into=/E", null).getBody()).containsEntry("copied", 2);
        assertThat(call("POST", "/projects/1/rename?path=/E/C&name=C2", null).getBody()).containsEntry("renamed", 2);
        assertThat(files("1")).containsOnlyKeys("/B/C/a.txt", "/B/C/D/b.txt", "/E/C2/a.txt", "/E/C2/D/b.txt")
                .containsEntry("/E/C2/a.txt", "hello");
        assertThat(call("DELETE", "/projects/1/files?path=/B", null).getBody()).containsEntry("deleted", 2);
        assertThat(files("1")).containsOnlyKeys("/E/C2/a.txt", "/E/C2/D/b.txt");
        // Nothing stays locked once the calls are answered.
        assertThat(locks.project("1").locks()).isEmpty();
        // A request that cannot be right: a folder moved into its own subtree.
        ResponseEntity<Map<String, Object>> refused = call("POST", "/projects/1/move?path=/E&into=/E/C2", null);
        assertThat(refused.getStatusCode().value()).isEqualTo(400);
    }

    @Test
    void aFolderBeingMovedRefusesAnUploadNamingWhoIsMovingIt() {
        PathLocks bob = locks.project("2").note("bob: move /A -> /B");
        try (Lease move = bob.move("/A", "/B")) {
            ResponseEntity<Map<String, Object>> answer = call("PUT", "/projects/2/files?path=/A/C/new.txt", "x");
            assertThat(answer.getStatusCode().value()).isEqualTo(409);
            assertThat(answer.getHeaders().getContentType()).isEqualTo(MediaType.APPLICATION_PROBLEM_JSON);
            assertThat(answer.getBody()).containsEntry("detail", "/A is locked: WRITE /A (bob: move /A -> /B)");
            assertThat(answer.getBody().get("blockers")).isEqualTo(List.of(Map.of("path", "/A", "mode", "WRITE",
                    "note", "bob: move /A -> /B", "ttlMs", ((Map<?, ?>) ((List<?>) answer.getBody().get("blockers")).get(0)).get("ttlMs"))));
            // Beside the folder being moved, the drive works as usual.
            assertThat(call("PUT", "/projects/2/files?path=/AB/ok.txt", "y").getStatusCode().value()).isEqualTo(200);
            assertThat(move.isLost()).isFalse();
        }
        assertThat(call("PUT", "/projects/2/files?path=/A/C/new.txt", "x").getStatusCode().value()).isEqualTo(200);
    }

    @Test
    void aStaleFenceIsRefusedForItsPathWhileAnotherPathsLowerFenceGoesThrough() {
        PathLocks project = locks.project("3");
        // Writer 1 uploads /A/a.txt with its fence; later, writer 2 gets a higher fence for /B/b.txt.
        Lease writer1 = project.upload("/A/a.txt");
        try (Lease writer2 = project.upload("/B/b.txt")) {
            assertThat(writer2.fence()).isGreaterThan(writer1.fence());
            storage.put("3", "/B/b.txt", "two", writer2.fence());
            // Per path, writer 1's lower fence is not stale for its own path: the write goes through
            // (one global "highest fence seen" would refuse it).
            storage.put("3", "/A/a.txt", "one", writer1.fence());
        }
        // Writer 1 pauses past its lease (here: its locks are taken from it), and writer 3 writes
        // /A/a.txt under a newer fence.
        server.command("PATHLOCK.RELEASE", "drive:3", writer1.token());
        try (Lease writer3 = project.upload("/A/a.txt")) {
            storage.put("3", "/A/a.txt", "three", writer3.fence());
        }
        // Writer 1 wakes and writes again with its old fence: refused for /A/a.txt...
        assertThatThrownBy(() -> storage.put("3", "/A/a.txt", "one again", writer1.fence()))
                .isInstanceOf(StaleFence.class).hasMessageContaining("/A/a.txt");
        // ...while that same fence still goes through on a path nobody wrote since.
        storage.put("3", "/A/other.txt", "fine", writer1.fence());
        assertThat(storage.files("3")).containsEntry("/A/a.txt", "three").containsEntry("/A/other.txt", "fine");
        writer1.release();
    }

    @Test
    void aMoveChecksItsSourceAndTargetEachAgainstItsOwn() {
        PathLocks project = locks.project("4");
        long early;
        try (Lease lease = project.upload("/X/f.txt")) {
            early = lease.fence();
            storage.put("4", "/X/f.txt", "x", early);
            storage.put("4", "/S/g.txt", "s", early);
        }
        try (Lease late = project.upload("/T/f.txt")) {
            storage.put("4", "/T/f.txt", "t", late.fence());
        }
        // With the early fence, a move whose source and target saw nothing newer goes through,
        // although another path (/T/f.txt) has seen a higher fence.
        assertThat(storage.move("4", "/S", "/U/S", early)).isEqualTo(1);
        // A move onto /T/f.txt with it is refused by its target's own fence, and leaves the source.
        assertThatThrownBy(() -> storage.move("4", "/X/f.txt", "/T/f.txt", early))
                .isInstanceOf(StaleFence.class).hasMessageContaining("/T/f.txt");
        assertThat(storage.files("4")).containsEntry("/X/f.txt", "x").containsEntry("/T/f.txt", "t")
                .containsEntry("/U/S/g.txt", "s");
    }

    @Test
    void healthAndMeters() {
        ResponseEntity<Map<String, Object>> health = call("GET", "/actuator/health/pathlock", null);
        assertThat(health.getStatusCode().value()).isEqualTo(200);
        assertThat(health.getBody()).containsEntry("status", "UP");
        call("PUT", "/projects/5/files?path=/m.txt", "m");
        assertThat(call("GET", "/actuator/metrics/pathlock.acquire", null).getStatusCode().value()).isEqualTo(200);
    }
}
