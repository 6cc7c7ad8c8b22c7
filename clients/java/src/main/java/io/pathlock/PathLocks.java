package io.pathlock;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.stream.Collectors;

/**
 * The path locks of one project key, with the defaults of every lease taken through it.
 *
 * <pre>{@code
 * PathLocks locks = PathLocks.of(connection, "proj:42").ttl(Duration.ofSeconds(60));
 * try (Lease lease = locks.move("/A/C", "/B")) {          // WRITE /A/C, WRITE /B/C
 *     moveFolder("/A/C", "/B/C", lease.fence());
 * } catch (Busy busy) {
 *     tell(busy.blockers().get(0).note());                // e.g. "move /A/C -> /B"
 * }
 * }</pre>
 *
 * <p>A handle is immutable and thread-safe: each setting returns a new handle, so one may be kept
 * as a singleton and shared by every thread. It costs nothing to make one per request (the
 * connections belong to the {@link Connection}). Each operation asks for exactly the locks of
 * one cloud-drive operation in a single all-or-nothing {@code PATHLOCK.ACQUIRE}, and returns a
 * {@link Lease} that a watchdog renews until it is released; it blocks the calling thread until
 * the server has answered (and, with a wait, until the locks are granted or the wait runs out).
 * Operation helpers refuse an empty or root path: ask for the whole project with {@code
 * lock(LockRequest.wholeProject(mode))}.
 */
public final class PathLocks {
    private static final System.Logger LOG = System.getLogger("io.pathlock");

    private final Connection connection;
    private final String key;
    private final byte[] keyBytes;
    private final Settings settings;
    private final String note;
    private final boolean operationNotes;
    private final Consumer<LeaseLost> onLost;
    private final ScheduledExecutorService scheduler;

    private PathLocks(Connection connection, String key, Settings settings, String note, boolean operationNotes,
            Consumer<LeaseLost> onLost, ScheduledExecutorService scheduler) {
        this.connection = connection;
        this.key = key;
        this.keyBytes = Reply.bytes(key);
        this.settings = settings;
        this.note = note;
        this.operationNotes = operationNotes;
        this.onLost = onLost;
        this.scheduler = scheduler;
    }

    /**
     * A handle on the project key {@code key}, with the defaults: a TTL of 30 s, no wait, no
     * replicas, a replicas timeout of 1 s, and notes that name each operation.
     */
    public static PathLocks of(Connection connection, String key) {
        Objects.requireNonNull(connection, "connection");
        Objects.requireNonNull(key, "key");
        if (key.isEmpty()) {
            throw new IllegalArgumentException("the project key must not be empty");
        }
        return new PathLocks(connection, key, Settings.DEFAULTS, null, true, null, null);
    }

    // The defaults, each returning a new handle.

    /** The length of every lease; the watchdog renews it every third of it. At least 1 ms. Default 30 s. */
    public PathLocks ttl(Duration ttl) {
        return with(new Settings(Settings.ttlMs(ttl), settings.waitMs(), settings.replicas(),
                settings.replicasTimeoutMs()));
    }

    /**
     * How long an acquire waits on the server for busy locks, first come, first served; the wait
     * runs on a connection of its own, so no lease's renewal queues behind it. Default 0: throw
     * {@link Busy} at once.
     */
    public PathLocks waitFor(Duration wait) {
        return with(new Settings(settings.ttlMs(), Settings.waitMs(wait), settings.replicas(),
                settings.replicasTimeoutMs()));
    }

    /** How many replicas must acknowledge a grant ({@code WAIT}) before it is handed out. Default 0. */
    public PathLocks replicas(int replicas) {
        return with(new Settings(settings.ttlMs(), settings.waitMs(), Settings.replicas(replicas),
                settings.replicasTimeoutMs()));
    }

