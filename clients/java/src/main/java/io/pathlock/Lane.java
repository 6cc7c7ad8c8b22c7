package io.pathlock;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * One logical client: a connection to each node it has talked to, and the routing of a key's
 * commands to its node, following cluster redirects. A {@link Connection} has one shared lane,
 * multiplexed by every handle and lease (their commands are short), and lends lanes of their own
 * to the calls that block a connection on the server: an {@code ACQUIRE ... WAIT}, and a {@code
 * WAIT} for replicas. Those would otherwise hold up every command queued behind them, among them
 * the renewals of leases already held.
 */
final class Lane {
    /** Redirects followed for one command before giving up, as most Redis Cluster clients do. */
    static final int MAX_REDIRECTS = 5;
    /** How long to wait before retrying a command refused with {@code -TRYAGAIN} or {@code -CLUSTERDOWN}. */
    static final long RETRY_DELAY_MS = 100;

    /** The replies of a batch, and the node that gave them. */
    record Routed(List<Object> replies, Address node) {
    }

    private final Connection.Config config;
    private final Topology topology;
    private final ConcurrentHashMap<Address, NodeChannel> channels = new ConcurrentHashMap<>();
    private volatile boolean closed;

    Lane(Connection.Config config, Topology topology) {
        this.config = config;
        this.topology = topology;
    }

    long commandTimeoutMs() {
        return config.commandTimeoutMs();
    }

    /**
     * Sends the commands, in one batch, to the node of {@code key}. Redirects ({@code -MOVED},
     * {@code -ASK}, {@code -TRYAGAIN}, {@code -CLUSTERDOWN}) are looked for in the first command's
     * reply and followed with the whole batch, so that commands batched together always run on one
     * connection. Error replies are returned as {@link Reply.Error} values; a failed connection
     * fails the future with a {@link ConnectionException}.
     */
    CompletableFuture<Routed> execute(byte[] key, List<List<byte[]>> commands, long timeoutMs) {
        CompletableFuture<Routed> result = new CompletableFuture<>();
        route(key, commands, timeoutMs, 0, result);
        return result;
    }

    /** Sends the commands to one node, with no routing. */
    CompletableFuture<List<Object>> executeAt(Address node, List<List<byte[]>> commands, long timeoutMs) {
        List<Command> batch = new ArrayList<>(commands.size());
        for (List<byte[]> args : commands) {
            batch.add(new Command(args, timeoutMs));
        }
        return send(node, batch);
    }

    void close() {
        closed = true;
        channels.values().forEach(NodeChannel::close);
    }

    boolean isClosed() {
        return closed;
    }

    private void route(byte[] key, List<List<byte[]>> commands, long timeoutMs, int redirects,
            CompletableFuture<Routed> result) {
        topology.ready(this).whenComplete((ok, error) -> {
            if (error != null) {
                result.completeExceptionally(Futures.unwrap(error));
                return;
            }
            Address node = topology.route(key);
            if (node == null) {
                // No node serves the slot yet (a cluster being set up or repaired): like -CLUSTERDOWN.
                topology.markStale();
                retryLater(key, commands, timeoutMs, redirects, result,
                        "no cluster node serves slot " + SlotHash.slot(key));
                return;
            }
            attempt(key, node, false, commands, timeoutMs, redirects, result);
        });
    }

    private void attempt(byte[] key, Address node, boolean asking, List<List<byte[]>> commands,
            long timeoutMs, int redirects, CompletableFuture<Routed> result) {
        List<Command> batch = new ArrayList<>(commands.size() + 1);
        if (asking) {
            batch.add(new Command(Reply.args("ASKING"), timeoutMs));
        }
        for (List<byte[]> args : commands) {
            batch.add(new Command(args, timeoutMs));
        }
        send(node, batch).whenComplete((all, error) -> {
            if (error != null) {
                topology.markStale();
                result.completeExceptionally(Futures.unwrap(error));
                return;
            }
            List<Object> replies = asking ? all.subList(1, all.size()) : all;
            if (topology.isCluster() && replies.get(0) instanceof Reply.Error e) {
                String[] words = e.message().split(" ");
                switch (e.kind()) {
                    case "MOVED", "ASK" -> {
                        if (words.length < 3 || redirects >= MAX_REDIRECTS) {
                            break;
                        }
                        Address to = Address.parse(words[2], node.host());
                        if (e.kind().equals("MOVED")) {
                            topology.moved(Integer.parseInt(words[1]), to, this);
                        }
                        attempt(key, to, e.kind().equals("ASK"), commands, timeoutMs, redirects + 1, result);
                        return;
                    }
                    case "TRYAGAIN", "CLUSTERDOWN" -> {
                        if (redirects >= MAX_REDIRECTS) {
                            break;
                        }
                        if (e.kind().equals("CLUSTERDOWN")) {
                            topology.markStale();
                        }
                        retryLater(key, commands, timeoutMs, redirects, result, e.message());
                        return;
                    }
                    default -> {
                    }
                }
            }
            result.complete(new Routed(replies, node));
        });
    }

    private void retryLater(byte[] key, List<List<byte[]>> commands, long timeoutMs, int redirects,
            CompletableFuture<Routed> result, String why) {
        if (redirects >= MAX_REDIRECTS) {
            result.completeExceptionally(new ConnectionException("the cluster could not serve the key: " + why));
            return;
        }
        config.group().schedule(() -> route(key, commands, timeoutMs, redirects + 1, result),
                RETRY_DELAY_MS, TimeUnit.MILLISECONDS);
    }

    private CompletableFuture<List<Object>> send(Address node, List<Command> batch) {
        if (closed) {
            return CompletableFuture.failedFuture(new ConnectionException("the connection is closed"));
        }
        NodeChannel channel = channels.computeIfAbsent(node, address -> new NodeChannel(address, config));
        channel.send(new Command.Batch(batch));
        CompletableFuture<?>[] replies = new CompletableFuture<?>[batch.size()];
        for (int i = 0; i < replies.length; i++) {
            replies[i] = batch.get(i).reply;
        }
        return CompletableFuture.allOf(replies).thenApply(ignored -> {
            List<Object> values = new ArrayList<>(batch.size());
            for (Command command : batch) {
                values.add(command.reply.join());
            }
            return values;
        });
    }
}
