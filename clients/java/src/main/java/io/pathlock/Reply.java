package io.pathlock;

import io.netty.buffer.ByteBuf;
import io.netty.buffer.ByteBufUtil;
import io.netty.buffer.Unpooled;
import io.netty.handler.codec.redis.ArrayRedisMessage;
import io.netty.handler.codec.redis.ErrorRedisMessage;
import io.netty.handler.codec.redis.FullBulkStringRedisMessage;
import io.netty.handler.codec.redis.IntegerRedisMessage;
import io.netty.handler.codec.redis.RedisMessage;
import io.netty.handler.codec.redis.SimpleStringRedisMessage;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Netty's Redis messages turned into plain Java values, and commands into Netty's messages.
 *
 * <p>A reply becomes: a simple string a {@code String}, an error an {@link Error}, an integer a
 * {@code Long}, a bulk string a {@code byte[]}, an array a {@code List<Object>}, and a nil reply
 * (bulk or array) {@code null}. The Netty message is released once converted, so nothing above
 * this class holds pooled buffers.
 */
final class Reply {
    /** An error reply, kept as a value so that redirects can be looked at before it is thrown. */
    record Error(String message) {
        /** The first word: {@code ERR}, {@code WRONGTYPE}, {@code MOVED}, ... */
        String kind() {
            int space = message.indexOf(' ');
            return space < 0 ? message : message.substring(0, space);
        }
    }

    private Reply() {
    }

    static Object of(RedisMessage message) {
        if (message instanceof SimpleStringRedisMessage simple) {
            return simple.content();
        }
        if (message instanceof ErrorRedisMessage error) {
            return new Error(error.content());
        }
        if (message instanceof IntegerRedisMessage integer) {
            return integer.value();
        }
        if (message instanceof FullBulkStringRedisMessage bulk) {
            return bulk.isNull() ? null : ByteBufUtil.getBytes(bulk.content());
        }
        if (message instanceof ArrayRedisMessage array) {
            if (array.isNull()) {
                return null;
            }
            List<Object> values = new ArrayList<>(array.children().size());
            for (RedisMessage child : array.children()) {
                values.add(of(child));
            }
            return values;
        }
        throw new ConnectionException("unexpected reply from the server: " + message);
    }

    /** A command as a RESP array of bulk strings, Netty's {@code RedisEncoder} writes it. */
    static ArrayRedisMessage command(List<byte[]> args) {
        List<RedisMessage> children = new ArrayList<>(args.size());
        for (byte[] arg : args) {
            ByteBuf buffer = Unpooled.wrappedBuffer(arg);
            children.add(new FullBulkStringRedisMessage(buffer));
        }
        return new ArrayRedisMessage(children);
    }

    /** A command's arguments: strings in UTF-8, numbers in decimal. */
    static List<byte[]> args(Object... words) {
        List<byte[]> args = new ArrayList<>(words.length);
        for (Object word : words) {
            args.add(bytes(word));
        }
        return args;
    }

    static byte[] bytes(Object word) {
        if (word instanceof byte[] raw) {
            return raw;
        }
        return String.valueOf(word).getBytes(StandardCharsets.UTF_8);
    }

    static String text(Object value) {
        if (value == null) {
            return null;
        }
        if (value instanceof byte[] raw) {
            return new String(raw, StandardCharsets.UTF_8);
        }
        return value.toString();
    }

    static long integer(Object value) {
        if (value instanceof Long number) {
            return number;
        }
        if (value instanceof byte[] || value instanceof String) {
            return Long.parseLong(text(value));
        }
        throw new ServerException("expected an integer reply, got " + describe(value));
    }

    @SuppressWarnings("unchecked")
    static List<Object> array(Object value) {
        if (value instanceof List<?> list) {
            return (List<Object>) list;
        }
        throw new ServerException("expected an array reply, got " + describe(value));
    }

    static String describe(Object value) {
        if (value == null) {
            return "nil";
        }
        if (value instanceof byte[] raw) {
            return "\"" + new String(raw, StandardCharsets.UTF_8) + "\"";
        }
        return value.toString();
    }
}