    /** How long to wait for those acknowledgements, after which {@link NotReplicated} is thrown. Default 1 s. */
    public PathLocks replicasTimeout(Duration timeout) {
        return with(new Settings(settings.ttlMs(), settings.waitMs(), settings.replicas(),
                Settings.replicasTimeoutMs(timeout)));
    }

    /**
     * The note kept with every lock this handle takes ({@code PATHLOCK.ACQUIRE}'s {@code NOTE} in
     * docs/commands.md), shown to whoever it blocks: who is doing what, e.g. {@code "Alice"}. A
     * call's own note replaces it. Without one, each lock's note names its operation
     * ({@code move /A/C -> /B}).
     */
    public PathLocks note(String note) {
        return new PathLocks(connection, key, settings, note, operationNotes, onLost, scheduler);
    }

    /**
     * Whether locks taken without a note get one naming their operation (default true). Each note
     * is kept with its locks in the server's memory (up to 256 bytes here); false sends none.
     */
    public PathLocks operationNotes(boolean enabled) {
        return new PathLocks(connection, key, settings, note, enabled, onLost, scheduler);
    }

    /** Called, on another thread, with the reason whenever a lease of this handle is lost. */
    public PathLocks onLost(Consumer<LeaseLost> listener) {
        return new PathLocks(connection, key, settings, note, operationNotes, listener, scheduler);
    }

    /**
     * Runs the watchdogs' timers on the application's scheduler instead of the client's one daemon
     * thread. Its tasks are short and never block; it is not shut down by the client.
     */
    public PathLocks scheduler(ScheduledExecutorService scheduler) {
        return new PathLocks(connection, key, settings, note, operationNotes, onLost,
                Objects.requireNonNull(scheduler, "scheduler"));
    }

    private PathLocks with(Settings settings) {
        return new PathLocks(connection, key, settings, note, operationNotes, onLost, scheduler);
    }

    public String key() {
        return key;
    }

    public Connection connection() {
        return connection;
    }

    public Duration ttl() {
        return Duration.ofMillis(settings.ttlMs());
    }

    public Duration waitFor() {
        return Duration.ofMillis(settings.waitMs());
    }

    public int replicas() {
        return settings.replicas();
    }

    public Duration replicasTimeout() {
        return Duration.ofMillis(settings.replicasTimeoutMs());
    }

    /** The handle's note, or null. */
    public String note() {
        return note;
    }

    // The operations of the README's table.

    /** Creating or uploading a file: {@code WRITE path}. */
    public Lease upload(String path) {
        return upload(path, AcquireOptions.NONE);
    }

    public Lease upload(String path, AcquireOptions options) {
        return acquire(List.of(LockRequest.write(Paths.notRoot("upload", path))), options, "upload " + path);
    }

    /** Creating a file or folder: {@code WRITE path}. */
    public Lease create(String path) {
        return create(path, AcquireOptions.NONE);
    }

    public Lease create(String path, AcquireOptions options) {
        return acquire(List.of(LockRequest.write(Paths.notRoot("create", path))), options, "create " + path);
    }

    /** Reading or downloading: {@code READ path}. */
    public Lease read(String path) {
        return read(path, AcquireOptions.NONE);
    }

    public Lease read(String path, AcquireOptions options) {
        return acquire(List.of(LockRequest.read(Paths.notRoot("read", path))), options, "read " + path);
    }

    /** Renaming a file or folder: {@code WRITE path}, {@code WRITE newPath}. */
    public Lease rename(String path, String newPath) {
        return rename(path, newPath, AcquireOptions.NONE);
    }

    public Lease rename(String path, String newPath, AcquireOptions options) {
        return acquire(List.of(LockRequest.write(Paths.notRoot("rename", path)),
                LockRequest.write(Paths.notRoot("rename", newPath))), options, "rename " + path + " -> " + newPath);
    }

    /** Moving {@code path} into {@code intoFolder}: {@code WRITE path}, {@code WRITE intoFolder/<last segment of path>}. */
    public Lease move(String path, String intoFolder) {
        return move(path, intoFolder, AcquireOptions.NONE);
    }

