package io.pathlock;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulConnection;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.output.IntegerOutput;
import io.lettuce.core.output.NestedMultiOutput;
import io.lettuce.core.protocol.CommandArgs;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;
import java.util.stream.Collectors;

/**
 * The path locks of one project key, with the defaults of every lease taken through it, on a
 * Lettuce client.
 *
 * <pre>{@code
 * RedisClient redis = RedisClient.create("redis://localhost:6379");   // the application's
 * PathLocks drive = PathLocks.of(redis, "proj:42").ttl(Duration.ofSeconds(60));   // once
 * try (Lease lease = drive.move("/A/C", "/B")) {          // WRITE /A/C, WRITE /B/C
 *     moveFolder("/A/C", "/B/C", lease.fence());
 * } catch (Busy busy) {
 *     tell(busy.blockers().isEmpty() ? "try again" : busy.blockers().get(0).note());
 * }
 * }</pre>
 *
 * <p>{@code PathLocks.of(client, key)} opens the client's connections that pathlock uses (one
 * shared by every short command, and up to {@link Builder#maxWaitingConnections(int)} for calls
 * that wait on the server), so it is made once, when the application starts; {@link
 * #project(String)} gives the handle of another project key on the same connections, and every
 * setting returns a new handle on them too. A handle is immutable and thread-safe, and those
 * derived ones cost nothing: make one per request. TLS, ACL users, Sentinel, a cluster's topology
 * and reconnects are the client's, as the application configured them. {@link #close()} closes
 * what pathlock opened (and shuts down a client it made itself from a URI).
 *
 * <p>Each operation asks for exactly the locks of one cloud-drive operation in a single
 * all-or-nothing {@code PATHLOCK.ACQUIRE}, and returns a {@link Lease} that a watchdog renews
 * until it is released. The methods here block the calling thread until the server has answered
 * (and, with a wait, until the locks are granted or the wait runs out); {@link #async()} has the
 * same operations returning {@code CompletableFuture}s. Operation helpers refuse an empty or root
 * path (ask for the whole project with {@code lock(LockRequest.wholeProject(mode))}), a move or
 * copy into the path itself, its subtree or its own folder, and a rename to anything but a new
 * name in the same folder, before anything is sent.
 */
