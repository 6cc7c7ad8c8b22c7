package io.pathlock.spring;

import io.lettuce.core.AbstractRedisClient;
import io.lettuce.core.RedisClient;
import io.lettuce.core.api.StatefulConnection;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.async.BaseRedisAsyncCommands;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.NestedMultiOutput;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolKeyword;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Whether the pathlock module is loaded on the servers that serve the application's keys, asked
 * with {@code MODULE LIST}: the one server of a standalone or Sentinel setup (its master), or every
 * master that serves slots in a cluster. It asks on a connection of its own on the application's
 * Lettuce client, opened at the first check and kept for the next (closed by {@link #close()}, for
 * good).
 */
public class ModuleCheck implements AutoCloseable {
    /** The module's name in {@code MODULE LIST}. */
    public static final String MODULE = "pathlock";

    private static final ProtocolKeyword MODULE_LIST = new ProtocolKeyword() {
        private final byte[] bytes = "MODULE".getBytes(StandardCharsets.US_ASCII);

        @Override
        public byte[] getBytes() {
            return bytes;
        }

        @Override
        public String toString() {
            return "MODULE";
        }
    };

    private final AbstractRedisClient client;
    private final String server;
    private final Duration timeout;
    private StatefulConnection<String, String> connection;
    private boolean closed;

    /**
     * A check through {@code client}.
     *
     * @param client  the application's Lettuce client
     * @param server  how to name the server of a standalone or Sentinel client in the result
     * @param timeout the longest a check waits for the servers
     */
    public ModuleCheck(AbstractRedisClient client, String server, Duration timeout) {
        this.client = client;
        this.server = server;
        this.timeout = timeout;
    }

    /**
     * What one server said: its address, and the module's version there, or null when it is not loaded.
     *
     * @param node    the server
     * @param version the module's version, or null
     */
    public record Node(String node, Long version) {
        /**
         * Whether the module is loaded there.
         *
         * @return whether it is
         */
        public boolean loaded() {
            return version != null;
        }
    }

    /**
     * Asks every server that serves the application's keys.
     *
     * @return one entry per server, in the cluster's order of masters
     * @throws Exception when a server cannot be asked within the timeout
     */
    public List<Node> check() throws Exception {
        StatefulConnection<String, String> open = connection();
        List<String> names = new ArrayList<>();
        List<CompletableFuture<List<Object>>> replies = new ArrayList<>();
        if (open instanceof StatefulRedisClusterConnection<String, String> cluster) {
            for (RedisClusterNode master : cluster.getPartitions()) {
                if (!master.is(RedisClusterNode.NodeFlag.UPSTREAM) || master.getSlots().isEmpty()) {
                    continue;
                }
                names.add(master.getUri().getHost() + ":" + master.getUri().getPort());
                replies.add(cluster.getConnectionAsync(master.getNodeId()).toCompletableFuture()
                        .thenCompose(node -> list(node.async())));
            }
        } else {
            names.add(server);
            replies.add(list(((StatefulRedisConnection<String, String>) open).async()));
        }
        List<Node> nodes = new ArrayList<>(names.size());
        long until = System.nanoTime() + timeout.toNanos();
        for (int i = 0; i < names.size(); i++) {
            try {
                List<Object> reply = replies.get(i).get(Math.max(0, until - System.nanoTime()), TimeUnit.NANOSECONDS);
                nodes.add(new Node(names.get(i), version(reply)));
            } catch (ExecutionException e) {
                throw new IllegalStateException(names.get(i) + ": " + e.getCause().getMessage(), e.getCause());
            } catch (TimeoutException e) {
                throw new TimeoutException(names.get(i) + " did not answer MODULE LIST within " + timeout.toMillis() + " ms");
            }
        }
        return nodes;
    }

    private static CompletableFuture<List<Object>> list(BaseRedisAsyncCommands<String, String> commands) {
        return commands.dispatch(MODULE_LIST, new NestedMultiOutput<>(StringCodec.UTF8),
                new CommandArgs<>(StringCodec.UTF8).add("LIST")).toCompletableFuture();
    }

    /**
     * The module's version in a {@code MODULE LIST} reply, or null. Each entry is a list of name
     * and value pairs ({@code name pathlock ver 1 path ... args ...}), under RESP2 as an array and
     * under RESP3 as a map, which Lettuce's nested output gives as the same flat list.
     */
    static Long version(List<Object> reply) {
        for (Object entry : reply) {
            if (!(entry instanceof List<?> fields)) {
                continue;
            }
            Map<String, Object> pairs = new LinkedHashMap<>();
            for (int i = 0; i + 1 < fields.size(); i += 2) {
                pairs.put(String.valueOf(fields.get(i)), fields.get(i + 1));
            }
            if (MODULE.equals(String.valueOf(pairs.get("name")))) {
                Object version = pairs.get("ver");
                return version instanceof Number number ? number.longValue() : Long.valueOf(String.valueOf(version));
            }
        }
        return null;
    }

    private synchronized StatefulConnection<String, String> connection() {
        if (closed) {
            // The context is stopping: a connection opened now would outlive the client's shutdown.
            throw new IllegalStateException("the pathlock module check was closed");
        }
        if (connection == null || !connection.isOpen()) {
            if (client instanceof RedisClusterClient cluster) {
                connection = cluster.connect(StringCodec.UTF8);
            } else {
                connection = ((RedisClient) client).connect(StringCodec.UTF8);
            }
        }
        return connection;
    }

    /** Closes the check's connection, if it opened one; a check after that fails. Closing twice does nothing. */
    @Override
    public synchronized void close() {
        closed = true;
        if (connection != null) {
            // Closed before this returns: the application's client may be shut down next, and it
            // would close a connection still closing a second time, with a warning.
            connection.close();
            connection = null;
        }
    }
}