    public Lease move(String path, String intoFolder, AcquireOptions options) {
        Objects.requireNonNull(intoFolder, "intoFolder");
        return acquire(List.of(LockRequest.write(Paths.notRoot("move", path)),
                LockRequest.write(Paths.into(intoFolder, path))), options, "move " + path + " -> " + intoFolder);
    }

    /** Copying {@code path} into {@code intoFolder}: {@code READ path}, {@code WRITE intoFolder/<last segment of path>}. */
    public Lease copy(String path, String intoFolder) {
        return copy(path, intoFolder, AcquireOptions.NONE);
    }

    public Lease copy(String path, String intoFolder, AcquireOptions options) {
        Objects.requireNonNull(intoFolder, "intoFolder");
        return acquire(List.of(LockRequest.read(Paths.notRoot("copy", path)),
                LockRequest.write(Paths.into(intoFolder, path))), options, "copy " + path + " -> " + intoFolder);
    }

    /** Deleting a file or folder: {@code WRITE path}. */
    public Lease delete(String path) {
        return delete(path, AcquireOptions.NONE);
    }

    public Lease delete(String path, AcquireOptions options) {
        return acquire(List.of(LockRequest.write(Paths.notRoot("delete", path))), options, "delete " + path);
    }

    /** Emptying the recycle bin: {@code WRITE} each path, all or nothing. */
    public Lease purge(String... paths) {
        return purge(Arrays.asList(paths), AcquireOptions.NONE);
    }

    public Lease purge(Collection<String> paths, AcquireOptions options) {
        List<LockRequest> requests = new ArrayList<>(paths.size());
        for (String path : paths) {
            requests.add(LockRequest.write(Paths.notRoot("purge", path)));
        }
        return acquire(requests, options, "purge " + String.join(" ", paths));
    }

    /** Any {@code (mode, path)} pairs, all or nothing. */
    public Lease lock(LockRequest... requests) {
        return lock(Arrays.asList(requests), AcquireOptions.NONE);
    }

    public Lease lock(Collection<LockRequest> requests, AcquireOptions options) {
        List<LockRequest> list = List.copyOf(requests);
        return acquire(list, options, "lock " + describe(list));
    }

    // Inspecting.

    /**
     * The live locks that would block {@code requests} now ({@code PATHLOCK.CHECK}); empty when they
     * would be granted, queued waiters aside.
     */
    public List<HeldLock> check(Collection<LockRequest> requests) {
        return check(requests, null);
    }

    /** As {@link #check(Collection)}, not counting the locks of {@code token} (an owner may lock inside what it holds). */
    public List<HeldLock> check(Collection<LockRequest> requests, String token) {
        List<Object> words = new ArrayList<>();
        words.add("PATHLOCK.CHECK");
        words.add(key);
        if (token != null) {
            words.add("TOKEN");
            words.add(token);
        }
        for (LockRequest request : nonEmpty(requests)) {
            words.add(request.mode().name());
            words.add(request.path());
        }
        return heldLocks(call(words.toArray()));
    }

    /** Every live lock of the project, in depth-first order ({@code PATHLOCK.LOCKS}). */
    public List<HeldLock> locks() {
        return locks(null, null);
    }

    /** The live locks at or under {@code path}. */
    public List<HeldLock> locks(String path) {
        return locks(path, null);
    }

    /** The live locks of one owner ({@code PATHLOCK.LOCKS key TOKEN token}), e.g. a lease's {@link Lease#token()}. */
    public List<HeldLock> locksOf(String token) {
        return locks(null, Objects.requireNonNull(token, "token"));
    }

    /** The live locks at or under {@code path} (null: everywhere) of {@code token} (null: anyone's). */
    public List<HeldLock> locks(String path, String token) {
        List<Object> words = new ArrayList<>(List.of("PATHLOCK.LOCKS", key));
        if (path != null) {
            // Normalised, a folder named TOKEN is sent as /TOKEN, which the server never takes for the option.
            words.add(Paths.normalise(path));
        }
        if (token != null) {
            words.add("TOKEN");
            words.add(token);
        }
        return heldLocks(call(words.toArray()));
    }

