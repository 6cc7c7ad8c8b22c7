package io.pathlock;

import io.netty.channel.ChannelDuplexHandler;
import io.netty.channel.ChannelFutureListener;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelPromise;
import io.netty.handler.codec.redis.RedisMessage;
import io.netty.util.ReferenceCountUtil;
import io.netty.util.concurrent.ScheduledFuture;
import java.util.ArrayDeque;
import java.util.concurrent.TimeUnit;

/**
 * The last handler of a connection's pipeline (after Netty's Redis decoder, its aggregators and
 * its encoder): it queues the commands written, in the order they go out, and hands each reply to
 * the oldest one, since Redis answers a connection's commands in order. Everything here runs on the
 * channel's event loop, so the queue needs no lock.
 *
 * <p>A command that times out closes the connection: its reply may still come, and every reply
 * behind it would otherwise be late too. Closing fails everything queued with a {@link
 * ConnectionException}; callers that may retry do so on a new connection.
 */
final class CommandHandler extends ChannelDuplexHandler {
    private final Address address;
    private final ArrayDeque<Command> queued = new ArrayDeque<>();
    private String closedBecause;

    CommandHandler(Address address) {
        this.address = address;
    }

    @Override
    public void write(ChannelHandlerContext ctx, Object message, ChannelPromise promise) {
        if (!(message instanceof Command.Batch batch)) {
            ctx.write(message, promise);
            return;
        }
        if (closedBecause != null) {
            batch.fail(new ConnectionException("connection to " + address + " closed: " + closedBecause));
            promise.setSuccess();
            return;
        }
        int last = batch.commands().size() - 1;
        for (int i = 0; i <= last; i++) {
            Command command = batch.commands().get(i);
            queued.add(command);
            if (command.timeoutMs > 0) {
                ScheduledFuture<?> timeout = ctx.executor().schedule(
                        () -> timedOut(ctx, command), command.timeoutMs, TimeUnit.MILLISECONDS);
                command.reply.whenComplete((value, error) -> timeout.cancel(false));
            }
            ChannelPromise each = i == last ? promise : ctx.newPromise();
            each.addListener(ChannelFutureListener.CLOSE_ON_FAILURE);
            ctx.write(Reply.command(command.args), each);
        }
    }

    @Override
    public void channelRead(ChannelHandlerContext ctx, Object message) {
        Object value;
        try {
            value = Reply.of((RedisMessage) message);
        } finally {
            ReferenceCountUtil.release(message);
        }
        Command command = queued.poll();
        if (command == null) {
            // A reply nobody asked for: the connection is out of step; no reply on it can be trusted.
            close(ctx, "the server sent a reply no command was waiting for");
            return;
        }
        command.reply.complete(value);
    }

    @Override
    public void channelInactive(ChannelHandlerContext ctx) {
        failQueued(closedBecause == null ? "the connection was closed" : closedBecause);
        ctx.fireChannelInactive();
    }

    @Override
    public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
        close(ctx, cause.toString());
    }

    private void timedOut(ChannelHandlerContext ctx, Command command) {
        if (command.reply.isDone()) {
            return;
        }
        close(ctx, command.name() + " got no reply within " + command.timeoutMs + " ms");
    }

    private void close(ChannelHandlerContext ctx, String why) {
        if (closedBecause == null) {
            closedBecause = why;
        }
        failQueued(closedBecause);
        ctx.close();
    }

    private void failQueued(String why) {
        ConnectionException error = new ConnectionException("connection to " + address + " failed: " + why
                + "; the command's fate is unknown");
        Command command;
        while ((command = queued.poll()) != null) {
            command.reply.completeExceptionally(error);
        }
    }
}
