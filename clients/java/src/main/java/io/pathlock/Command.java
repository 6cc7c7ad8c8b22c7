package io.pathlock;

import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * One command on its way: its arguments, and the future its reply completes. A reply (error
 * replies included) completes it normally; a connection that fails or a command that times out
 * completes it with a {@link ConnectionException}.
 */
final class Command {
    final List<byte[]> args;
    final long timeoutMs;
    final CompletableFuture<Object> reply = new CompletableFuture<>();

    Command(List<byte[]> args, long timeoutMs) {
        this.args = args;
        this.timeoutMs = timeoutMs;
    }

    String name() {
        return args.isEmpty() ? "" : Reply.text(args.get(0));
    }

    /**
     * Commands written together, in order, with nothing of another caller between them: {@code
     * ASKING} before the command it is for, or an {@code ACQUIRE} and the {@code WAIT} that must
     * count its replication on the same connection.
     */
    record Batch(List<Command> commands) {
        void fail(Throwable error) {
            for (Command command : commands) {
                command.reply.completeExceptionally(error);
            }
        }
    }
}
