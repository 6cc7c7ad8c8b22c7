package io.pathlock;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * Real redis-server processes with the pathlock module (PATHLOCK_MODULE, or the repository's
 * release build), on free loopback ports chosen at run time, each in a directory of its own, and
 * killed when the test JVM exits. REDIS_SERVER names another server binary.
 */
final class Servers {
    static final String MODULE = System.getenv().getOrDefault("PATHLOCK_MODULE",
            Path.of("../../target/release/libpathlock.so").toAbsolutePath().normalize().toString());
    static final String SERVER = System.getenv().getOrDefault("REDIS_SERVER", "redis-server");
    private static final Set<Process> RUNNING = ConcurrentHashMap.newKeySet();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> RUNNING.forEach(Process::destroyForcibly)));
    }

    private Servers() {
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError(e);
        }
    }

    static double nowMs() {
        return System.nanoTime() / 1e6;
    }

    private static boolean canBind(int port) {
        try (ServerSocket socket = new ServerSocket(port, 1, InetAddress.getLoopbackAddress())) {
            socket.setReuseAddress(true);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** A free loopback port whose cluster bus port (port + 10000) is free too. */
    static int freePort() {
        while (true) {
            int port = 20000 + ThreadLocalRandom.current().nextInt(30000);
            if (canBind(port) && canBind(port + 10000)) {
                return port;
            }
        }
    }

    /** One redis-server. */
    static final class Server implements AutoCloseable {
        final int port;
        final Path dir;
        private final Process process;
        private final List<Connection> connections = new ArrayList<>();
        private Connection admin;

        private Server(int port, Path dir, Process process) {
            this.port = port;
            this.dir = dir;
            this.process = process;
        }

        static Server start(String... extra) {
            for (int tries = 0; ; tries++) {
                int port = freePort();
                Path dir;
                try {
                    dir = Files.createTempDirectory("pathlock-java-");
                } catch (IOException e) {
                    throw new AssertionError(e);
                }
                List<String> args = new ArrayList<>(List.of(SERVER, "--port", String.valueOf(port), "--bind", "127.0.0.1",
                        "--dir", dir.toString(), "--save", "", "--appendonly", "no", "--logfile",
                        dir.resolve("redis.log").toString(), "--loadmodule", MODULE));
                args.addAll(List.of(extra));
                Process process;
                try {
                    process = new ProcessBuilder(args).redirectErrorStream(true)
                            .redirectOutput(dir.resolve("stdout.log").toFile()).start();
                } catch (IOException e) {
                    throw new AssertionError("could not start " + SERVER + ": " + e, e);
                }
                RUNNING.add(process);
                Server server = new Server(port, dir, process);
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (System.nanoTime() < until && process.isAlive()) {
                    try (Connection probe = Connection.builder().address("127.0.0.1", port)
                            .connectTimeout(java.time.Duration.ofMillis(500)).open()) {
                        return server;
                    } catch (ConnectionException e) {
                        sleep(25);
                    }
                }
                String log = server.log();
                server.stop();
                // Another process may have taken the port between the check and the start.
                if (tries < 3 && log.contains("Address already in use")) {
                    continue;
                }
                throw new AssertionError("redis-server on " + port + " did not start (module " + MODULE + "):\n" + log);
            }
        }

        String log() {
            try {
                return Files.readString(dir.resolve("redis.log"));
            } catch (IOException e) {
                return "(no log: " + e + ")";
            }
        }

        /** A connection of the client's own to this server, closed by {@link #stop()}. */
        Connection connect() {
            return connect(Connection.builder().address("127.0.0.1", port));
        }

        Connection connect(Connection.Builder builder) {
            Connection connection = builder.open();
            synchronized (connections) {
                connections.add(connection);
            }
            return connection;
        }

        /** One command, keyless, on the test's admin connection to this server. */
        Object command(Object... words) {
            synchronized (connections) {
                if (admin == null) {
                    admin = connect();
                }
            }
            return admin.command(words);
        }

        String info(String section) {
            return Reply.text(command("INFO", section));
        }

        boolean isAlive() {
            return process.isAlive();
        }

        /** Kills the server at once (SIGKILL), waits for it to be gone, and closes the test's connections. */
        void stop() {
            kill();
            List<Connection> open;
            synchronized (connections) {
                open = new ArrayList<>(connections);
                connections.clear();
                admin = null;
            }
            open.forEach(Connection::close);
            try (Stream<Path> files = Files.walk(dir)) {
                files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            } catch (IOException e) {
                // A temporary directory left behind.
            }
        }

        /** Kills the server only; the test's connections stay open (and fail). */
        void kill() {
            process.destroyForcibly();
            try {
                process.waitFor(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            RUNNING.remove(process);
        }

        @Override
        public void close() {
            stop();
        }
    }

    /** A master with one replica, connected and in sync. */
    record Replicated(Server master, Server replica) {
        static Replicated start() {
            Server master = Server.start();
            Server replica = Server.start("--replicaof", "127.0.0.1", String.valueOf(master.port));
            for (int i = 0; i < 200; i++) {
                String info = master.info("replication");
                if (info.contains("connected_slaves:1") && info.matches("(?s).*slave0:[^\\n]*state=online.*")) {
                    return new Replicated(master, replica);
                }
                sleep(50);
            }
            master.stop();
            replica.stop();
            throw new AssertionError("the replica did not come online");
        }
    }

    /** Three masters in one Redis Cluster, every slot assigned and agreed on. */
    record Cluster(List<Server> nodes) {
        static Cluster start() {
            return start(0, 5000);
        }

        /** Three masters with {@code replicas} replicas each; a node is failed after {@code nodeTimeoutMs}. */
        static Cluster start(int replicas, int nodeTimeoutMs) {
            List<Server> nodes = new ArrayList<>();
            for (int i = 0; i < 3 * (1 + replicas); i++) {
                nodes.add(Server.start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", String.valueOf(nodeTimeoutMs)));
            }
            List<String> create = new ArrayList<>(List.of("redis-cli", "--cluster", "create"));
            nodes.forEach(n -> create.add("127.0.0.1:" + n.port));
            create.addAll(List.of("--cluster-replicas", String.valueOf(replicas), "--cluster-yes"));
            try {
                Process cli = new ProcessBuilder(create).redirectErrorStream(true).start();
                String out = new String(cli.getInputStream().readAllBytes());
                if (cli.waitFor() != 0) {
                    throw new AssertionError("redis-cli --cluster create failed:\n" + out);
                }
            } catch (IOException e) {
                throw new AssertionError(e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError(e);
            }
            for (Server node : nodes) {
                for (int i = 0; ; i++) {
                    String info = Reply.text(node.command("CLUSTER", "INFO"));
                    List<Object> ranges = Reply.array(node.command("CLUSTER", "SLOTS"));
                    boolean replicated = ranges.stream().allMatch(r -> Reply.array(r).size() == 3 + replicas);
                    if (info.contains("cluster_state:ok") && ranges.size() == 3 && replicated) {
                        break;
                    }
                    if (i > 400) {
                        throw new AssertionError("cluster node " + node.port + " did not converge");
                    }
                    sleep(50);
                }
            }
            return new Cluster(nodes);
        }

        /** A cluster connection of the client's own, reaching the cluster through its first node. */
        Connection connect() {
            return nodes.get(0).connect(Connection.builder().cluster("127.0.0.1", nodes.get(0).port));
        }

        void stop() {
            nodes.forEach(Server::stop);
        }
    }
}
