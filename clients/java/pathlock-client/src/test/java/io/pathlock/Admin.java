package io.pathlock;

import io.lettuce.core.RedisClient;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.NestedMultiOutput;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolKeyword;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * The tests' own commands to one server (CONFIG, INFO, CLUSTER, a DEL behind a lease's back), on a
 * plain Lettuce connection of their own: no code of the client under test. Replies come as
 * Lettuce's {@code NestedMultiOutput} gives them: an array as its list, anything else as a list of
 * that one value; an error reply throws Lettuce's {@code RedisCommandExecutionException}.
 */
final class Admin {
    private final StatefulRedisConnection<String, String> connection;

    Admin(RedisClient client) {
        this.connection = client.connect(StringCodec.UTF8);
    }

    /** A command name as Lettuce's dispatch takes it. */
    private record Name(String command) implements ProtocolKeyword {
        @Override
        public byte[] getBytes() {
            return command.getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public String toString() {
            return command;
        }
    }

    List<Object> call(Object... words) {
        CommandArgs<String, String> args = new CommandArgs<>(StringCodec.UTF8);
        for (int i = 1; i < words.length; i++) {
            args.add(String.valueOf(words[i]));
        }
        return connection.sync().dispatch(new Name(String.valueOf(words[0])), new NestedMultiOutput<>(StringCodec.UTF8), args);
    }

    String text(Object... words) {
        return (String) call(words).get(0);
    }

    long integer(Object... words) {
        return (Long) call(words).get(0);
    }

    static String str(Object value) {
        return value == null ? null : String.valueOf(value);
    }

    @SuppressWarnings("unchecked")
    static List<Object> array(Object value) {
        return (List<Object>) value;
    }

    static long integer(Object value) {
        return value instanceof Long number ? number : Long.parseLong(String.valueOf(value));
    }
}