    /** The requests waiting on the server, in queue order ({@code PATHLOCK.WAITERS}). */
    public List<Waiter> waiters() {
        return waiters(null);
    }

    /** The waiting requests whose paths are at or under {@code path}. */
    public List<Waiter> waiters(String path) {
        Object reply = path == null ? call("PATHLOCK.WAITERS", key) : call("PATHLOCK.WAITERS", key, Paths.normalise(path));
        List<Waiter> waiters = new ArrayList<>();
        for (Object entry : Reply.array(reply)) {
            List<Object> fields = Reply.array(entry);
            List<Object> pairs = Reply.array(fields.get(1));
            List<LockRequest> requests = new ArrayList<>(pairs.size() / 2);
            for (int i = 0; i + 1 < pairs.size(); i += 2) {
                requests.add(new LockRequest(Mode.parse(Reply.text(pairs.get(i))), Reply.text(pairs.get(i + 1))));
            }
            waiters.add(new Waiter(Reply.text(fields.get(0)), requests, Reply.integer(fields.get(2)),
                    Reply.integer(fields.get(3)), fields.size() > 4 ? Reply.text(fields.get(4)) : null));
        }
        return waiters;
    }

    @Override
    public String toString() {
        return "PathLocks[" + Paths.quote(key) + ", ttl " + settings.ttlMs() + " ms, wait " + settings.waitMs()
                + " ms, replicas " + settings.replicas() + (note == null ? "" : ", note " + Paths.quote(note)) + "]";
    }

    // Acquiring.

    private Lease acquire(List<LockRequest> requests, AcquireOptions options, String operation) {
        Objects.requireNonNull(options, "options");
        nonEmpty(requests);
        Settings merged = settings.with(options);
        String lockNote = options.note() != null ? options.note()
                : note != null ? note : operationNotes ? Paths.defaultNote(operation) : null;
        // The client makes the token, so that a retry after a lost reply is the same owner: the
        // server then refreshes the grant instead of refusing or doubling it.
        String token = UUID.randomUUID().toString();
        Grant grant = grant(token, requests, merged, lockNote, () -> releaseLater(token, List.of(), merged.ttlMs()));
        long sentAt = grant.sentAt();
        if (sentAt + TimeUnit.MILLISECONDS.toNanos(merged.ttlMs()) - System.nanoTime()
                < TimeUnit.MILLISECONDS.toNanos(merged.periodMs())) {
            // The grant waited long on the server, and the client cannot tell when in that wait it
            // was made: it proves the lease alive with a renewal before handing it out.
            sentAt = System.nanoTime();
            long renewed;
            try {
                renewed = Reply.integer(call("PATHLOCK.RENEW", key, token, merged.ttlMs()));
            } catch (RuntimeException e) {
                releaseLater(token, List.of(), merged.ttlMs());
                throw e;
            }
            if (renewed <= 0) {
                throw new LeaseLost(key, token, LostReason.GONE);
            }
        }
        List<Consumer<LeaseLost>> listeners = new ArrayList<>(2);
        if (onLost != null) {
            listeners.add(onLost);
        }
        if (options.onLost() != null) {
            listeners.add(options.onLost());
        }
        Lease lease = new Lease(this, token, grant.fence(), requests, merged, lockNote, sentAt, listeners);
        if (merged.replicas() > 0) {
            try {
                checkReplicated(grant, merged);
            } catch (RuntimeException e) {
                lease.release();
                throw e;
            }
        }
        return lease;
    }

    /** The outcome of a grant: its fence, when the attempt that got it was sent, and WAIT's reply. */
    record Grant(long fence, long sentAt, Object replicated) {
    }

