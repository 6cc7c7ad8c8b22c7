package io.pathlock;

import io.netty.channel.EventLoopGroup;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.util.concurrent.DefaultThreadFactory;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * The client's own connections to Redis, on Netty and its Redis codec: to one server (a
 * standalone master, whose replicas {@code replicas} counts with {@code WAIT}), or to a Redis
 * Cluster, where each key's commands go to the master of its slot and {@code -MOVED}/{@code -ASK}
 * redirects are followed.
 *
 * <p>One {@code Connection} is meant to be shared by the whole application (e.g. a singleton
 * bean) and by any number of {@link PathLocks} handles; it is thread-safe. It multiplexes the
 * short commands of every handle and lease on one connection per node, and opens further
 * connections of its own for the calls that block on the server (a waiting acquire, {@code WAIT}
 * for replicas), keeping a few idle ones for the next. Close it when the application stops.
 *
 * <pre>{@code
 * Connection redis = Connection.standalone("127.0.0.1", 6379);
 * Connection cluster = Connection.builder().cluster("10.0.0.1", 7000).password("secret").open();
 * }</pre>
 */
public final class Connection implements AutoCloseable {
    /** Idle connections kept for later blocking calls; more are closed when they come back. */
    static final int MAX_IDLE_LANES = 4;

    /** What every node connection of a {@code Connection} is opened with. */
    record Config(EventLoopGroup group, long connectTimeoutMs, long commandTimeoutMs, String username,
            String password, int database, String clientName) {
    }

    private final Config config;
    private final Topology topology;
    private final Lane shared;
    private final ArrayDeque<Lane> idle = new ArrayDeque<>();
    private final Set<Lane> lent = ConcurrentHashMap.newKeySet();
    private final boolean ownsGroup;
    private volatile boolean closed;

    private Connection(Builder builder) {
        EventLoopGroup group = builder.group;
        this.ownsGroup = group == null;
        if (group == null) {
            group = new NioEventLoopGroup(builder.threads, new DefaultThreadFactory("pathlock-netty", true));
        }
        this.config = new Config(group, builder.connectTimeout.toMillis(), builder.commandTimeout.toMillis(),
                builder.username, builder.password, builder.database, builder.clientName);
        this.topology = new Topology(builder.cluster, builder.seeds);
        this.shared = new Lane(config, topology);
    }

    /** Opens a connection to one server (a standalone master) and checks that it answers. */
    public static Connection standalone(String host, int port) {
        return builder().address(host, port).open();
    }

    /** Opens a connection to a Redis Cluster through one of its nodes, and loads its slot map. */
    public static Connection cluster(String host, int port) {
        return builder().cluster(host, port).open();
    }

    public static Builder builder() {
        return new Builder();
    }

    /** True for a Redis Cluster connection. */
    public boolean isCluster() {
        return topology.isCluster();
    }

    /**
     * Closes every connection and stops the client's threads. Leases still held stop renewing and
     * are reported lost at their deadline; close the connection after releasing them.
     */
    @Override
    public void close() {
        List<Lane> lanes = new ArrayList<>();
        synchronized (idle) {
            if (closed) {
                return;
            }
            closed = true;
            lanes.addAll(idle);
            idle.clear();
        }
        lanes.addAll(lent);
        lanes.add(shared);
        lanes.forEach(Lane::close);
        if (ownsGroup) {
            config.group().shutdownGracefully(0, 1, TimeUnit.SECONDS).awaitUninterruptibly(2, TimeUnit.SECONDS);
        }
    }

    Config config() {
        return config;
    }

    Topology topology() {
        return topology;
    }

    /** The lane every handle and lease shares for short commands. */
    Lane shared() {
        return shared;
    }

    /** A lane for one blocking call; give it back with {@link #giveBack}. */
    Lane borrow() {
        Lane lane;
        synchronized (idle) {
            if (closed) {
                throw new ConnectionException("the connection is closed");
            }
            lane = idle.poll();
        }
        if (lane == null) {
            lane = new Lane(config, topology);
        }
        lent.add(lane);
        return lane;
    }

    /** Takes a borrowed lane back; {@code broken} closes it (e.g. a wait given up on the client's side). */
    void giveBack(Lane lane, boolean broken) {
        lent.remove(lane);
        synchronized (idle) {
            if (!broken && !closed && idle.size() < MAX_IDLE_LANES) {
                idle.push(lane);
                return;
            }
        }
        lane.close();
    }

