package io.pathlock;

import java.util.List;

/**
 * The module's replies as Lettuce's {@code NestedMultiOutput} and {@code IntegerOutput} give them
 * (with the client's UTF-8 string codec): a bulk or simple string a {@code String}, an integer a
 * {@code Long}, an array a {@code List<Object>}, a nil {@code null}.
 */
final class Replies {
    private Replies() {
    }

    static String text(Object value) {
        return value == null ? null : value.toString();
    }

    static long integer(Object value) {
        if (value instanceof Long number) {
            return number;
        }
        if (value instanceof String text) {
            try {
                return Long.parseLong(text);
            } catch (NumberFormatException e) {
                // Reported below, with the value.
            }
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

    /**
     * True for {@code ACQUIRE}'s refusal: a nil, which the output holds as an empty list (a nil
     * array) or a list of one null (a nil bulk string, or RESP3's null).
     */
    static boolean isNil(List<Object> reply) {
        return reply.isEmpty() || reply.get(0) == null;
    }

    static String describe(Object value) {
        return value == null ? "nil" : value instanceof String text ? Paths.quote(text) : value.toString();
    }
}
