package io.pathlock;

import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Where the client's background work runs when the application does not say.
 *
 * <p>The watchdog's timers run on one daemon thread for the whole process: a timer only does
 * bookkeeping and hands a command to Lettuce, which never blocks, so one thread keeps any number of
 * leases. Cancelled timers (a lease released before its renewal, nearly all of them) are removed
 * at once rather than left in the queue until they were due.
 *
 * <p>Loss listeners, and the futures that report a loss, run on daemon threads of their own
 * (made when needed, ended after a minute idle): a listener that blocks must hold up neither the
 * timers, which keep every other lease's deadline, nor Netty's event loop; and the news of a loss
 * must not wait behind the application's own work, as it could in the common fork-join pool.
 */
final class Scheduling {
    private Scheduling() {
    }

    static final Executor CALLBACKS = callbacks();

    private static Executor callbacks() {
        AtomicInteger count = new AtomicInteger();
        return new ThreadPoolExecutor(0, Integer.MAX_VALUE, 60, TimeUnit.SECONDS, new SynchronousQueue<>(), task -> {
            Thread thread = new Thread(task, "pathlock-lost-" + count.incrementAndGet());
            thread.setDaemon(true);
            return thread;
        });
    }

    private static final class Watchdog {
        static final ScheduledExecutorService INSTANCE = create();

        private static ScheduledExecutorService create() {
            AtomicInteger count = new AtomicInteger();
            ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(1, task -> {
                Thread thread = new Thread(task, "pathlock-watchdog-" + count.incrementAndGet());
                thread.setDaemon(true);
                return thread;
            });
            executor.setRemoveOnCancelPolicy(true);
            return executor;
        }
    }

    /** The process's watchdog thread, started on first use. */
    static ScheduledExecutorService watchdog() {
        return Watchdog.INSTANCE;
    }
}
