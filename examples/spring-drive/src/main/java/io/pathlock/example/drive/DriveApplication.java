package io.pathlock.example.drive;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;

/**
 * A cloud drive's folder service: REST endpoints for upload, move, copy, rename and delete, each
 * under the locks of its operation (pathlock-spring-boot-starter), over a storage that refuses a
 * stale fence per path. Run it beside a server with the module (`make run`):
 *
 * <pre>
 * mvn -f examples/spring-drive spring-boot:run
 * curl -X PUT 'localhost:8080/projects/42/files?path=/A/C/a.txt' -H 'X-User: alice' -d hello
 * curl -X POST 'localhost:8080/projects/42/move?path=/A/C&amp;into=/B' -H 'X-User: alice'
 * </pre>
 */
@SpringBootApplication
public class DriveApplication {
    public static void main(String[] args) {
        SpringApplication.run(DriveApplication.class, args);
    }
}
