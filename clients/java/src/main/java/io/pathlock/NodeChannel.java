package io.pathlock;

import io.netty.bootstrap.Bootstrap;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFuture;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioSocketChannel;
import io.netty.handler.codec.redis.RedisArrayAggregator;
import io.netty.handler.codec.redis.RedisBulkStringAggregator;
import io.netty.handler.codec.redis.RedisDecoder;
import io.netty.handler.codec.redis.RedisEncoder;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * One connection to one server, opened when the first command needs it and opened again after it
 * fails, when the next command comes. Commands sent while it connects wait, in order, and go out
 * once the connection is ready (authenticated, its database selected). Nothing reconnects in the
 * background: an idle handle costs nothing, and a caller that wants a retry sends again.
 */
final class NodeChannel {
    private final Address address;
    private final Connection.Config config;
    private final Bootstrap bootstrap;
    private final Object lock = new Object();
    /** The ready connection, or null. */
    private Channel channel;
    /** Batches waiting for a connection being opened; null when none is being opened. */
    private List<Command.Batch> waiting;
    private boolean closed;

    NodeChannel(Address address, Connection.Config config) {
        this.address = address;
        this.config = config;
        this.bootstrap = new Bootstrap()
                .group(config.group())
                .channel(NioSocketChannel.class)
                .option(ChannelOption.TCP_NODELAY, true)
                .option(ChannelOption.SO_KEEPALIVE, true)
                .option(ChannelOption.CONNECT_TIMEOUT_MILLIS, (int) config.connectTimeoutMs())
                .handler(new ChannelInitializer<SocketChannel>() {
                    @Override
                    protected void initChannel(SocketChannel ch) {
                        ch.pipeline().addLast(
                                new RedisDecoder(),
                                new RedisBulkStringAggregator(),
                                new RedisArrayAggregator(),
                                new RedisEncoder(),
                                new CommandHandler(address));
                    }
                });
    }

    Address address() {
        return address;
    }

    /** Sends the batch; its futures complete with the replies, or fail with a ConnectionException. */
    void send(Command.Batch batch) {
        Channel ready = null;
        boolean refused = false;
        boolean startConnecting = false;
        synchronized (lock) {
            if (closed) {
                refused = true;
            } else if (channel != null && channel.isActive()) {
                ready = channel;
            } else {
                channel = null;
                if (waiting == null) {
                    waiting = new ArrayList<>();
                    startConnecting = true;
                }
                waiting.add(batch);
            }
        }
        // Outside the lock: failing a batch runs its callers' callbacks, which may send again.
        if (refused) {
            batch.fail(new ConnectionException("the connection to " + address + " is closed"));
        } else if (ready != null) {
            write(ready, batch);
        } else if (startConnecting) {
            connect();
        }
    }

    void close() {
        Channel open;
        synchronized (lock) {
            closed = true;
            open = channel;
            channel = null;
        }
        if (open != null) {
            open.close();
        }
    }

    private void write(Channel ch, Command.Batch batch) {
        ch.writeAndFlush(batch).addListener(f -> {
            if (!f.isSuccess()) {
                batch.fail(new ConnectionException("could not send to " + address + ": " + f.cause(), f.cause()));
            }
        });
    }

    private void connect() {
        ChannelFuture connecting = bootstrap.connect(address.socket());
        connecting.addListener(f -> {
            if (!f.isSuccess()) {
                failWaiting(new ConnectionException("could not connect to " + address + ": " + f.cause(), f.cause()));
                return;
            }
            Channel ch = connecting.channel();
            handshake(ch).whenComplete((ok, error) -> {
                if (error != null) {
                    ch.close();
                    Throwable cause = Futures.unwrap(error);
                    failWaiting(cause instanceof PathLockException ? cause
                            : new ConnectionException("could not set up the connection to " + address + ": " + cause, cause));
                    return;
                }
                List<Command.Batch> flush;
                synchronized (lock) {
                    flush = waiting;
                    waiting = null;
                    if (closed) {
                        ch.close();
                    } else {
                        channel = ch;
                    }
                }
                // Still on the event loop: these writes go out before any that other threads
                // hand to the channel from now on.
                for (Command.Batch batch : flush) {
                    write(ch, batch);
                }
            });
        });
    }

    /** AUTH, SELECT and CLIENT SETNAME as configured, before any caller's command. */
    private CompletableFuture<Void> handshake(Channel ch) {
        List<Command> setup = new ArrayList<>();
        if (config.password() != null) {
            setup.add(new Command(config.username() == null
                    ? Reply.args("AUTH", config.password())
                    : Reply.args("AUTH", config.username(), config.password()), config.commandTimeoutMs()));
        }
        if (config.database() != 0) {
            setup.add(new Command(Reply.args("SELECT", config.database()), config.commandTimeoutMs()));
        }
        if (config.clientName() != null) {
            setup.add(new Command(Reply.args("CLIENT", "SETNAME", config.clientName()), config.commandTimeoutMs()));
        }
        if (setup.isEmpty()) {
            return CompletableFuture.completedFuture(null);
        }
        write(ch, new Command.Batch(setup));
        CompletableFuture<Void> done = CompletableFuture.completedFuture(null);
        for (Command command : setup) {
            done = done.thenCombine(command.reply, (ignored, reply) -> {
                if (reply instanceof Reply.Error error) {
                    throw new ServerException(command.name() + " on connecting to " + address + " failed: "
                            + error.message(), error.message());
                }
                return null;
            });
        }
        return done;
    }

    private void failWaiting(Throwable error) {
        List<Command.Batch> failed;
        synchronized (lock) {
            failed = waiting;
            waiting = null;
        }
        if (failed != null) {
            for (Command.Batch batch : failed) {
                batch.fail(error);
            }
        }
    }
}