public final class PathLocks implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.pathlock");

    private final Redis redis;
    private final String key;
    private final Settings settings;
    private final String note;
    private final boolean operationNotes;
    private final Consumer<LeaseLost> onLost;
    private final ScheduledExecutorService scheduler;

    private PathLocks(Redis redis, String key, Settings settings, String note, boolean operationNotes,
            Consumer<LeaseLost> onLost, ScheduledExecutorService scheduler) {
        this.redis = redis;
        this.key = checkKey(key);
        this.settings = settings;
        this.note = note;
        this.operationNotes = operationNotes;
        this.onLost = onLost;
        this.scheduler = scheduler;
    }

    private static String checkKey(String key) {
        Objects.requireNonNull(key, "key");
        if (key.isEmpty()) {
            throw new IllegalArgumentException("the project key must not be empty");
        }
        return key;
    }

    // Making one.

    /**
     * A handle on the project key {@code key} through the application's {@code RedisClient} (a
     * standalone server, or Sentinel's master), with the defaults: a TTL of 30 s, no wait, no
     * replicas, a replicas timeout of 1 s, and notes that name each operation. Its connections
     * open on first use; the client stays the application's.
     *
     * @param client the application's client, made with the URI of the server
     * @param key    the project key
     * @return the handle
     */
    public static PathLocks of(RedisClient client, String key) {
        return builder(client).build(key);
    }

    /**
     * A handle on {@code key} through the application's {@code RedisClusterClient}: each project
     * key's commands go to the master of its slot, as Lettuce routes its own.
     *
     * @param client the application's cluster client
     * @param key    the project key
     * @return the handle
     */
    public static PathLocks of(RedisClusterClient client, String key) {
        return builder(client).build(key);
    }

    /**
     * A handle on {@code key} through a {@code RedisClient} of its own, made for {@code uri} and
     * shut down by {@link #close()}.
     *
     * @param uri the server (standalone, or a Sentinel URI)
     * @param key the project key
     * @return the handle
     */
    public static PathLocks of(RedisURI uri, String key) {
        return builder(uri).build(key);
    }

    /**
     * A handle on {@code key} through a {@code RedisClient} of its own, made for a URL such as
     * {@code redis://localhost:6379}, {@code rediss://user:secret@host} or
     * {@code redis-sentinel://host:26379#mymaster}, and shut down by {@link #close()}.
     *
     * @param url the server, as Lettuce's {@code RedisURI.create} reads it
     * @param key the project key
     * @return the handle
     */
    public static PathLocks of(String url, String key) {
        return builder(RedisURI.create(Objects.requireNonNull(url, "url"))).build(key);
    }

    /**
     * Starts a handle on the application's client with settings of its connections.
     *
     * @param client the application's client
     * @return a builder
     */
    public static Builder builder(RedisClient client) {
        return new Builder(Objects.requireNonNull(client, "client"), null);
    }

    /**
     * Starts a handle on the application's cluster client with settings of its connections.
     *
     * @param client the application's cluster client
     * @return a builder
     */
    public static Builder builder(RedisClusterClient client) {
        return new Builder(Objects.requireNonNull(client, "client"), null);
    }

    /**
     * Starts a handle on a client of its own, made for {@code uri}, with settings of its connections.
     *
     * @param uri the server
     * @return a builder
     */
    public static Builder builder(RedisURI uri) {
        return new Builder(null, Objects.requireNonNull(uri, "uri"));
    }

    /** Settings of the connections a handle and those derived from it share. */
    public static final class Builder {
        private final io.lettuce.core.AbstractRedisClient client;
        private final RedisURI uri;
        private RedisURI connectTo;
        private int maxWaitingConnections = Redis.DEFAULT_MAX_WAITING_CONNECTIONS;
        private PathLockObserver observer = PathLockObserver.NONE;

        private Builder(io.lettuce.core.AbstractRedisClient client, RedisURI uri) {
            this.client = client;
            this.uri = uri;
        }

        /**
         * The most connections open at once for calls that wait on the server (an acquire that
         * waits for busy locks, and any acquire with replicas, for {@code WAIT}), beside the one
         * shared connection. A call that finds them all in use waits for one, first come first
         * served, within its own wait budget (see {@link TooManyWaits}). Default 8.
         *
         * @param max 1 or more
         * @return this builder
         */
        public Builder maxWaitingConnections(int max) {
            if (max < 1) {
                throw new IllegalArgumentException("maxWaitingConnections must be 1 or more, not " + max);
            }
            this.maxWaitingConnections = max;
            return this;
        }

        /**
         * What the handle and every handle derived from it report as they work: each acquire's
         * outcome and time, each renewal, each lease's start and end (the Spring Boot starter's
         * Micrometer meters). Default: nothing.
         *
         * @param observer the observer
         * @return this builder
         */
        public Builder observer(PathLockObserver observer) {
            this.observer = Objects.requireNonNull(observer, "observer");
            return this;
        }

        /**
         * The server the application's {@code RedisClient} connects to for pathlock, for a client
         * made without one ({@code RedisClient.create()}, then {@code connect(uri)}), or made with
         * another. Connections then open through Lettuce's asynchronous {@code connectAsync}; without
         * it they open with the client's own URI, which Lettuce only offers blocking (on a thread of
         * pathlock's, never the caller's).
         *
         * @param uri the server (standalone, or a Sentinel URI)
         * @return this builder
         */
        public Builder uri(RedisURI uri) {
            if (!(client instanceof RedisClient)) {
                throw new IllegalArgumentException("uri(...) is for the application's RedisClient; a cluster client has its "
                        + "own seeds, and a handle made from a URI has that one");
            }
            this.connectTo = Objects.requireNonNull(uri, "uri");
            return this;
        }

        /**
         * The handle on {@code key}, with the default settings (see {@link PathLocks#of(RedisClient, String)}).
         *
         * @param key the project key
         * @return the handle
         */
        public PathLocks build(String key) {
            checkKey(key);
            Redis redis = client != null
                    ? new Redis(client, connectTo, false, maxWaitingConnections, observer)
                    : new Redis(RedisClient.create(uri), uri, true, maxWaitingConnections, observer);
            return new PathLocks(redis, key, Settings.DEFAULTS, null, true, null, null);
        }
    }

    /**
     * The handle of another project key, on the same connections and with the same settings: the
     * way to a handle per project (or per request), which costs nothing.
     *
     * @param key the project key
     * @return the handle
     */
    public PathLocks project(String key) {
        return new PathLocks(redis, key, settings, note, operationNotes, onLost, scheduler);
    }

    // The defaults, each returning a new handle.

    /**
     * The length of every lease; the watchdog renews it every third of it. At least 1 ms; a
     * fraction of a millisecond is rounded up. Default 30 s.
     *
     * @param ttl the lease's length
     * @return a new handle
     */
    public PathLocks ttl(Duration ttl) {
        return with(new Settings(Settings.ttlMs(ttl), settings.waitMs(), settings.replicas(),
                settings.replicasTimeoutMs()));
    }

    /**
     * How long an acquire waits on the server for busy locks, first come, first served; the wait
     * runs on a connection of its own, so no lease's renewal queues behind it. Default 0: throw
     * {@link Busy} at once.
     *
     * @param wait 0 or more
     * @return a new handle
     */
    public PathLocks waitFor(Duration wait) {
        return with(new Settings(settings.ttlMs(), Settings.waitMs(wait), settings.replicas(),
                settings.replicasTimeoutMs()));
    }

    /**
     * How many replicas must acknowledge a grant ({@code WAIT}) before it is handed out. Default 0.
     *
     * @param replicas 0 or more
     * @return a new handle
     */
    public PathLocks replicas(int replicas) {
        return with(new Settings(settings.ttlMs(), settings.waitMs(), Settings.replicas(replicas),
                settings.replicasTimeoutMs()));
    }

    /**
     * How long to wait for those acknowledgements, after which {@link NotReplicated} is thrown. Default 1 s.
     *
     * @param timeout at least 1 ms
     * @return a new handle
     */
    public PathLocks replicasTimeout(Duration timeout) {
        return with(new Settings(settings.ttlMs(), settings.waitMs(), settings.replicas(),
                Settings.replicasTimeoutMs(timeout)));
    }

    /**
     * The note kept with every lock this handle takes ({@code PATHLOCK.ACQUIRE}'s {@code NOTE} in
     * docs/commands.md), shown to whoever it blocks: who is doing what, e.g. {@code "Alice"}. A
     * call's own note replaces it. Without one, each lock's note names its operation
     * ({@code move /A/C -> /B}).
     *
     * @param note the note, or null for none
     * @return a new handle
     */
    public PathLocks note(String note) {
        return new PathLocks(redis, key, settings, note, operationNotes, onLost, scheduler);
    }

    /**
     * Whether locks taken without a note get one naming their operation (default true). Each note
     * is kept with its locks in the server's memory (up to 256 bytes here); false sends none.
     *
     * @param enabled whether to send the operations' own notes
     * @return a new handle
     */
    public PathLocks operationNotes(boolean enabled) {
        return new PathLocks(redis, key, settings, note, enabled, onLost, scheduler);
    }

    /**
     * Called, on another thread, with the reason whenever a lease of this handle is lost.
     *
     * @param listener the listener, or null for none
     * @return a new handle
     */
    public PathLocks onLost(Consumer<LeaseLost> listener) {
        return new PathLocks(redis, key, settings, note, operationNotes, listener, scheduler);
    }

    /**
     * Runs the watchdogs' timers on the application's scheduler instead of the client's one daemon
     * thread. Its tasks are short and never block; it is not shut down by the client.
     *
     * @param scheduler the application's scheduler
     * @return a new handle
     */
    public PathLocks scheduler(ScheduledExecutorService scheduler) {
        return new PathLocks(redis, key, settings, note, operationNotes, onLost,
                Objects.requireNonNull(scheduler, "scheduler"));
    }

    private PathLocks with(Settings settings) {
        return new PathLocks(redis, key, settings, note, operationNotes, onLost, scheduler);
    }

    /**
     * The project key.
     *
     * @return the key
     */
    public String key() {
        return key;
    }

    /**
     * The length of the leases this handle takes.
     *
     * @return the TTL
     */
    public Duration ttl() {
        return Duration.ofMillis(settings.ttlMs());
    }

    /**
     * How long this handle's acquires wait for busy locks.
     *
     * @return the wait, zero for none
     */
    public Duration waitFor() {
        return Duration.ofMillis(settings.waitMs());
    }

    /**
     * How many replicas must acknowledge a grant.
     *
     * @return the count, 0 for none
     */
    public int replicas() {
        return settings.replicas();
    }

    /**
     * How long to wait for the replicas' acknowledgements.
     *
     * @return the timeout
     */
    public Duration replicasTimeout() {
        return Duration.ofMillis(settings.replicasTimeoutMs());
    }

    /**
     * The handle's note.
     *
     * @return the note, or null
     */
    public String note() {
        return note;
    }

    /**
     * The cap on connections for waiting calls (see {@link Builder#maxWaitingConnections(int)}).
     *
     * @return the cap
     */
    public int maxWaitingConnections() {
        return redis.maxWaitingConnections();
    }

    /**
     * The same operations, each returning a {@code CompletableFuture} at once instead of blocking:
     * nothing in them blocks a thread, Netty's event loops included.
     *
     * @return the asynchronous view of this handle
     */
    public AsyncPathLocks async() {
        return new AsyncPathLocks(this);
    }

    /**
     * Closes the connections this handle and every handle derived from it share, and shuts down
     * the client if the handle made it from a URI; the application's own client stays open. Leases
     * still held stop renewing: their locks stay on the server until their TTL runs out, and each is
     * reported lost ({@link LostReason#EXPIRED}) at its deadline, so that work under it stops. A
     * lease released after the close cannot free its locks either; its release does not throw, and
     * logs a warning that says so. Release the leases first, to free their locks at once.
     * Closing twice does nothing.
     */
    @Override
    public void close() {
        redis.close();
    }

    // The operations of the README's table.

    /**
     * Creating or uploading a file: {@code WRITE path}.
     *
     * @param path the file
     * @return the lease
     */
    public Lease upload(String path) {
        return upload(path, AcquireOptions.NONE);
    }

    /**
     * {@link #upload(String)} with per-call settings.
     *
     * @param path    the file
     * @param options the call's settings
     * @return the lease
     */
    public Lease upload(String path, AcquireOptions options) {
        return Futures.blocking(() -> async().upload(path, options));
    }

    /**
     * Creating a file or folder: {@code WRITE path}.
     *
     * @param path the file or folder
     * @return the lease
     */
    public Lease create(String path) {
        return create(path, AcquireOptions.NONE);
    }

    /**
     * {@link #create(String)} with per-call settings.
     *
     * @param path    the file or folder
     * @param options the call's settings
     * @return the lease
     */
    public Lease create(String path, AcquireOptions options) {
        return Futures.blocking(() -> async().create(path, options));
    }

    /**
     * Reading or downloading: {@code READ path}.
     *
     * @param path the file or folder
     * @return the lease
     */
    public Lease read(String path) {
        return read(path, AcquireOptions.NONE);
    }

    /**
     * {@link #read(String)} with per-call settings.
     *
     * @param path    the file or folder
     * @param options the call's settings
     * @return the lease
     */
    public Lease read(String path, AcquireOptions options) {
        return Futures.blocking(() -> async().read(path, options));
    }

    /**
     * Renaming a file or folder within its folder: {@code WRITE path}, {@code WRITE
     * <folder of path>/newName}; {@code rename("/A/C", "C2")} locks {@code /A/C} and {@code /A/C2}.
     * The new name is one segment other than the current one; {@link #move} changes folders.
     *
     * @param path    the file or folder
     * @param newName its new name, e.g. {@code "C2"}
     * @return the lease
     */
    public Lease rename(String path, String newName) {
        return rename(path, newName, AcquireOptions.NONE);
    }

    /**
     * {@link #rename(String, String)} with per-call settings.
     *
     * @param path    the file or folder
     * @param newName its new name
     * @param options the call's settings
     * @return the lease
     */
    public Lease rename(String path, String newName, AcquireOptions options) {
        return Futures.blocking(() -> async().rename(path, newName, options));
    }

    /**
     * Moving {@code path} into {@code intoFolder}: {@code WRITE path}, {@code WRITE
     * intoFolder/<last segment of path>}. Refused when {@code intoFolder} is the path itself, inside
     * it, or its own folder.
     *
     * @param path       the file or folder
     * @param intoFolder the folder it goes into ({@code "/"} for the project root)
     * @return the lease
     */
    public Lease move(String path, String intoFolder) {
        return move(path, intoFolder, AcquireOptions.NONE);
    }

    /**
     * {@link #move(String, String)} with per-call settings.
     *
     * @param path       the file or folder
     * @param intoFolder the folder it goes into
     * @param options    the call's settings
     * @return the lease
     */
    public Lease move(String path, String intoFolder, AcquireOptions options) {
        return Futures.blocking(() -> async().move(path, intoFolder, options));
    }

    /**
     * Copying {@code path} into {@code intoFolder}: {@code READ path}, {@code WRITE
     * intoFolder/<last segment of path>}. Refused as {@link #move(String, String)} is.
     *
     * @param path       the file or folder
     * @param intoFolder the folder the copy goes into
     * @return the lease
     */
    public Lease copy(String path, String intoFolder) {
        return copy(path, intoFolder, AcquireOptions.NONE);
    }

    /**
     * {@link #copy(String, String)} with per-call settings.
     *
     * @param path       the file or folder
     * @param intoFolder the folder the copy goes into
     * @param options    the call's settings
     * @return the lease
     */
    public Lease copy(String path, String intoFolder, AcquireOptions options) {
        return Futures.blocking(() -> async().copy(path, intoFolder, options));
    }

    /**
     * Deleting a file or folder: {@code WRITE path}.
     *
     * @param path the file or folder
     * @return the lease
     */
    public Lease delete(String path) {
        return delete(path, AcquireOptions.NONE);
    }

    /**
     * {@link #delete(String)} with per-call settings.
     *
     * @param path    the file or folder
     * @param options the call's settings
     * @return the lease
     */
    public Lease delete(String path, AcquireOptions options) {
        return Futures.blocking(() -> async().delete(path, options));
    }

    /**
     * Emptying the recycle bin: {@code WRITE} each path, all or nothing.
     *
     * @param paths the paths
     * @return the lease
     */
    public Lease purge(String... paths) {
        return purge(Arrays.asList(paths), AcquireOptions.NONE);
    }

    /**
     * {@link #purge(String...)} with per-call settings.
     *
     * @param paths   the paths
     * @param options the call's settings
     * @return the lease
     */
    public Lease purge(Collection<String> paths, AcquireOptions options) {
        return Futures.blocking(() -> async().purge(paths, options));
    }

    /**
     * Any {@code (mode, path)} pairs, all or nothing.
     *
     * @param requests the locks
     * @return the lease
     */
    public Lease lock(LockRequest... requests) {
        return lock(Arrays.asList(requests), AcquireOptions.NONE);
    }

    /**
     * {@link #lock(LockRequest...)} with per-call settings.
     *
     * @param requests the locks
     * @param options  the call's settings
     * @return the lease
     */
    public Lease lock(Collection<LockRequest> requests, AcquireOptions options) {
        return Futures.blocking(() -> async().lock(requests, options));
    }

    // Inspecting.

    /**
     * The live locks that would block {@code requests} now ({@code PATHLOCK.CHECK}); empty when they
     * would be granted, queued waiters aside.
     *
     * @param requests the locks one would ask for
     * @return the blockers, with their notes
     */
    public List<HeldLock> check(Collection<LockRequest> requests) {
        return check(requests, null);
    }

    /**
     * As {@link #check(Collection)}, not counting the locks of {@code token} (an owner may lock inside what it holds).
     *
     * @param requests the locks one would ask for
     * @param token    the owner whose locks do not count, or null
     * @return the blockers
     */
    public List<HeldLock> check(Collection<LockRequest> requests, String token) {
        return Futures.blocking(() -> checkAsync(requests, token));
    }

    /**
     * Every live lock of the project, in depth-first order ({@code PATHLOCK.LOCKS}).
     *
     * @return the locks
     */
    public List<HeldLock> locks() {
        return locks(null, null);
    }

    /**
     * The live locks at or under {@code path}.
     *
     * @param path the path
     * @return the locks
     */
    public List<HeldLock> locks(String path) {
        return locks(path, null);
    }

    /**
     * The live locks of one owner ({@code PATHLOCK.LOCKS key TOKEN token}), e.g. a lease's {@link Lease#token()}.
     *
     * @param token the owner
     * @return the locks
     */
    public List<HeldLock> locksOf(String token) {
        return locks(null, Objects.requireNonNull(token, "token"));
    }

    /**
     * The live locks at or under {@code path} (null: everywhere) of {@code token} (null: anyone's).
     *
     * @param path  the path, or null
     * @param token the owner, or null
     * @return the locks
     */
    public List<HeldLock> locks(String path, String token) {
        return Futures.blocking(() -> locksAsync(path, token));
    }

    /**
     * The requests waiting on the server, in queue order ({@code PATHLOCK.WAITERS}).
     *
     * @return the waiters
     */
    public List<Waiter> waiters() {
        return waiters(null);
    }

    /**
     * The waiting requests whose paths are at or under {@code path}.
     *
     * @param path the path, or null for all
     * @return the waiters
     */
    public List<Waiter> waiters(String path) {
        return Futures.blocking(() -> waitersAsync(path));
    }

    @Override
    public String toString() {
        return "PathLocks[" + Paths.quote(key) + ", ttl " + settings.ttlMs() + " ms, wait " + settings.waitMs()
                + " ms, replicas " + settings.replicas() + (note == null ? "" : ", note " + Paths.quote(note)) + "]";
    }

    // Inspecting, asynchronously (AsyncPathLocks's).

    CompletableFuture<List<HeldLock>> checkAsync(Collection<LockRequest> requests, String token) {
        CommandArgs<String, String> args = args();
        if (token != null) {
            args.add("TOKEN").add(token);
        }
        for (LockRequest request : nonEmpty(requests)) {
            args.add(request.mode().name()).add(request.path());
        }
        return mapped(array(Keyword.CHECK, args).thenApply(PathLocks::heldLocks));
    }

    CompletableFuture<List<HeldLock>> locksAsync(String path, String token) {
        CommandArgs<String, String> args = args();
        if (path != null) {
            // Normalised, a folder named TOKEN is sent as /TOKEN, which the server never takes for the option.
            args.add(Paths.normalise(path));
        }
        if (token != null) {
            args.add("TOKEN").add(token);
        }
        return mapped(array(Keyword.LOCKS, args).thenApply(PathLocks::heldLocks));
    }

    CompletableFuture<List<Waiter>> waitersAsync(String path) {
        CommandArgs<String, String> args = args();
        if (path != null) {
            args.add(Paths.normalise(path));
        }
        return mapped(array(Keyword.WAITERS, args).thenApply(reply -> {
            List<Waiter> waiters = new ArrayList<>();
            for (Object entry : reply) {
                List<Object> fields = Replies.array(entry);
                List<Object> pairs = Replies.array(fields.get(1));
                List<LockRequest> requests = new ArrayList<>(pairs.size() / 2);
                for (int i = 0; i + 1 < pairs.size(); i += 2) {
                    requests.add(new LockRequest(Mode.parse(Replies.text(pairs.get(i))), Replies.text(pairs.get(i + 1))));
                }
                waiters.add(new Waiter(Replies.text(fields.get(0)), requests, Replies.integer(fields.get(2)),
                        Replies.integer(fields.get(3)), fields.size() > 4 ? Replies.text(fields.get(4)) : null));
            }
            return waiters;
        }));
    }

    /** The future with its failure as the client's exception (an error reply a ServerException). */
    private <T> CompletableFuture<T> mapped(CompletableFuture<T> future) {
        return future.handle((value, error) -> {
            if (error != null) {
                throw Errors.of(error, key, null);
            }
            return value;
        });
    }

    // Acquiring.

    /** An operation's locks, checked, then acquired; argument errors are thrown before anything is sent. */
    CompletableFuture<Lease> acquire(List<LockRequest> requests, AcquireOptions options, String operation) {
        Objects.requireNonNull(options, "options");
        nonEmpty(requests);
        Settings merged = settings.with(options);
        // An empty note is none at all: nothing is sent, and nothing takes its place.
        String lockNote = options.note() != null ? emptyAsNone(options.note())
                : note != null ? emptyAsNone(note) : operationNotes ? Paths.defaultNote(operation) : null;
        // The client makes the token, so that a retry after a lost reply is the same owner: the
        // server then refreshes the grant instead of refusing or doubling it.
        String token = UUID.randomUUID().toString();
        Runnable cleanup = once(() -> releaseLater(token, List.of(), merged.ttlMs()));
        Call call = new Call(redis);
        long started = System.nanoTime();
        boolean[] waited = new boolean[1];
        // Any completion but the client's own gives the call up: the dedicated connection closed
        // takes a wait off the server's queue, and the token released frees a grant that raced it.
        Futures.Handed<Lease> result = new Futures.Handed<>(() -> {
            call.cancel();
            cleanup.run();
        });
        grant(token, requests, merged, lockNote, cleanup, call)
                .thenApply(grant -> {
                    waited[0] = grant.waited();
                    return grant;
                })
                .thenCompose(grant -> proveFresh(grant, token, merged, cleanup))
                .thenCompose(grant -> {
                    List<Consumer<LeaseLost>> listeners = new ArrayList<>(2);
                    if (onLost != null) {
                        listeners.add(onLost);
                    }
                    if (options.onLost() != null) {
                        listeners.add(options.onLost());
                    }
                    Lease lease = new Lease(this, token, grant.fence(), requests, merged, lockNote, grant.sentAt(), listeners);
                    if (merged.replicas() > 0) {
                        try {
                            checkReplicated(grant, merged);
                        } catch (RuntimeException e) {
                            return lease.releaseAsync().handle((ignored, error) -> {
                                throw e;
                            });
                        }
                    }
                    return CompletableFuture.completedFuture(lease);
                })
                .whenComplete((lease, error) -> {
                    RuntimeException failure = error == null ? null : Errors.of(error, key, merged);
                    observed(operation, started, failure, waited[0]);
                    if (failure != null) {
                        result.fail(failure);
                        return;
                    }
                    // Counted held before the caller can release it; a call given up on (its future
                    // completed by the caller, or an interrupted caller) while it was granted
                    // releases it, which ends it.
                    lease.handedOut();
                    if (!result.settle(lease)) {
                        lease.releaseAsync();
                    }
                });
        return result.future();
    }

    /** Reports an acquire's end to the observer: {@code operation} is its description, whose first word names it. */
    void observed(String operation, long started, Throwable failure, boolean waited) {
        PathLockObserver.Outcome outcome = failure == null
                ? (waited ? PathLockObserver.Outcome.WAITED : PathLockObserver.Outcome.GRANTED)
                : failure instanceof Busy ? PathLockObserver.Outcome.BUSY : PathLockObserver.Outcome.ERROR;
        int space = operation.indexOf(' ');
        redis.observer().acquired(key, space < 0 ? operation : operation.substring(0, space), outcome,
                Duration.ofNanos(System.nanoTime() - started));
    }

    /**
     * The outcome of a grant: its fence, when the attempt that got it was sent, WAIT's reply (or
     * failure), and whether it was refused at first and granted after waiting.
     */
    record Grant(long fence, long sentAt, Redis.Outcome replicated, boolean waited) {
        Grant(long fence, long sentAt, Redis.Outcome replicated) {
            this(fence, sentAt, replicated, false);
        }

        Grant afterWaiting() {
            return new Grant(fence, sentAt, replicated, true);
        }
    }

    /**
     * One call's dedicated connection, so that giving the call up (its future completed by the
     * caller, cancelled or otherwise, or an interrupted caller) closes it, which takes a wait off
     * the server's queue.
     */
    static final class Call {
        private final Redis redis;
        private StatefulConnection<String, String> lent;
        private boolean cancelled;

        Call(Redis redis) {
            this.redis = redis;
        }

        /** Takes the connection for this call; false (and the connection given back) once the call is given up. */
        boolean lend(StatefulConnection<String, String> connection) {
            synchronized (this) {
                if (!cancelled) {
                    lent = connection;
                    return true;
                }
            }
            redis.giveBack(connection, false);
            return false;
        }

        /** Gives the connection back ({@code broken}: closed, its fate unknown), unless the call already did. */
        void giveBack(boolean broken) {
            StatefulConnection<String, String> connection;
            synchronized (this) {
                connection = lent;
                lent = null;
            }
            if (connection != null) {
                redis.giveBack(connection, broken);
            }
        }

        void cancel() {
            StatefulConnection<String, String> connection;
            synchronized (this) {
                cancelled = true;
                connection = lent;
                lent = null;
            }
            if (connection != null) {
                redis.giveBack(connection, true);
            }
        }
    }

    /**
     * One {@code ACQUIRE} with the token. Without replicas it is first sent on the shared
     * connection without a wait: most are granted at once, and a refusal is {@link Busy} unless
     * the call may wait; then it waits on the server on a dedicated connection for what is left of
     * its wait (or, if none comes free in that time, asks once more without waiting). With
     * replicas, the {@code ACQUIRE} (waiting, if asked to) and the {@code WAIT} that counts its
     * replication go together on a dedicated connection. After a failure whose outcome is unknown
     * (no reply), {@code cleanup} frees whatever may have been granted, once the server answers.
     */
    CompletableFuture<Grant> grant(String token, List<LockRequest> requests, Settings merged, String lockNote,
            Runnable cleanup, Call call) {
        long started = System.nanoTime();
        CompletableFuture<Grant> granted;
        if (merged.replicas() == 0) {
            long sentAt = System.nanoTime();
            granted = array(Keyword.ACQUIRE, acquireArgs(token, merged.ttlMs(), 0, lockNote, requests))
                    .thenCompose(reply -> {
                        if (!Replies.isNil(reply)) {
                            return CompletableFuture.completedFuture(new Grant(fence(reply), sentAt, null));
                        }
                        if (merged.waitMs() == 0) {
                            return busy(requests, token);
                        }
                        return waitOnServer(token, requests, merged, lockNote, call, started).thenApply(Grant::afterWaiting);
                    });
        } else {
            long budget = merged.waitMs() + merged.replicasTimeoutMs();
            granted = redis.borrow(budget).thenCompose(connection -> dedicated(connection, token, requests, merged,
                    lockNote, call, merged.waitMs()));
        }
        return granted.whenComplete((grant, error) -> {
            if (error != null && !isKnownOutcome(error)) {
                cleanup.run();
            }
        });
    }

    /** A refusal, a wait that ran out, or an error reply: nothing was granted, so there is nothing to free. */
    private static boolean isKnownOutcome(Throwable error) {
        Throwable cause = Futures.unwrap(error);
        return cause instanceof Busy || cause instanceof TooManyWaits || cause instanceof ServerException
                || Errors.isReply(cause);
    }

    /** The wait on the server, on a dedicated connection, for what is left of the call's budget. */
    private CompletableFuture<Grant> waitOnServer(String token, List<LockRequest> requests, Settings merged,
            String lockNote, Call call, long started) {
        long left = ceilMillis(started + TimeUnit.MILLISECONDS.toNanos(merged.waitMs()) - System.nanoTime());
        return redis.borrow(Math.max(0, left)).handle((connection, error) -> {
            if (error == null) {
                long waitLeft = Math.max(0, ceilMillis(started + TimeUnit.MILLISECONDS.toNanos(merged.waitMs())
                        - System.nanoTime()));
                return dedicated(connection, token, requests, merged, lockNote, call, waitLeft);
            }
            if (Futures.unwrap(error) instanceof TooManyWaits) {
                // The wait ran out before a connection came free: what a wait that ran out on the
                // server would say, asked once more without waiting.
                long sentAt = System.nanoTime();
                return array(Keyword.ACQUIRE, acquireArgs(token, merged.ttlMs(), 0, lockNote, requests))
                        .thenCompose(reply -> Replies.isNil(reply) ? busy(requests, token)
                                : CompletableFuture.completedFuture(new Grant(fence(reply), sentAt, null)));
            }
            return CompletableFuture.<Grant>failedFuture(error);
        }).thenCompose(next -> next);
    }

    /** {@code ACQUIRE} (with {@code WAIT waitMs} if any), then {@code WAIT} for replicas if asked, on a dedicated connection. */
    private CompletableFuture<Grant> dedicated(StatefulConnection<String, String> connection, String token,
            List<LockRequest> requests, Settings merged, String lockNote, Call call, long waitMs) {
        if (!call.lend(connection)) {
            return CompletableFuture.failedFuture(new CancellationException("the call was given up"));
        }
        List<Redis.Step> steps = new ArrayList<>(2);
        steps.add(new Redis.Step(Keyword.ACQUIRE, acquireArgs(token, merged.ttlMs(), waitMs, lockNote, requests),
                () -> new NestedMultiOutput<>(Redis.CODEC)));
        if (merged.replicas() > 0) {
            steps.add(new Redis.Step(Keyword.WAIT, new CommandArgs<>(Redis.CODEC).add(merged.replicas())
                    .add(merged.replicasTimeoutMs()), () -> new IntegerOutput<>(Redis.CODEC)));
        }
        Duration timeout = redis.commandTimeout().plusMillis(waitMs + (merged.replicas() > 0 ? merged.replicasTimeoutMs() : 0));
        long sentAt = System.nanoTime();
        return redis.onDedicated(connection, key, steps, timeout)
                // Lettuce's own timeout may be off, or fixed by the application: this one holds.
                .orTimeout(timeout.plus(redis.commandTimeout()).toMillis(), TimeUnit.MILLISECONDS)
                .whenComplete((outcomes, error) -> {
                    // A failed or timed-out call leaves the connection out of step: closed.
                    boolean broken = error != null || outcomes.stream().anyMatch(o -> o.failure() != null && !Errors.isReply(o.failure()));
                    call.giveBack(broken);
                })
                .thenCompose(outcomes -> {
                    List<Object> reply = Replies.array(outcomes.get(0).get(key, merged));
                    if (Replies.isNil(reply)) {
                        return busy(requests, token);
                    }
                    return CompletableFuture.completedFuture(new Grant(fence(reply), sentAt,
                            merged.replicas() > 0 ? outcomes.get(1) : null));
                });
    }

    /**
     * If the grant waited so long on the server that less than a renewal period of its TTL is
     * certainly left (the client cannot tell when in that wait it was made), it proves the lease
     * alive with a renewal before handing it out.
     */
    private CompletableFuture<Grant> proveFresh(Grant grant, String token, Settings merged, Runnable cleanup) {
        if (grant.sentAt() + TimeUnit.MILLISECONDS.toNanos(merged.ttlMs()) - System.nanoTime()
                >= TimeUnit.MILLISECONDS.toNanos(merged.periodMs())) {
            return CompletableFuture.completedFuture(grant);
        }
        long sentAt = System.nanoTime();
        return renew(token, merged.ttlMs(), null).handle((renewed, error) -> {
            if (error != null) {
                cleanup.run();
                throw Errors.of(error, key, merged);
            }
            if (renewed <= 0) {
                throw new LeaseLost(key, token, LostReason.GONE);
            }
            return new Grant(grant.fence(), sentAt, grant.replicated(), grant.waited());
        });
    }

    /** Throws unless WAIT's reply counts every replica asked for. */
    void checkReplicated(Grant grant, Settings merged) {
        Redis.Outcome outcome = grant.replicated();
        if (outcome.failure() != null) {
            if (Errors.isReply(outcome.failure())) {
                String reply = Errors.reply(outcome.failure());
                throw new ServerException("WAIT after the grant failed: " + reply, reply);
            }
            throw Errors.of(outcome.failure(), key, merged);
        }
        long acknowledged = Replies.integer(outcome.value());
        if (acknowledged < merged.replicas()) {
            throw new NotReplicated(key, merged.replicas(), acknowledged);
        }
    }

    /**
     * A refusal, with the blockers {@code CHECK} reports right after it. When that check fails the
     * refusal stands, with no blockers and the check's failure as its cause: its message then says
     * the blockers could not be read, not that nothing holds the paths.
     */
    private CompletableFuture<Grant> busy(List<LockRequest> requests, String token) {
        return checkAsync(requests, token).handle((blockers, error) -> {
            if (error != null) {
                throw new Busy(key, requests, List.of(), Futures.unwrap(error));
            }
            throw new Busy(key, requests, blockers);
        });
    }

    private CommandArgs<String, String> acquireArgs(String token, long ttlMs, long waitMs, String lockNote,
            List<LockRequest> requests) {
        CommandArgs<String, String> args = args().add("TOKEN").add(token).add("TTL").add(ttlMs);
        if (waitMs > 0) {
            args.add("WAIT").add(waitMs);
        }
        if (lockNote != null) {
            args.add("NOTE").add(lockNote);
        }
        for (LockRequest request : requests) {
            args.add(request.mode().name()).add(request.path());
        }
        return args;
    }

    private static long fence(List<Object> reply) {
        return Replies.integer(reply.get(1));
    }

    // The commands a lease sends.

    /** {@code PATHLOCK.RENEW key token ttl} on the shared connection, within {@code limit} (null: the command timeout). */
    CompletableFuture<Long> renew(String token, long ttlMs, Duration limit) {
        return redis.call(Keyword.RENEW, () -> new IntegerOutput<>(Redis.CODEC), args().add(token).add(ttlMs), limit);
    }

    /** {@code PATHLOCK.RELEASE key token [path ...]} on the shared connection, within {@code limit}. */
    CompletableFuture<Long> release(String token, List<String> paths, Duration limit) {
        CommandArgs<String, String> args = args().add(token);
        paths.forEach(args::add);
        return redis.call(Keyword.RELEASE, () -> new IntegerOutput<>(Redis.CODEC), args, limit);
    }

    /**
     * Frees a token's locks (all of them, or those at {@code paths}) in the background once the
     * server answers, for a grant that may have happened without the client learning of it. After
     * the TTL there is nothing left to free.
     */
    void releaseLater(String token, List<String> paths, long ttlMs) {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ttlMs);
        Runnable[] attempt = new Runnable[1];
        attempt[0] = () -> release(token, paths, null).whenComplete((released, error) -> {
            if (error != null && !Errors.isReply(error) && System.nanoTime() < until && !redis.isClosed()) {
                LOG.log(System.Logger.Level.DEBUG, "pathlock: releasing {0} failed, retrying: {1}", token,
                        Futures.unwrap(error).getMessage());
                scheduler().schedule(attempt[0], Math.min(200, Math.max(10, ttlMs / 3)), TimeUnit.MILLISECONDS);
            }
        });
        scheduler().schedule(attempt[0], 10, TimeUnit.MILLISECONDS);
    }

    private CompletableFuture<List<Object>> array(Keyword keyword, CommandArgs<String, String> args) {
        return redis.call(keyword, () -> new NestedMultiOutput<>(Redis.CODEC), args, null);
    }

    /** The arguments of a command about this handle's key: the key first, so a cluster routes by it. */
    private CommandArgs<String, String> args() {
        return new CommandArgs<>(Redis.CODEC).addKey(key);
    }

    ScheduledExecutorService scheduler() {
        return scheduler != null ? scheduler : Scheduling.watchdog();
    }

    Redis redis() {
        return redis;
    }

    Settings settings() {
        return settings;
    }

    private static List<HeldLock> heldLocks(List<Object> reply) {
        List<HeldLock> locks = new ArrayList<>();
        for (Object entry : reply) {
            List<Object> fields = Replies.array(entry);
            locks.add(new HeldLock(Replies.text(fields.get(0)), Mode.parse(Replies.text(fields.get(1))),
                    Replies.text(fields.get(2)), Replies.integer(fields.get(3)), Replies.integer(fields.get(4)),
                    fields.size() > 5 ? Replies.text(fields.get(5)) : null));
        }
        return locks;
    }

    static <T extends Collection<LockRequest>> T nonEmpty(T requests) {
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

    static Runnable once(Runnable action) {
        AtomicBoolean done = new AtomicBoolean();
        return () -> {
            if (done.compareAndSet(false, true)) {
                action.run();
            }
        };
    }

    private static String emptyAsNone(String note) {
        return note.isEmpty() ? null : note;
    }

    private static long ceilMillis(long nanos) {
        return nanos <= 0 ? 0 : (nanos + 999_999) / 1_000_000;
    }
}
