package io.pathlock;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * The client's test servers ({@link Servers}: real redis-server processes with the module at
 * PATHLOCK_MODULE, on free loopback ports) for the tests of what is built on the client, in other
 * packages and modules (the Spring Boot starter, the example application), which get them through
 * this module's test-jar; and a server without the module, for what must notice its absence.
 */
public final class TestServers {
    private TestServers() {
    }

    /** A server with the module. */
    public static final class Single implements AutoCloseable {
        private final Servers.Server server;

        Single(Servers.Server server) {
            this.server = server;
        }

        /**
         * Its port.
         *
         * @return the port
         */
        public int port() {
            return server.port;
        }

        /**
         * One command on a connection of the test's own; the reply as the client's tests' Admin gives it.
         *
         * @param words the command
         * @return the reply
         */
        public List<Object> command(Object... words) {
            return server.command(words);
        }

        @Override
        public void close() {
            server.stop();
        }
    }

    /**
     * Starts a server with the module.
     *
     * @param extra more arguments, e.g. {@code --requirepass secret}
     * @return the server
     */
    public static Single single(String... extra) {
        return new Single(Servers.Server.start(extra));
    }

    /** Three masters in one cluster, every slot assigned. */
    public static final class Cluster implements AutoCloseable {
        private final Servers.Cluster cluster;

        Cluster(Servers.Cluster cluster) {
            this.cluster = cluster;
        }

        /**
         * The nodes as {@code spring.data.redis.cluster.nodes} takes them.
         *
         * @return {@code 127.0.0.1:port,...}
         */
        public String nodes() {
            return cluster.nodes().stream().map(n -> "127.0.0.1:" + n.port).collect(Collectors.joining(","));
        }

        /**
         * The ports of the masters.
         *
         * @return the ports
         */
        public List<Integer> ports() {
            return cluster.nodes().stream().map(n -> n.port).toList();
        }

        @Override
        public void close() {
            cluster.stop();
        }
    }

    /**
     * Starts a cluster of three masters with the module.
     *
     * @return the cluster
     */
    public static Cluster cluster() {
        return new Cluster(Servers.Cluster.start());
    }

    /** A redis-server without the module. */
    public static final class Bare implements AutoCloseable {
        private final int port;
        private final Process process;
        private final Path dir;

        Bare(int port, Process process, Path dir) {
            this.port = port;
            this.process = process;
            this.dir = dir;
        }

        /**
         * Its port.
         *
         * @return the port
         */
        public int port() {
            return port;
        }

        @Override
        public void close() {
            process.destroyForcibly();
            try {
                process.waitFor(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            try (Stream<Path> files = Files.walk(dir)) {
                files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            } catch (IOException e) {
                // A temporary directory left behind.
            }
        }
    }

    /**
     * Starts a redis-server (REDIS_SERVER) without the module, as Servers starts one with it.
     *
     * @return the server
     */
    public static Bare bare() {
        for (int tries = 0; ; tries++) {
            int port = Servers.freePort();
            Path dir;
            Process process;
            try {
                dir = Files.createTempDirectory("pathlock-spring-");
                List<String> args = new ArrayList<>(List.of(Servers.SERVER, "--port", String.valueOf(port), "--bind",
                        "127.0.0.1", "--dir", dir.toString(), "--save", "", "--appendonly", "no", "--logfile",
                        dir.resolve("redis.log").toString()));
                process = new ProcessBuilder(args).redirectErrorStream(true)
                        .redirectOutput(dir.resolve("stdout.log").toFile()).start();
            } catch (IOException e) {
                throw new AssertionError("could not start " + Servers.SERVER + ": " + e, e);
            }
            Bare bare = new Bare(port, process, dir);
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (System.nanoTime() < until && process.isAlive()) {
                if (Servers.answers(port)) {
                    return bare;
                }
                Servers.sleep(25);
            }
            bare.close();
            if (tries >= 3) {
                throw new AssertionError("redis-server without the module did not start on " + port);
            }
        }
    }
}
