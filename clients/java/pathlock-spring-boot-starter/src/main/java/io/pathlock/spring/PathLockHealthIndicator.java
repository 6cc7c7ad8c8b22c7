package io.pathlock.spring;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.springframework.boot.health.contributor.AbstractHealthIndicator;
import org.springframework.boot.health.contributor.Health;

/**
 * Spring Boot Actuator's view of pathlock: UP when the module is loaded on every server that serves
 * the application's keys (the master of a standalone or Sentinel setup, every master of a
 * cluster), DOWN when one lacks it, or cannot be asked. The details give the module's version and
 * each server's:
 *
 * <pre>{@code
 * "pathlock": {"status": "UP", "details": {"version": 1, "nodes": {"10.0.0.5:6379": 1, "10.0.0.6:6379": 1}}}
 * "pathlock": {"status": "DOWN", "details": {"nodes": {"10.0.0.5:6379": "not loaded"}, "missing": ["10.0.0.5:6379"]}}
 * }</pre>
 */
public class PathLockHealthIndicator extends AbstractHealthIndicator {
    private final ModuleCheck check;

    /**
     * An indicator asking through {@code check}.
     *
     * @param check the module check
     */
    public PathLockHealthIndicator(ModuleCheck check) {
        super("pathlock health check failed");
        this.check = check;
    }

    @Override
    protected void doHealthCheck(Health.Builder builder) throws Exception {
        List<ModuleCheck.Node> nodes = check.check();
        Map<String, Object> versions = new LinkedHashMap<>();
        List<String> missing = nodes.stream().filter(n -> !n.loaded()).map(ModuleCheck.Node::node).toList();
        for (ModuleCheck.Node node : nodes) {
            versions.put(node.node(), node.loaded() ? node.version() : "not loaded");
        }
        List<Long> loaded = nodes.stream().filter(ModuleCheck.Node::loaded).map(ModuleCheck.Node::version).distinct().toList();
        if (loaded.size() == 1) {
            builder.withDetail("version", loaded.get(0));
        }
        builder.withDetail("nodes", versions);
        if (missing.isEmpty() && !nodes.isEmpty()) {
            builder.up();
        } else {
            builder.down().withDetail("missing", missing);
        }
    }
}
