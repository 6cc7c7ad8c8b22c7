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

    /**
     * The segments of a path that a move, a copy or a rename compares with another: refused when it
     * holds {@code ..}, which the server refuses too but the comparison could not reason about.
     */
    private static List<String> compared(String operation, String path) {
        List<String> segments = segments(path);
        if (segments.contains("..")) {
            throw new IllegalArgumentException(operation + ": " + quote(path) + " has a \"..\" segment, which pathlock refuses");
        }
        return segments;
    }

    /**
     * Where {@code path} lands when it is moved or copied into {@code folder}:
     * {@code folder/<last segment of path>}. Refused before anything is sent, comparing the
     * normalised paths segment by segment (so {@code /A/CD} is not inside {@code /A/C}): the root
     * or an empty path, an empty folder, a folder that is the path itself or inside it (a folder
     * cannot go into itself), and the path's own folder (the target would be the path itself).
     */
    static String into(String operation, String path, String folder) {
        notRoot(operation, path);
        if (folder == null) {
            throw new NullPointerException(operation + ": intoFolder is null");
        }
        if (folder.isEmpty()) {
            throw new IllegalArgumentException(operation + ": an empty folder is refused; write \"/\" for the project root");
        }
        List<String> from = compared(operation, path);
        List<String> to = compared(operation, folder);
        if (to.size() >= from.size() && to.subList(0, from.size()).equals(from)) {
            throw new IllegalArgumentException("cannot " + operation + " " + path + " into " + folder
                    + ": a folder cannot go into itself or its own subtree");
        }
        if (to.equals(from.subList(0, from.size() - 1))) {
            throw new IllegalArgumentException("cannot " + operation + " " + path + " into " + folder
                    + ": it is already in that folder (the target would be the source itself)");
        }
        List<String> target = new ArrayList<>(to);
        target.add(from.get(from.size() - 1));
        return "/" + String.join("/", target);
    }

    /**
     * The target of {@code rename(path, newName)}: {@code newName} in the folder of {@code path}.
     * The new name is one segment; a name with {@code /}, an empty one, {@code .}, {@code ..} or
     * the current name is refused, saying that rename takes a name and that move changes folders.
     */
    static String renamed(String path, String newName) {
        notRoot("rename", path);
        if (newName == null) {
            throw new NullPointerException("rename: newName is null");
        }
        List<String> from = compared("rename", path);
        String current = from.get(from.size() - 1);
        if (newName.isEmpty() || newName.contains("/") || newName.equals(".") || newName.equals("..")
                || newName.equals(current)) {
            throw new IllegalArgumentException("rename takes a name for " + path + " in the same folder, not "
                    + quote(newName) + ": a name has no \"/\" and is not \"\", \".\", \"..\" or the current name; to "
                    + "change folders, use move(path, intoFolder)" + samePlace(path, from, newName));
        }
        List<String> target = new ArrayList<>(from.subList(0, from.size() - 1));
        target.add(newName);
        return "/" + String.join("/", target);
    }

    /**
     * For a rename given a whole path in the path's own folder ({@code rename("/A/C", "/A/C2")}),
     * the call that was meant; otherwise nothing.
     */
    private static String samePlace(String path, List<String> from, String newName) {
        List<String> to = segments(newName);
        if (newName.contains("/") && to.size() == from.size() && !to.contains("..")
                && to.subList(0, to.size() - 1).equals(from.subList(0, from.size() - 1))
                && !to.get(to.size() - 1).equals(from.get(from.size() - 1))) {
            return "; here: rename(" + quote(path) + ", " + quote(to.get(to.size() - 1)) + ")";
        }
        return "";
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
        if (duration.isZero()) {
            return "0 ms";
        }
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