    /** Sends one command about {@code key} on the shared lane and waits for its reply (error replies thrown). */
    Object keyCommand(String key, Object... words) {
        Lane.Routed routed = Futures.await(
                shared.execute(Reply.bytes(key), List.of(Reply.args(words)), config.commandTimeoutMs()),
                config.commandTimeoutMs() * 2);
        Object reply = routed.replies().get(0);
        if (reply instanceof Reply.Error error) {
            throw new ServerException(error.message());
        }
        return reply;
    }

    /** Sends one command without a key to any node (the server of a standalone connection). */
    Object command(Object... words) {
        List<Object> replies = Futures.await(
                shared.executeAt(topology.anyNode(), List.of(Reply.args(words)), config.commandTimeoutMs()),
                config.commandTimeoutMs() * 2);
        if (replies.get(0) instanceof Reply.Error error) {
            throw new ServerException(error.message());
        }
        return replies.get(0);
    }

    /** Opens {@link Connection}s. Every setting has a default but the server's address. */
    public static final class Builder {
        private final List<Address> seeds = new ArrayList<>();
        private boolean cluster;
        private String username;
        private String password;
        private int database;
        private String clientName;
        private Duration connectTimeout = Duration.ofSeconds(5);
        private Duration commandTimeout = Duration.ofSeconds(10);
        private EventLoopGroup group;
        private int threads = 2;

        private Builder() {
        }

        /** A standalone server (call once), or one more cluster node to start from. */
        public Builder address(String host, int port) {
            seeds.add(new Address(Objects.requireNonNull(host, "host"), port));
            return this;
        }

        /** A Redis Cluster, reached through this node (and any others given with {@link #address}). */
        public Builder cluster(String host, int port) {
            cluster = true;
            return address(host, port);
        }

        /** {@code AUTH password} on every connection. */
        public Builder password(String password) {
            this.password = password;
            return this;
        }

        /** {@code AUTH username password} (an ACL user) on every connection. */
        public Builder user(String username, String password) {
            this.username = username;
            this.password = password;
            return this;
        }

        /** {@code SELECT database} on every connection (standalone only; a cluster has database 0). */
        public Builder database(int database) {
            this.database = database;
            return this;
        }

        /** {@code CLIENT SETNAME name} on every connection, so that {@code CLIENT LIST} shows it. */
        public Builder clientName(String name) {
            this.clientName = name;
            return this;
        }

        /** How long opening a connection may take. Default 5 s. */
        public Builder connectTimeout(Duration timeout) {
            this.connectTimeout = positive("connectTimeout", timeout);
            return this;
        }

        /**
         * How long a command may go unanswered before its connection is closed and the command
         * failed (a waiting acquire gets its wait on top). Default 10 s. Leases do not depend on
         * it: a lease is lost at its deadline whether or not its renewal has answered.
         */
        public Builder commandTimeout(Duration timeout) {
            this.commandTimeout = positive("commandTimeout", timeout);
            return this;
        }

        /** Runs the connections on the application's Netty event loops instead of two threads of the client's own. */
        public Builder eventLoopGroup(EventLoopGroup group) {
            this.group = group;
            return this;
        }

        /** Opens it: connects (and loads a cluster's slot map), so that a wrong address fails here. */
        public Connection open() {
            if (seeds.isEmpty()) {
                throw new IllegalArgumentException("no server address given");
            }
            if (!cluster && seeds.size() > 1) {
                throw new IllegalArgumentException("a standalone connection has one address, not " + seeds);
            }
            if (cluster && database != 0) {
                throw new IllegalArgumentException("a Redis Cluster has only database 0");
            }
            Connection connection = new Connection(this);
            try {
                if (cluster) {
                    Futures.await(connection.topology.refresh(connection.shared), commandTimeout.toMillis() * 2);
                } else {
                    connection.command("PING");
                }
            } catch (RuntimeException e) {
                connection.close();
                throw e;
            }
            return connection;
        }

        private static Duration positive(String name, Duration value) {
            if (value == null || value.compareTo(Duration.ofMillis(1)) < 0) {
                throw new IllegalArgumentException(name + " must be at least 1 ms, not "
                        + (value == null ? "null" : Paths.describe(value)));
            }
            return value;
        }
    }
}
