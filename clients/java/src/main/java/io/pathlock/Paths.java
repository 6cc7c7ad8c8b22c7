package io.pathlock;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/** Paths as the module splits them, and the wording of messages. */
final class Paths {
    /** Default notes are cut to this many bytes: the server's default {@code pathlock.max-note-bytes}. */
    static final int MAX_DEFAULT_NOTE_BYTES = 256;

    private Paths() {
    }

    /** The path's segments: empty ones and {@code .} are dropped, as the module does. */
    static List<String> segments(String path) {
        List<String> segments = new ArrayList<>();
        for (String segment : path.split("/", -1)) {
            if (!segment.isEmpty() && !segment.equals(".")) {
                segments.add(segment);
            }
        }
        return segments;
    }

    /** True for a path with no segment ({@code ""}, {@code /}, {@code /./}): the project root. */
    static boolean isRoot(String path) {
        return segments(path).isEmpty();
    }

    /** The normalised form the server reports: {@code /A/C}, the root {@code /}. */
    static String normalise(String path) {
        return "/" + String.join("/", segments(path));
    }

    /** Where {@code path} lands when it is moved or copied into {@code folder}. */
    static String into(String folder, String path) {
        List<String> from = segments(path);
        if (from.isEmpty()) {
            throw new IllegalArgumentException("\"" + path
                    + "\" names the project root, which cannot be moved or copied into a folder");
        }
        if (folder.isEmpty()) {
            throw new IllegalArgumentException("an empty folder is refused; write \"/\" for the project root");
        }
        List<String> to = segments(folder);
        to.add(from.get(from.size() - 1));
        return "/" + String.join("/", to);
    }

    /** The path, refused when it names the project root (an operation helper's argument). */
    static String notRoot(String operation, String path) {
        if (path == null) {
            throw new NullPointerException(operation + ": path is null");
        }
        if (isRoot(path)) {
            throw new IllegalArgumentException(operation + " of \"" + path
                    + "\" would lock the whole project; use lock(LockRequest.wholeProject(...)) to ask for that");
        }
        return path;
    }

    /** A note of at most {@link #MAX_DEFAULT_NOTE_BYTES} UTF-8 bytes, cut at a character. */
    static String defaultNote(String note) {
        byte[] bytes = note.getBytes(StandardCharsets.UTF_8);
        if (bytes.length <= MAX_DEFAULT_NOTE_BYTES) {
            return note;
        }
        StringBuilder cut = new StringBuilder();
        int used = "...".length();
        for (int i = 0; i < note.length(); ) {
            int cp = note.codePointAt(i);
            int size = new String(Character.toChars(cp)).getBytes(StandardCharsets.UTF_8).length;
            if (used + size > MAX_DEFAULT_NOTE_BYTES) {
                break;
            }
            cut.appendCodePoint(cp);
            used += size;
            i += Character.charCount(cp);
        }
        return cut.append("...").toString();
    }

    /** A key or name in double quotes, with control characters escaped, for messages. */
    static String quote(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20 || c == 0x7f) {
                out.append(String.format("\\x%02x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    /** A duration in milliseconds, or in the unit that shows it when it is under 1 ms. */
    static String describe(Duration duration) {
        String sign = duration.isNegative() ? "-" : "";
        Duration size = duration.abs();
        if (size.compareTo(Duration.ofMillis(1)) < 0) {
            long nanos = size.toNanos();
            return sign + (nanos % 1000 == 0 ? nanos / 1000 + " us" : nanos + " ns");
        }
        if (size.getSeconds() > Long.MAX_VALUE / 1000 - 1) {
            return sign + size.getSeconds() + " s";
        }
        long nanos = size.getNano() % 1_000_000;
        return sign + size.toMillis() + (nanos == 0 ? "" : String.format(".%06d", nanos).replaceAll("0+$", "")) + " ms";
    }
}
