package io.pathlock;

import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.cluster.ClusterClientOptions;
import io.lettuce.core.cluster.ClusterTopologyRefreshOptions;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.resource.ClientResources;
import io.lettuce.core.resource.DefaultClientResources;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
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
 * killed when the test JVM exits. REDIS_SERVER names another server binary. The clients are
 * Lettuce's, on one set of Netty resources for the whole run, shut down with their server.
 */
final class Servers {
    /** The Netty threads every test client shares, as an application shares one ClientResources. */
    static final ClientResources RESOURCES = DefaultClientResources.builder().ioThreadPoolSize(2).computationThreadPoolSize(2).build();
    static final String MODULE = System.getenv().getOrDefault("PATHLOCK_MODULE",
            Path.of("../../../target/release/libpathlock.so").toAbsolutePath().normalize().toString());
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

    /** True once the server on {@code port} answers PING (a plain socket: nothing of the client under test). */
    static boolean answers(int port) {
        try (Socket socket = new Socket()) {
            socket.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 500);
            socket.setSoTimeout(500);
            OutputStream out = socket.getOutputStream();
            out.write("PING\r\n".getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = socket.getInputStream();
            byte[] reply = in.readNBytes(7);
            return new String(reply, StandardCharsets.US_ASCII).equals("+PONG\r\n");
        } catch (IOException e) {
            return false;
        }
    }

    /** One redis-server. */
    static final class Server implements AutoCloseable {
        final int port;
        final Path dir;
        private final Process process;
        private final List<AutoCloseable> opened = new ArrayList<>();
        private Admin admin;

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
                    if (answers(port)) {
                        return server;
                    }
                    sleep(25);
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

        /** The URI of this server, for a client of the test's own. */
        RedisURI uri() {
            return RedisURI.create("127.0.0.1", port);
        }

        /** A Lettuce client for {@code uri}, shut down by {@link #stop()}. */
        RedisClient client(RedisURI uri) {
            RedisClient client = RedisClient.create(RESOURCES, uri);
            client.setOptions(ClientOptions.builder().build());
            track(client::shutdown);
            return client;
        }

        /**
         * A new handle family (its own connections) on a client of its own to this server; its
         * key is a placeholder, each test asks for its projects with {@code project(key)}.
         */
        PathLocks connect() {
            return connect(uri());
        }

        PathLocks connect(RedisURI uri) {
            PathLocks locks = PathLocks.of(client(uri), "unused");
            track(locks);
            return locks;
        }

        void track(AutoCloseable resource) {
            synchronized (opened) {
                opened.add(resource);
            }
        }

        /** The test's own connection to this server, for commands of its own. */
        Admin admin() {
            synchronized (opened) {
                if (admin == null) {
                    admin = new Admin(client(uri()));
                }
                return admin;
            }
        }

        /** One command on the test's admin connection to this server; the reply as {@link Admin#call} gives it. */
        List<Object> command(Object... words) {
            return admin().call(words);
        }

        String text(Object... words) {
            return admin().text(words);
        }

        long integer(Object... words) {
            return admin().integer(words);
        }

        String info(String section) {
            return text("INFO", section);
        }

        String log() {
            try {
                return Files.readString(dir.resolve("redis.log"));
            } catch (IOException e) {
                return "(no log: " + e + ")";
            }
        }

        boolean isAlive() {
            return process.isAlive();
        }

        /** Kills the server at once (SIGKILL), waits for it to be gone, and closes the test's clients. */
        void stop() {
            kill();
            List<AutoCloseable> open;
            synchronized (opened) {
                open = new ArrayList<>(opened);
                opened.clear();
                admin = null;
            }
            // Handles first, then the clients they were made on.
            for (int i = open.size() - 1; i >= 0; i--) {
                try {
                    open.get(i).close();
                } catch (Exception e) {
                    // Closing what failed with its server.
                }
            }
            try (Stream<Path> files = Files.walk(dir)) {
                files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            } catch (IOException e) {
                // A temporary directory left behind.
            }
        }

        /** Kills the server only; the test's clients stay open (and fail). */
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
                    String info = node.text("CLUSTER", "INFO");
                    List<Object> ranges = node.command("CLUSTER", "SLOTS");
                    boolean replicated = ranges.stream().allMatch(r -> Admin.array(r).size() == 3 + replicas);
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

        /**
         * A cluster client reaching the cluster through its first node, with the topology refresh
         * the README recommends (Lettuce 7's adaptive triggers, which are on by default, allowed
         * every 500 ms, and a periodic refresh), and a new handle family on it; both are closed
         * with the first node.
         */
        PathLocks connect() {
            RedisClusterClient client = RedisClusterClient.create(RESOURCES, nodes.get(0).uri());
            client.setOptions(ClusterClientOptions.builder()
                    .topologyRefreshOptions(ClusterTopologyRefreshOptions.builder()
                            .adaptiveRefreshTriggersTimeout(Duration.ofMillis(500))
                            .enablePeriodicRefresh(Duration.ofSeconds(1))
                            .build())
                    .build());
            nodes.get(0).track(client::shutdown);
            PathLocks locks = PathLocks.of(client, "unused");
            nodes.get(0).track(locks);
            return locks;
        }

        void stop() {
            nodes.forEach(Server::stop);
        }
    }
}
