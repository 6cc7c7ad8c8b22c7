package io.pathlock;

import io.lettuce.core.AbstractRedisClient;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulConnection;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.async.BaseRedisAsyncCommands;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.SlotHash;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.CommandOutput;
import io.lettuce.core.output.StatusOutput;
import io.lettuce.core.protocol.CommandArgs;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * The connections one family of handles shares (a {@link PathLocks} and every handle derived
 * from it), opened on a Lettuce client: the application's {@code RedisClient} or {@code
 * RedisClusterClient}, or one made from a URI, which the family then owns and shuts down.
 *
 * <p>One <b>shared</b> connection carries every short command (acquires that do not wait,
 * renewals, releases, inspection), multiplexed as Lettuce does; on a cluster client it is a cluster
 * connection, which routes each command by its first key, the project key, to the master of its
 * slot and follows {@code -MOVED} and {@code -ASK}. The calls that block a connection on the
 * server (an {@code ACQUIRE ... WAIT} that waits, a {@code WAIT} for replicas) run on
 * <b>dedicated</b> connections, at most {@link #maxWaitingConnections} at once, kept for the next
 * when they come back; a call that finds them all in use waits its turn, first come first served,
 * for as long as its own budget allows. So no renewal ever queues behind a wait, and a crowd of
 * waiting threads never opens more than the cap.
 */
final class Redis {
    static final StringCodec CODEC = StringCodec.UTF8;
    /** The default cap on dedicated connections. */
    static final int DEFAULT_MAX_WAITING_CONNECTIONS = 8;
    /** Redirects followed for one dedicated cluster call before giving up, as Lettuce's default. */
    static final int MAX_REDIRECTS = 5;
    /** How long to wait before retrying a call refused with {@code -TRYAGAIN} or {@code -CLUSTERDOWN}. */
    static final long RETRY_DELAY_MS = 100;
    /** The command timeout used when the connection has none (the application disabled Lettuce's). */
    static final Duration FALLBACK_TIMEOUT = Duration.ofSeconds(60);

    private final AbstractRedisClient client;
    /** The URI to connect to: the one a client the family made was made for, or one the application gave; else null. */
    private final RedisURI uri;
    private final boolean ownsClient;
    private final int maxWaitingConnections;
    /** What every handle of the family reports to (metrics): the family shares it with its connections. */
    private final SafeObserver observer;

    private final Object lock = new Object();
    private CompletableFuture<StatefulConnection<String, String>> shared;
    private final ArrayDeque<StatefulConnection<String, String>> idle = new ArrayDeque<>();
    private final ArrayDeque<Turn> turns = new ArrayDeque<>();
    /** Dedicated connections open, lent or being opened. */
    private int dedicated;
    private boolean closed;
    /** The command timeout of the client's connections, as the first one opened had it. */
    private Duration commandTimeout;

    Redis(AbstractRedisClient client, RedisURI uri, boolean ownsClient, int maxWaitingConnections,
            PathLockObserver observer) {
        if (!(client instanceof RedisClient) && !(client instanceof RedisClusterClient)) {
            throw new IllegalArgumentException("a RedisClient or a RedisClusterClient is needed, not " + client);
        }
        if (maxWaitingConnections < 1) {
            throw new IllegalArgumentException("maxWaitingConnections must be 1 or more, not " + maxWaitingConnections);
        }
        this.client = client;
        this.uri = uri;
        this.ownsClient = ownsClient;
        this.maxWaitingConnections = maxWaitingConnections;
        this.observer = new SafeObserver(observer);
    }

    SafeObserver observer() {
        return observer;
    }

    boolean isCluster() {
        return client instanceof RedisClusterClient;
    }

    int maxWaitingConnections() {
        return maxWaitingConnections;
    }

    /** The client's command timeout (RedisURI's, 60 s by default), once a connection has been opened. */
    Duration commandTimeout() {
        synchronized (lock) {
            return commandTimeout != null ? commandTimeout : FALLBACK_TIMEOUT;
        }
    }

    /** Dedicated connections open now (lent, idle or being opened), for tests and metrics. */
    int dedicatedConnections() {
        synchronized (lock) {
            return dedicated;
        }
    }

    /**
     * Opens a connection with the client's own settings (TLS, credentials, Sentinel, topology
     * refresh, reconnects). A {@code RedisClient}'s only way to connect to the URI it was made
     * with is blocking, so that runs on a thread of the client's own, never the caller's (which
     * may be one of Netty's event loops).
     */
    private CompletableFuture<StatefulConnection<String, String>> open() {
        return connect().thenApply(connection -> {
            synchronized (lock) {
                if (commandTimeout == null) {
                    // Before any setTimeout of a dedicated call: the client's own setting.
                    commandTimeout = timeout(connection);
                }
            }
            return connection;
        });
    }

    private CompletableFuture<StatefulConnection<String, String>> connect() {
        if (client instanceof RedisClusterClient cluster) {
            // connectAsync needs the slot map loaded (a sync connect loads it, blocking): load or
            // reload it first, without blocking.
            return cluster.refreshPartitionsAsync().toCompletableFuture()
                    .thenCompose(loaded -> cluster.connectAsync(CODEC)).thenApply(connection -> connection);
        }
        RedisClient standalone = (RedisClient) client;
        if (uri != null) {
            return standalone.connectAsync(CODEC, uri).toCompletableFuture().thenApply(connection -> connection);
        }
        return CompletableFuture.supplyAsync(() -> standalone.connect(CODEC), Scheduling.CALLBACKS);
    }

    /**
     * The shared connection, opened on first use; a failed opening is tried again by the next
     * call. Lettuce reconnects it by itself after a failure.
     */
    CompletableFuture<StatefulConnection<String, String>> shared() {
        synchronized (lock) {
            if (closed) {
                return CompletableFuture.failedFuture(closedError());
            }
            if (shared == null || shared.isCompletedExceptionally()) {
                shared = open();
            }
            return shared;
        }
    }

    /** The timeout a connection's commands have (the client's, e.g. RedisURI's 60 s by default). */
    static Duration timeout(StatefulConnection<?, ?> connection) {
        Duration timeout = connection.getTimeout();
        return timeout == null || timeout.isNegative() || timeout.isZero() ? FALLBACK_TIMEOUT : timeout;
    }

    /**
     * One command about {@code key} on the shared connection, with a timeout of its own on top of
     * Lettuce's (which the application may have turned off): {@code limit}, or when null the
     * connection's.
     */
    <T> CompletableFuture<T> call(Keyword keyword, Supplier<CommandOutput<String, String, T>> output,
            CommandArgs<String, String> args, Duration limit) {
        return shared().thenCompose(connection -> {
            Duration timeout = limit != null ? limit : timeout(connection);
            CompletableFuture<T> reply = commands(connection).dispatch(keyword, output.get(), args).toCompletableFuture();
            return reply.orTimeout(timeout.toNanos(), TimeUnit.NANOSECONDS).whenComplete((value, error) -> {
                if (error != null && !reply.isDone()) {
                    // Our own timeout: Lettuce may still send it; it is not wanted any more.
                    reply.cancel(false);
                }
            });
        });
    }

    @SuppressWarnings("unchecked")
    private static BaseRedisAsyncCommands<String, String> commands(StatefulConnection<String, String> connection) {
        if (connection instanceof StatefulRedisClusterConnection<?, ?> cluster) {
            return ((StatefulRedisClusterConnection<String, String>) cluster).async();
        }
        return ((StatefulRedisConnection<String, String>) connection).async();
    }

    // Dedicated connections.

    /** A caller waiting for a dedicated connection. */
    private static final class Turn {
        final CompletableFuture<StatefulConnection<String, String>> connection = new CompletableFuture<>();
        ScheduledFuture<?> timer;
    }

    /**
     * A dedicated connection for one blocking call: an idle one, a new one while fewer than the cap
     * are open, or else the first one given back, if that happens within {@code budgetMs}; after
     * that the future fails with {@link TooManyWaits}. Give it back with {@link #giveBack}. Cancelling the
     * future gives up the turn.
     */
    CompletableFuture<StatefulConnection<String, String>> borrow(long budgetMs) {
        Turn turn = new Turn();
        boolean openOne = false;
        synchronized (lock) {
            if (closed) {
                return CompletableFuture.failedFuture(closedError());
            }
            StatefulConnection<String, String> ready = idle.poll();
            if (ready != null) {
                return CompletableFuture.completedFuture(ready);
            }
            if (dedicated < maxWaitingConnections) {
                dedicated++;
                openOne = true;
            } else {
                turns.add(turn);
                turn.timer = Scheduling.watchdog().schedule(() -> {
                    synchronized (lock) {
                        turns.remove(turn);
                    }
                    turn.connection.completeExceptionally(new TooManyWaits(maxWaitingConnections, budgetMs));
                }, budgetMs, TimeUnit.MILLISECONDS);
            }
        }
        if (openOne) {
            openFor(turn);
        }
        return turn.connection;
    }

    /** Opens a dedicated connection (already counted) for the turn; a failure frees its place. */
    private void openFor(Turn turn) {
        open().whenComplete((connection, error) -> {
            if (error != null) {
                synchronized (lock) {
                    dedicated--;
                }
                turn.connection.completeExceptionally(error);
                serveWaiting();
            } else if (!turn.connection.complete(connection)) {
                giveBack(connection, false);
            }
        });
    }

    /**
     * Takes a borrowed connection back: to the next caller waiting for one, or into the idle
     * list. {@code broken} closes it instead (a wait given up on: closing the connection takes the
     * request off the server's queue), which lets a new one be opened for whoever waits.
     */
    void giveBack(StatefulConnection<String, String> connection, boolean broken) {
        Turn next = null;
        boolean close;
        synchronized (lock) {
            close = broken || closed;
            if (close) {
                dedicated--;
            } else {
                next = turns.poll();
                if (next == null) {
                    idle.push(connection);
                }
            }
        }
        if (close) {
            connection.closeAsync();
            serveWaiting();
        } else if (next != null) {
            next.timer.cancel(false);
            if (!next.connection.complete(connection)) {
                // That caller gave up meanwhile: the next one, or the idle list.
                giveBack(connection, false);
            }
        }
    }

    /** After a place was freed: opens a connection for the first caller still waiting, if any. */
    private void serveWaiting() {
        Turn turn;
        synchronized (lock) {
            if (closed || dedicated >= maxWaitingConnections) {
                return;
            }
            turn = turns.poll();
            if (turn == null) {
                return;
            }
            dedicated++;
        }
        turn.timer.cancel(false);
        openFor(turn);
    }

    /** One command of a dedicated call. */
    record Step(Keyword keyword, CommandArgs<String, String> args, Supplier<CommandOutput<String, String, ?>> output) {
    }

    /** A step's outcome: its reply, or the failure it completed with (an error reply among them). */
    record Outcome(Object value, Throwable failure) {
        Object get(String key, Settings merged) {
            if (failure != null) {
                throw Errors.of(failure, key, merged);
            }
            return value;
        }
    }

    /**
     * Sends the steps, in order and with nothing else between them, on the dedicated connection,
     * with {@code timeout} as the command timeout of each: on a standalone connection as they
     * are; on a cluster connection on its connection to the master of the key's slot, so that a
     * {@code WAIT} after an {@code ACQUIRE} counts the replicas of the very connection that made
     * the grant. Redirects answered to the first step ({@code -MOVED}, {@code -ASK},
     * {@code -TRYAGAIN}, {@code -CLUSTERDOWN}) send them all again where they point, at most
     * {@link #MAX_REDIRECTS} times.
     */
    CompletableFuture<List<Outcome>> onDedicated(StatefulConnection<String, String> connection, String key,
            List<Step> steps, Duration timeout) {
        if (connection instanceof StatefulRedisClusterConnection<?, ?> cluster) {
            @SuppressWarnings("unchecked")
            StatefulRedisClusterConnection<String, String> typed = (StatefulRedisClusterConnection<String, String>) cluster;
            return onNode(typed, key, steps, timeout, null, false, 0);
        }
        return send(connection, steps, timeout, false);
    }

    private static CompletableFuture<List<Outcome>> send(StatefulConnection<String, String> connection, List<Step> steps,
            Duration timeout, boolean asking) {
        connection.setTimeout(timeout);
        BaseRedisAsyncCommands<String, String> commands = commands(connection);
        if (asking) {
            commands.dispatch(Keyword.ASKING, new StatusOutput<>(CODEC), new CommandArgs<>(CODEC));
        }
        List<CompletableFuture<Outcome>> replies = new ArrayList<>(steps.size());
        for (Step step : steps) {
            replies.add(commands.dispatch(step.keyword(), step.output().get(), step.args()).toCompletableFuture()
                    .handle((value, failure) -> new Outcome(value, failure)));
        }
        return CompletableFuture.allOf(replies.toArray(CompletableFuture[]::new))
                .thenApply(done -> replies.stream().map(CompletableFuture::join).toList());
    }

    /**
     * The steps on the cluster connection's connection to one node: {@code target} (after a
     * redirect; {@code asking} sends {@code ASKING} first), or else the master of the key's slot.
     */
    private CompletableFuture<List<Outcome>> onNode(StatefulRedisClusterConnection<String, String> cluster, String key,
            List<Step> steps, Duration timeout, String[] target, boolean asking, int redirects) {
        String host;
        int port;
        if (target != null) {
            host = target[0];
            port = Integer.parseInt(target[1]);
        } else {
            RedisClusterNode master = cluster.getPartitions().getMasterBySlot(SlotHash.getSlot(key));
            if (master == null) {
                return retryLater(cluster, key, steps, timeout, redirects, "no cluster node serves slot " + SlotHash.getSlot(key));
            }
            host = master.getUri().getHost();
            port = master.getUri().getPort();
        }
        return cluster.getConnectionAsync(host, port)
                .thenCompose(node -> send(node, steps, timeout, asking))
                .thenCompose(outcomes -> {
                    String reply = Errors.reply(outcomes.get(0).failure());
                    if (reply == null || redirects >= MAX_REDIRECTS) {
                        return CompletableFuture.completedFuture(outcomes);
                    }
                    String[] words = reply.split(" ");
                    if ((words[0].equals("MOVED") || words[0].equals("ASK")) && words.length >= 3) {
                        int colon = words[2].lastIndexOf(':');
                        String[] to = {colon > 0 ? words[2].substring(0, colon) : host, words[2].substring(colon + 1)};
                        if (words[0].equals("MOVED")) {
                            // The slot map is stale: Lettuce reloads it for every connection of
                            // the client, and this call goes where the node said meanwhile.
                            ((RedisClusterClient) client).refreshPartitionsAsync();
                        }
                        return onNode(cluster, key, steps, timeout, to, words[0].equals("ASK"), redirects + 1);
                    }
                    if (words[0].equals("TRYAGAIN") || words[0].equals("CLUSTERDOWN")) {
                        return retryLater(cluster, key, steps, timeout, redirects, reply);
                    }
                    return CompletableFuture.completedFuture(outcomes);
                });
    }

    private CompletableFuture<List<Outcome>> retryLater(StatefulRedisClusterConnection<String, String> cluster, String key,
            List<Step> steps, Duration timeout, int redirects, String why) {
        if (redirects >= MAX_REDIRECTS) {
            return CompletableFuture.failedFuture(new ConnectionException("the cluster could not serve the key: " + why));
        }
        ((RedisClusterClient) client).refreshPartitionsAsync();
        CompletableFuture<List<Outcome>> later = new CompletableFuture<>();
        Scheduling.watchdog().schedule(() -> onNode(cluster, key, steps, timeout, null, false, redirects + 1)
                .whenComplete((outcomes, error) -> {
                    if (error != null) {
                        later.completeExceptionally(error);
                    } else {
                        later.complete(outcomes);
                    }
                }), RETRY_DELAY_MS, TimeUnit.MILLISECONDS);
        return later;
    }

    // Closing.

    /**
     * Closes the family's connections (and shuts down a client it made itself), and waits until
     * the open ones are closed, but on a thread that must not block. Callers waiting for a
     * dedicated connection fail; those lent are closed as they come back.
     */
    void close() {
        List<StatefulConnection<String, String>> toClose = new ArrayList<>();
        List<Turn> waiting;
        CompletableFuture<StatefulConnection<String, String>> opened;
        synchronized (lock) {
            if (closed) {
                return;
            }
            closed = true;
            toClose.addAll(idle);
            dedicated -= idle.size();
            idle.clear();
            waiting = new ArrayList<>(turns);
            turns.clear();
            opened = shared;
            shared = null;
        }
        for (Turn turn : waiting) {
            turn.timer.cancel(false);
            turn.connection.completeExceptionally(closedError());
        }
        List<CompletableFuture<Void>> closing = new ArrayList<>();
        if (opened != null && opened.isDone() && !opened.isCompletedExceptionally()) {
            closing.add(opened.join().closeAsync());
        } else if (opened != null) {
            // Still connecting: closed once it is, without waiting for a connect that may take long.
            opened.thenAccept(StatefulConnection::closeAsync);
        }
        toClose.forEach(connection -> closing.add(connection.closeAsync()));
        if (!Futures.mustNotBlock()) {
            // The application may shut its client down right after (Spring's connection factory
            // does when the context stops): a connection still closing then is closed a second
            // time by the client's shutdown, which Lettuce warns about ("Connection is already
            // closed").
            try {
                CompletableFuture.allOf(closing.toArray(CompletableFuture[]::new)).get();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (ExecutionException e) {
                // A connection that failed to close is closed all the same.
            }
        }
        if (ownsClient) {
            client.shutdown();
        }
    }

    boolean isClosed() {
        synchronized (lock) {
            return closed;
        }
    }

    private static ConnectionException closedError() {
        return new ConnectionException("the handle's connections were closed (PathLocks.close())");
    }
}
