package io.pathlock.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.springframework.test.web.servlet.request.MockMvcRequestBuilders.get;
import static org.springframework.test.web.servlet.request.MockMvcRequestBuilders.post;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.content;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.header;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.jsonPath;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.status;

import io.pathlock.Busy;
import io.pathlock.Lease;
import io.pathlock.LockRequest;
import io.pathlock.ServerException;
import io.pathlock.TestServers;
import java.util.List;
import org.hamcrest.Matchers;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.boot.webmvc.test.autoconfigure.AutoConfigureMockMvc;
import org.springframework.context.annotation.Import;
import org.springframework.http.MediaType;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.test.web.servlet.MockMvc;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;

/**
 * A Spring MVC application on the starter (the whole auto-configuration, as @SpringBootTest makes
 * it), against a real server: Busy answered 409 with the blockers as problem details, with and
 * without blockers; the Actuator health and metrics endpoints show pathlock's.
 */
@SpringBootTest(properties = { "management.endpoint.health.show-details=always",
        "management.endpoints.web.exposure.include=health,metrics" })
@AutoConfigureMockMvc
class BusyProblemDetailsTest {
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

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(Uploads.class)
    static class App {
    }

    @RestController
    static class Uploads {
        private final PathLockTemplate locks;

        Uploads(PathLockTemplate locks) {
            this.locks = locks;
        }

        @PostMapping("/projects/{project}/upload")
        String upload(@PathVariable String project, @RequestParam String path) {
            try (Lease lease = locks.project(project).upload(path)) {
                return "uploaded " + path + " with fence " + lease.fence();
            }
        }

        @PostMapping("/projects/{project}/gone")
        String gone(@PathVariable String project) {
            // As the client throws it when the holder let go between the refusal and its CHECK.
            throw new Busy(locks.key(project), List.of(LockRequest.write("/A/f")), List.of());
        }

        @PostMapping("/projects/{project}/unread")
        String unread(@PathVariable String project) {
            // As the client throws it when its CHECK after the refusal failed.
            throw new Busy(locks.key(project), List.of(LockRequest.write("/A/f")), List.of(),
                    new ServerException("NOPERM User app has no permissions to run the 'pathlock.check' command"));
        }
    }

    @Autowired
    MockMvc mvc;

    @Autowired
    PathLockTemplate locks;

    @Test
    void busyIsAConflictNamingTheBlockersButNotTheirTokens() throws Exception {
        mvc.perform(post("/projects/mvc/upload").param("path", "/A/C/f.txt")).andExpect(status().isOk());
        try (Lease move = locks.project("mvc").note("alice: move /A/C -> /B").move("/A/C", "/B")) {
            mvc.perform(post("/projects/mvc/upload").param("path", "/A/C/f.txt"))
                    .andExpect(status().isConflict())
                    .andExpect(content().contentTypeCompatibleWith(MediaType.APPLICATION_PROBLEM_JSON))
                    .andExpect(jsonPath("$.type").value("urn:pathlock:busy"))
                    .andExpect(jsonPath("$.status").value(409))
                    .andExpect(jsonPath("$.instance").value("/projects/mvc/upload"))
                    .andExpect(jsonPath("$.detail").value("/A/C is locked: WRITE /A/C (alice: move /A/C -> /B)"))
                    .andExpect(jsonPath("$.requested[0].path").value("/A/C/f.txt"))
                    .andExpect(jsonPath("$.requested[0].mode").value("WRITE"))
                    .andExpect(jsonPath("$.blockers[0].path").value("/A/C"))
                    .andExpect(jsonPath("$.blockers[0].mode").value("WRITE"))
                    .andExpect(jsonPath("$.blockers[0].note").value("alice: move /A/C -> /B"))
                    .andExpect(jsonPath("$.blockers[0].ttlMs").isNumber())
                    .andExpect(jsonPath("$.blockers[0].token").doesNotExist())
                    .andExpect(content().string(Matchers.not(Matchers.containsString(move.token()))))
                    .andExpect(header().doesNotExist("Retry-After"));
        }
    }

    @Test
    void busyWithNobodyLeftSaysTryAgain() throws Exception {
        mvc.perform(post("/projects/mvc/gone"))
                .andExpect(status().isConflict())
                .andExpect(header().string("Retry-After", "1"))
                .andExpect(jsonPath("$.blockers").isEmpty())
                .andExpect(jsonPath("$.detail").value(Matchers.startsWith("nothing holds /A/f now")))
                .andExpect(jsonPath("$.detail").value(Matchers.endsWith("try again")));
    }

    @Test
    void busyWhoseBlockersCouldNotBeReadNeverSaysNothingHoldsThem() throws Exception {
        mvc.perform(post("/projects/mvc/unread"))
                .andExpect(status().isConflict())
                .andExpect(header().string("Retry-After", "1"))
                .andExpect(jsonPath("$.blockers").isEmpty())
                .andExpect(jsonPath("$.detail").value("the locks in the way of /A/f could not be read; try again"))
                // The server's error names the application's ACL user: it stays in the application's log.
                .andExpect(content().string(Matchers.not(Matchers.containsString("NOPERM"))));
    }

    @Test
    void actuatorShowsPathlocksHealthAndMeters() throws Exception {
        mvc.perform(get("/actuator/health/pathlock"))
                .andExpect(status().isOk())
                .andExpect(jsonPath("$.status").value("UP"))
                .andExpect(jsonPath("$.details.version").value(1));
        mvc.perform(post("/projects/meters/upload").param("path", "/f")).andExpect(status().isOk());
        mvc.perform(get("/actuator/metrics/pathlock.acquire").param("tag", "operation:upload"))
                .andExpect(status().isOk())
                .andExpect(jsonPath("$.availableTags[?(@.tag == 'outcome')].values[*]", Matchers.hasItem("granted")));
        mvc.perform(get("/actuator/metrics/pathlock.leases.held")).andExpect(status().isOk());
    }

    @Test
    void theAdviceIsOffByPropertyAndOutsideMvcAndWithoutAHandle() {
        WebApplicationContextRunner web = new WebApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(PathLockWebMvcAutoConfiguration.class))
                .withUserConfiguration(PathLockAutoConfigurationTest.UrlHandle.class);
        web.run(context -> assertThat(context).hasSingleBean(BusyProblemDetails.class));
        web.withPropertyValues("pathlock.mvc.problemdetails.enabled=false")
                .run(context -> assertThat(context).doesNotHaveBean(BusyProblemDetails.class));
        web.withPropertyValues("pathlock.enabled=false")
                .run(context -> assertThat(context).doesNotHaveBean(BusyProblemDetails.class));
        new WebApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(PathLockWebMvcAutoConfiguration.class))
                .run(context -> assertThat(context).doesNotHaveBean(BusyProblemDetails.class));
        new org.springframework.boot.test.context.runner.ApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(PathLockWebMvcAutoConfiguration.class))
                .withUserConfiguration(PathLockAutoConfigurationTest.UrlHandle.class)
                .run(context -> assertThat(context).doesNotHaveBean(BusyProblemDetails.class));
    }
}