    /**
     * One {@code ACQUIRE} with the token, followed on the same connection by {@code WAIT} when
     * replicas are asked for. After a connection error the grant may or may not have happened;
     * sending the same token again is then idempotent, so it is retried at least once and for as
     * long as the wait budget lasts. If it still fails, or a retry is refused (a waiter may have
     * queued meanwhile), {@code cleanup} frees whatever an unanswered attempt may have granted.
     */
    Grant grant(String token, List<LockRequest> requests, Settings merged, String lockNote, Runnable cleanup) {
        boolean blocks = merged.waitMs() > 0 || merged.replicas() > 0;
        Lane lane = blocks ? connection.borrow() : connection.shared();
        boolean broken = false;
        long commandTimeout = connection.config().commandTimeoutMs();
        long budgetEnd = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(merged.waitMs());
        try {
            for (int attempt = 1; ; attempt++) {
                long waitLeft = attempt == 1 ? merged.waitMs()
                        : Math.max(0, ceilMillis(budgetEnd - System.nanoTime()));
                List<List<byte[]>> commands = new ArrayList<>(2);
                commands.add(acquireArgs(token, merged.ttlMs(), waitLeft, lockNote, requests));
                if (merged.replicas() > 0) {
                    commands.add(Reply.args("WAIT", merged.replicas(), merged.replicasTimeoutMs()));
                }
                long timeout = commandTimeout + waitLeft + (merged.replicas() > 0 ? merged.replicasTimeoutMs() : 0);
                long sentAt = System.nanoTime();
                Lane.Routed routed;
                try {
                    routed = Futures.await(lane.execute(keyBytes, commands, timeout), timeout + commandTimeout);
                } catch (ConnectionException e) {
                    if (attempt >= 2 && System.nanoTime() >= budgetEnd) {
                        cleanup.run();
                        throw e;
                    }
                    LOG.log(System.Logger.Level.DEBUG, "pathlock: acquire on {0} failed, retrying with its token: {1}",
                            key, e.getMessage());
                    sleep(Math.min(20L * attempt, 200L));
                    continue;
                }
                Object reply = routed.replies().get(0);
                if (reply instanceof Reply.Error error) {
                    throw serverError(error, merged);
                }
                if (reply == null) {
                    if (attempt > 1) {
                        cleanup.run();
                    }
                    throw new Busy(key, requests, blockers(requests, token));
                }
                long fence = Reply.integer(Reply.array(reply).get(1));
                return new Grant(fence, sentAt, merged.replicas() > 0 ? routed.replies().get(1) : null);
            }
        } catch (Futures.Interrupted e) {
            // A wait given up on: closing its connection takes it off the server's queue.
            broken = true;
            cleanup.run();
            throw e;
        } finally {
            if (blocks) {
                connection.giveBack(lane, broken);
            }
        }
    }

    /** Throws unless WAIT's reply counts every replica asked for. */
    void checkReplicated(Grant grant, Settings merged) {
        if (grant.replicated() instanceof Reply.Error error) {
            throw new ServerException("WAIT after the grant failed: " + error.message(), error.message());
        }
        long acknowledged = Reply.integer(grant.replicated());
        if (acknowledged < merged.replicas()) {
            throw new NotReplicated(key, merged.replicas(), acknowledged);
        }
    }

    private List<byte[]> acquireArgs(String token, long ttlMs, long waitMs, String lockNote, List<LockRequest> requests) {
        List<Object> words = new ArrayList<>(10 + 2 * requests.size());
        words.add("PATHLOCK.ACQUIRE");
        words.add(key);
        words.add("TOKEN");
        words.add(token);
        words.add("TTL");
        words.add(ttlMs);
        if (waitMs > 0) {
            words.add("WAIT");
            words.add(waitMs);
        }
        if (lockNote != null) {
            words.add("NOTE");
            words.add(lockNote);
        }
        for (LockRequest request : requests) {
            words.add(request.mode().name());
            words.add(request.path());
        }
        return Reply.args(words.toArray());
    }

