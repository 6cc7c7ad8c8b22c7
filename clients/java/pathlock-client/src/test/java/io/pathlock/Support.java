package io.pathlock;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** What the tests share: timing slack, renewal counts, waiting for a condition. */
final class Support {
    /** Slack on top of one renewal period for "reported within one renewal period" on a busy 2-core machine. */
    static final double SLACK_MS = 200;

    private Support() {
    }

    /** Runs a call that blocks (a waiting acquire) on a thread of its own. */
    static <T> CompletableFuture<T> async(java.util.function.Supplier<T> call) {
        CompletableFuture<T> result = new CompletableFuture<>();
        Thread thread = new Thread(() -> {
            try {
                result.complete(call.get());
            } catch (Throwable e) {
                result.completeExceptionally(e);
            }
        }, "test-async");
        thread.setDaemon(true);
        thread.start();
        return result;
    }

    /** Completes with the time the loss was reported, on {@link Servers#nowMs()}'s clock. */
    static CompletableFuture<Double> lostAt(Lease lease) {
        CompletableFuture<Double> at = new CompletableFuture<>();
        lease.onLost(lost -> at.complete(Servers.nowMs()));
        return at;
    }

    static <T> T within(CompletableFuture<T> future, long ms) {
        try {
            return future.get(ms, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            throw new AssertionError("not within " + ms + " ms: " + e, e);
        }
    }

    static long renewCalls(Servers.Server server) {
        Matcher m = Pattern.compile("cmdstat_pathlock\\.renew:calls=(\\d+)", Pattern.CASE_INSENSITIVE).matcher(server.info("commandstats"));
        return m.find() ? Long.parseLong(m.group(1)) : 0;
    }

    static void waitUntil(String what, long ms, BooleanSupplier condition) {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < until, "timed out waiting for " + what);
            Servers.sleep(10);
        }
    }

    /** [path, mode, token] of each held lock, for comparisons. */
    static List<List<String>> shape(List<HeldLock> locks) {
        return locks.stream().map(l -> List.of(l.path(), l.mode().name(), l.token())).toList();
    }
}