    /** The blockers for a Busy; a failure to ask leaves them empty, since the refusal stands anyway. */
    private List<HeldLock> blockers(List<LockRequest> requests, String token) {
        try {
            return check(requests, token);
        } catch (ConnectionException e) {
            return List.of();
        }
    }

    /**
     * Frees a token's locks (all of them, or those at {@code paths}) in the background once the
     * server answers, for a grant that may have happened without the client learning of it. After
     * the TTL there is nothing left to free.
     */
    void releaseLater(String token, List<String> paths, long ttlMs) {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ttlMs);
        List<Object> words = new ArrayList<>(List.of("PATHLOCK.RELEASE", key, token));
        words.addAll(paths);
        List<List<byte[]>> command = List.of(Reply.args(words.toArray()));
        Runnable[] attempt = new Runnable[1];
        attempt[0] = () -> connection.shared()
                .execute(keyBytes, command, connection.config().commandTimeoutMs())
                .whenComplete((routed, error) -> {
                    if (error != null && System.nanoTime() < until && !connection.shared().isClosed()) {
                        scheduler().schedule(attempt[0], Math.min(200, Math.max(10, ttlMs / 3)), TimeUnit.MILLISECONDS);
                    }
                });
        scheduler().schedule(attempt[0], 10, TimeUnit.MILLISECONDS);
    }

    /** One command about the key on the shared connection; error replies thrown. */
    Object call(Object... words) {
        long timeout = connection.config().commandTimeoutMs();
        Lane.Routed routed = Futures.await(
                connection.shared().execute(keyBytes, List.of(Reply.args(words)), timeout), timeout * 2);
        Object reply = routed.replies().get(0);
        if (reply instanceof Reply.Error error) {
            throw serverError(error, null);
        }
        return reply;
    }

    /** An error reply as the exception to throw: WRONGTYPE names the key, a refused TTL gets its units. */
    ServerException serverError(Reply.Error error, Settings merged) {
        if (error.kind().equals("WRONGTYPE")) {
            return new WrongType(key, error.message());
        }
        if (merged != null && error.message().startsWith("ERR invalid TTL")) {
            return new ServerException("the server refused a ttl of " + merged.ttlMs() + " ms (" + error.message()
                    + "; the server's pathlock.max-ttl, in ms, is the most it takes)", error.message());
        }
        return new ServerException(error.message());
    }

    ScheduledExecutorService scheduler() {
        return scheduler != null ? scheduler : Scheduling.watchdog();
    }

    byte[] keyBytes() {
        return keyBytes;
    }

    Settings settings() {
        return settings;
    }

    private static List<HeldLock> heldLocks(Object reply) {
        List<HeldLock> locks = new ArrayList<>();
        for (Object entry : Reply.array(reply)) {
            List<Object> fields = Reply.array(entry);
            locks.add(new HeldLock(Reply.text(fields.get(0)), Mode.parse(Reply.text(fields.get(1))),
                    Reply.text(fields.get(2)), Reply.integer(fields.get(3)), Reply.integer(fields.get(4)),
                    fields.size() > 5 ? Reply.text(fields.get(5)) : null));
        }
        return locks;
    }

    private static <T extends Collection<LockRequest>> T nonEmpty(T requests) {
        Objects.requireNonNull(requests, "requests");
        if (requests.isEmpty()) {
            throw new IllegalArgumentException("at least one lock must be requested");
        }
        for (LockRequest request : requests) {
            Objects.requireNonNull(request, "a lock request is null");
        }
        return requests;
    }

    static String describe(List<LockRequest> requests) {
        return requests.stream().map(LockRequest::toString).collect(Collectors.joining(", "));
    }

    private static long ceilMillis(long nanos) {
        return (nanos + 999_999) / 1_000_000;
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new Futures.Interrupted(e);
        }
    }
}
