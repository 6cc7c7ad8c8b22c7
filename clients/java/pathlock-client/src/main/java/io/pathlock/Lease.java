package io.pathlock;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * Locks held by one owner ({@link #token()}) in one project key, kept alive by a watchdog until
 * released. {@link #close()} releases it, so try-with-resources frees the locks when the block
 * ends, also by an exception.
 *
 * <p>The watchdog sends {@code PATHLOCK.RENEW key token ttl} every third of the TTL. The lease is
 * <b>lost</b> when a renewal answers 0 (the locks expired, were released with the token, or the
 * key was deleted), or when no renewal has succeeded before the deadline the client last knew:
 * when it sent the last successful renewal (or the acquire), plus the TTL, on its own clock. A
 * loss is noticed at most a third of the TTL after it happens on the server (at the next renewal),
 * and at the deadline when the server cannot be reached; it shows at once in {@link #isLost()},
 * then completes {@link #lost()} and calls the listeners, on another thread. After a normal
 * release, the futures of {@link #lost()} are cancelled instead, so that nothing waits forever.
 */
public final class Lease implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.pathlock");
    /** Renewals in flight at once, at most. */
    private static final int MAX_INFLIGHT = 2;
    /** The least a release waits for the server, even once the lease's deadline has passed. */
    private static final long MIN_RELEASE_WAIT_NANOS = TimeUnit.MILLISECONDS.toNanos(100);

    private final PathLocks owner;
    private final String token;
    private final long fence;
    private final long ttlMs;
    /** The settings the lease was taken with: its further locks wait and replicate by them too. */
    private final Settings settings;
    private final long ttlNanos;
    private final long periodNanos;
    private final String note;

    private final Object mu = new Object();
    /** What the lease holds: the operation's locks, then any taken with {@link #lock}. */
    private final List<LockRequest> locks;
    private final List<Consumer<LeaseLost>> listeners;
    /** The futures {@link #lost()} handed out, completed on a loss and cancelled on a release. */
    private final List<CompletableFuture<LeaseLost>> lostFutures = new ArrayList<>();
    /** Until when the locks are certainly held, on System.nanoTime's clock. */
    private long deadline;
    private long nextRenew;
    private boolean released;
    private LeaseLost lostWith;
    /**
     * The renewals sent and not answered yet: one, and a second once the first has gone a whole
     * renewal period unanswered (a busy machine, or a connection Lettuce is still reconnecting, to
     * a master that failed over, say), which goes where the client's topology then says. Neither
     * is given up on before the deadline: whichever answers first keeps the lease.
     */
    private final List<CompletableFuture<?>> inflight = new ArrayList<>(MAX_INFLIGHT);
    /**
     * The most locks a renewal has found. Counted in the order the renewals were sent, the count
     * only falls when locks of the lease are gone (released by someone with the token, or
     * expired), even while {@link #lock} grants more: a fall is a loss, as in the other clients.
     */
    private long most;
    /** When the renewal whose count was compared last was sent: an older answer is not compared. */
    private long countedSentAt;
    /**
     * Until when (nanoTime) the count is not compared: a failed {@link #lock} whose grant may have
     * happened frees what it may have added in the background, so a fall until then is that.
     */
    private long countUnsureUntil = System.nanoTime();
    private ScheduledFuture<?> timer;
    private long timerAt = Long.MAX_VALUE;
    /** Whether the observer was told of this lease (it was handed out): then it is told of its end too. */
    private boolean observed;

    Lease(PathLocks owner, String token, long fence, List<LockRequest> locks, Settings settings, String note,
            long sentAt, List<Consumer<LeaseLost>> listeners) {
        this.owner = owner;
        this.token = token;
        this.fence = fence;
        this.settings = settings;
        this.ttlMs = settings.ttlMs();
        this.ttlNanos = TimeUnit.MILLISECONDS.toNanos(ttlMs);
        this.periodNanos = TimeUnit.MILLISECONDS.toNanos(settings.periodMs());
        this.note = note;
        this.locks = new ArrayList<>(locks);
        this.listeners = new ArrayList<>(listeners);
        synchronized (mu) {
            deadline = sentAt + ttlNanos;
            nextRenew = sentAt + periodNanos;
            countedSentAt = sentAt;
            arm();
        }
    }

    /** The lease was handed to the caller: the observer counts it held until its release or loss. */
    void handedOut() {
        synchronized (mu) {
            if (finished()) {
                return;
            }
            observed = true;
        }
        owner.redis().observer().leaseStarted(this);
    }

    /**
     * The project key.
     *
     * @return the key
     */
    public String key() {
        return owner.key();
    }

    /**
     * The owner's token, a UUID v4 made by the client.
     *
     * @return the token
     */
    public String token() {
        return token;
    }

    /**
     * The fence of the grant: pass it with every write to the storage the locks protect, which keeps the highest fence per path.
     *
     * @return the fence
     */
    public long fence() {
        return fence;
    }

    /**
     * What the lease holds: the operation's locks, then those taken with {@link #lock}.
     *
     * @return the locks
     */
    public List<LockRequest> locks() {
        synchronized (mu) {
            return List.copyOf(locks);
        }
    }

    /**
     * The lease's length; it is renewed every third of it.
     *
     * @return the TTL
     */
    public Duration ttl() {
        return Duration.ofMillis(ttlMs);
    }

    /**
     * The note sent with the lease's locks.
     *
     * @return the note, or null
     */
    public String note() {
        return note;
    }

    /**
     * True once the lease is known lost. Stays false after a normal release.
     *
     * @return whether it is lost
     */
    public boolean isLost() {
        synchronized (mu) {
            return lostWith != null;
        }
    }

    /**
     * True once {@link #release()} was called.
     *
     * @return whether it was released
     */
    public boolean isReleased() {
        synchronized (mu) {
            return released;
        }
    }

    /**
     * A future that completes with the reason when the lease is lost, and is cancelled when it is
     * released first (so a {@code join()} on it throws {@code CancellationException} rather than
     * hang). Each call returns a new future, so completing or cancelling it affects nobody else.
     *
     * @return the future of the loss
     */
    public CompletableFuture<LeaseLost> lost() {
        CompletableFuture<LeaseLost> future = new CompletableFuture<>();
        LeaseLost already;
        boolean releasedFirst;
        synchronized (mu) {
            already = lostWith;
            releasedFirst = released && lostWith == null;
            if (already == null && !releasedFirst) {
                lostFutures.add(future);
            }
        }
        if (already != null) {
            future.complete(already);
        } else if (releasedFirst) {
            future.cancel(false);
        }
        return future;
    }

    /**
     * Calls {@code listener} (on another thread) when the lease is lost, at once if it already is; never after a normal release.
     *
     * @param listener the listener
     */
    public void onLost(Consumer<LeaseLost> listener) {
        Objects.requireNonNull(listener, "listener");
        LeaseLost already;
        synchronized (mu) {
            already = lostWith;
            if (already == null) {
                listeners.add(listener);
                return;
            }
        }
        Scheduling.CALLBACKS.execute(() -> notify(listener, already));
    }

    /** Throws {@link LeaseLost} if the lease is lost; call it between steps of long work. */
    public void throwIfLost() {
        LeaseLost lost;
        synchronized (mu) {
            lost = lostWith;
        }
        if (lost != null) {
            throw new LeaseLost(lost.key(), token, lost.reason());
        }
    }

    /**
     * How long the locks are certainly still held, by the client's clock; zero once lost or released.
     *
     * @return the time left
     */
    public Duration remaining() {
        synchronized (mu) {
            if (finished()) {
                return Duration.ZERO;
            }
            return Duration.ofNanos(Math.max(0, deadline - System.nanoTime()));
        }
    }

    /**
     * Takes more locks under this lease's token, all or nothing: the server lets one owner lock
     * inside what it holds, so a move of {@code /A/C} into {@code /B} can then write {@code
     * /B/C/new.txt}. They are renewed by this lease's watchdog and released with it (a release
     * frees every lock of the token). Returns the fence of this grant. Busy when someone else holds
     * a conflicting lock; the lease is kept either way.
     *
     * @param requests the locks
     * @return the fence of this grant
     */
    public long lock(LockRequest... requests) {
        return lock(Arrays.asList(requests), AcquireOptions.NONE);
    }

    /**
     * As {@link #lock(LockRequest...)}, with a wait, replicas or a note of its own (by default the
     * lease's, as its operation took them). The TTL is the lease's: one renewal keeps all its locks.
     *
     * @param requests the locks
     * @param options  the call's settings (no other TTL)
     * @return the fence of this grant
     */
    public long lock(Collection<LockRequest> requests, AcquireOptions options) {
        return Futures.blocking(() -> lockAsync(requests, options));
    }

    /**
     * {@link #lock(Collection, AcquireOptions)} without blocking: the future completes with the
     * fence of the grant. Arguments that cannot be right, and a lease already released, throw at
     * once. Completing the future yourself ({@code cancel}, {@code orTimeout}, {@code complete},
     * ...) gives the call up, as for {@link AsyncPathLocks}: the wait leaves the server's queue,
     * and the locks this call would have added are released.
     *
     * @param requests the locks
     * @param options  the call's settings (no other TTL)
     * @return the fence of this grant, when granted
     */
    public CompletableFuture<Long> lockAsync(Collection<LockRequest> requests, AcquireOptions options) {
        Objects.requireNonNull(options, "options");
        List<LockRequest> wanted = List.copyOf(PathLocks.nonEmpty(requests));
        if (options.ttl() != null && Settings.ttlMs(options.ttl()) != ttlMs) {
            throw new IllegalArgumentException("a lease's locks share its ttl of " + ttlMs
                    + " ms, so another ttl cannot be asked for (" + Paths.describe(options.ttl()) + ")");
        }
        Set<String> held = new HashSet<>();
        LeaseLost lost;
        synchronized (mu) {
            if (released) {
                throw new IllegalStateException("lease " + token + " was released");
            }
            lost = lostWith;
            for (LockRequest lock : locks) {
                held.add(Paths.normalise(lock.path()));
            }
        }
        if (lost != null) {
            return CompletableFuture.failedFuture(new LeaseLost(owner.key(), token, lost.reason()));
        }
        // If an unanswered attempt may have granted them, free what this call added, and only
        // that: releasing a path frees every mode the token holds there.
        List<String> added = new ArrayList<>();
        for (LockRequest request : wanted) {
            String path = Paths.normalise(request.path());
            if (!held.contains(path) && !added.contains(path)) {
                added.add(path);
            }
        }
        Settings merged = settings.with(options);
        String lockNote = options.note() != null ? (options.note().isEmpty() ? null : options.note()) : note;
        // The paths this call added are listed once granted (below); when they are released
        // instead, they leave the list too, every mode of them, as a release frees every mode the
        // token holds on a path, so that the list says what the server will hold.
        Runnable unlist = () -> {
            synchronized (mu) {
                locks.removeIf(mine -> added.contains(Paths.normalise(mine.path())));
            }
        };
        Runnable cleanup = PathLocks.once(() -> {
            if (!added.isEmpty()) {
                synchronized (mu) {
                    most = 0;
                    countUnsureUntil = System.nanoTime() + ttlNanos;
                }
                unlist.run();
                owner.releaseLater(token, added, ttlMs);
            }
        });
        PathLocks.Call call = new PathLocks.Call(owner.redis());
        long started = System.nanoTime();
        boolean[] waited = new boolean[1];
        // Any completion but the client's own gives the call up, as for an acquire.
        Futures.Handed<Long> result = new Futures.Handed<>(() -> {
            call.cancel();
            cleanup.run();
        });
        proveHeld()
                .thenCompose(ok -> owner.grant(token, wanted, merged, lockNote, cleanup, call))
                .thenApply(grant -> {
                    waited[0] = grant.waited();
                    boolean gone;
                    synchronized (mu) {
                        // Locking what the lease holds again refreshes it (a new fence): listed once.
                        for (LockRequest request : wanted) {
                            if (locks.stream().noneMatch(mine -> mine.mode() == request.mode()
                                    && Paths.normalise(mine.path()).equals(Paths.normalise(request.path())))) {
                                locks.add(request);
                            }
                        }
                        gone = finished();
                    }
                    if (gone) {
                        // Released or lost while this call waited: nothing renews what it just got.
                        owner.releaseLater(token, List.of(), ttlMs);
                        throwIfLost();
                        throw new IllegalStateException("lease " + token + " was released while it took more locks");
                    }
                    if (merged.replicas() > 0) {
                        try {
                            owner.checkReplicated(grant, merged);
                        } catch (RuntimeException e) {
                            cleanup.run();
                            throw e;
                        }
                    }
                    return grant.fence();
                })
                .whenComplete((fence, error) -> {
                    RuntimeException failure = error == null ? null : Errors.of(error, owner.key(), merged);
                    owner.observed("nested", started, failure, waited[0]);
                    if (failure != null) {
                        result.fail(failure);
                    } else if (!result.settle(fence)) {
                        // The caller completed the future as the grant came: what this call
                        // added is freed, as when the caller's completion comes first. That
                        // completion may have run the cleanup before the grant listed the paths,
                        // so they are taken off the list here as well.
                        unlist.run();
                        cleanup.run();
                    }
                });
        return result.future();
    }

    /**
     * Renews the lease before it takes more locks. Once its own locks are gone (its key deleted,
     * its token released elsewhere), an ACQUIRE under its token would make new ones that keep
     * answering its renewals, and the loss would go unseen; so the loss is reported here instead.
     */
    private CompletableFuture<Void> proveHeld() {
        long sentAt = System.nanoTime();
        return owner.renew(token, ttlMs, null).handle((renewed, error) -> {
            LostReason lose = null;
            if (error != null) {
                RuntimeException failure = Errors.of(error, owner.key(), settings);
                if (!(failure instanceof WrongType)) {
                    throw failure;
                }
                lose = LostReason.REPLACED;
            } else if (renewed <= 0) {
                lose = LostReason.GONE;
            }
            if (lose != null) {
                lose(lose);
                throwIfLost();
                throw new IllegalStateException("lease " + token + " was released while it took more locks");
            }
            synchronized (mu) {
                if (sentAt + ttlNanos - deadline > 0) {
                    deadline = sentAt + ttlNanos;
                }
            }
            return null;
        });
    }

    /**
     * Stops the watchdog, then frees every lock of the token with {@code PATHLOCK.RELEASE key
     * token}; the futures of {@link #lost()} are cancelled. Releasing twice, or releasing a lost
     * lease, is not an error. A renewal in flight is let finish first and its answer ignored, so it
     * can neither outlive the release nor report a loss. The call waits for the server at most until
     * the lease's deadline (and the command timeout); when the server cannot be reached, the
     * release goes on in the background until the TTL has passed (the locks expire by then anyway)
     * rather than being thrown. Once the handle is closed ({@link PathLocks#close()}) nothing can
     * send it: the locks stay until their TTL runs out, and a warning is logged that says so.
     *
     * <p>On a Netty event loop thread (in a callback of the asynchronous API, which completes on
     * Lettuce's), it starts the release and returns without waiting, as {@link #releaseAsync()}
     * does: waiting there could hold up the very thread the server's answer needs, and with it
     * every connection that thread serves, until the lease's deadline. So a try-with-resources
     * block in such a callback is fine.
     */
    public void release() {
        CompletableFuture<Void> released = releaseAsync();
        if (!Futures.mustNotBlock()) {
            Futures.await(released);
        }
    }

    /**
     * {@link #release()} without blocking: the future completes once the server has freed the
     * locks, or once the release has been handed to the background. It never fails.
     *
     * @return the end of the release
     */
    public CompletableFuture<Void> releaseAsync() {
        CompletableFuture<?> renewing;
        boolean wasLost;
        boolean ends;
        List<CompletableFuture<LeaseLost>> cancel;
        long bound;
        synchronized (mu) {
            if (released) {
                return CompletableFuture.completedFuture(null);
            }
            released = true;
            wasLost = lostWith != null;
            ends = observed && !wasLost;
            cancelTimer();
            renewing = inflight.isEmpty() ? null
                    : CompletableFuture.allOf(inflight.toArray(CompletableFuture[]::new));
            cancel = wasLost ? List.of() : List.copyOf(lostFutures);
            lostFutures.clear();
            // A lost lease may still have locks on the server (some of them, or all by the server's
            // clock): they are freed too, but the caller waits for a server that may be down no
            // longer than the least wait.
            bound = wasLost ? MIN_RELEASE_WAIT_NANOS : Math.max(deadline - System.nanoTime(), MIN_RELEASE_WAIT_NANOS);
        }
        cancel.forEach(future -> future.cancel(false));
        if (ends) {
            owner.redis().observer().leaseEnded(this, null);
        }
        Duration limit = Duration.ofNanos(Math.min(bound, owner.redis().commandTimeout().toNanos()));
        long until = System.nanoTime() + limit.toNanos();
        CompletableFuture<?> first = renewing == null ? CompletableFuture.completedFuture(null)
                : renewing.handle((ignored, error) -> null).orTimeout(limit.toNanos(), TimeUnit.NANOSECONDS);
        return first.handle((ignored, error) -> null)
                .thenCompose(ignored -> owner.release(token, List.of(),
                        Duration.ofNanos(Math.max(1, until - System.nanoTime()))))
                .handle((freed, error) -> {
                    if (error != null && owner.redis().isClosed()) {
                        // Nothing can send it, now or later: the locks stay until the server's
                        // TTL ends them. Not thrown (it would hide the exception that ended a
                        // try-with-resources block), but said, as the other clients report a
                        // release that fails.
                        if (!wasLost) {
                            LOG.log(System.Logger.Level.WARNING, "pathlock: lease {0} on {1} was not released: its handle"
                                    + " was closed (PathLocks.close()), so its locks stay on the server until their ttl"
                                    + " of {2} ms runs out", token, Paths.quote(owner.key()), ttlMs);
                        }
                    } else if (error != null) {
                        RuntimeException failure = Errors.of(error, owner.key(), settings);
                        if (failure instanceof CancellationException || !Errors.isReply(error)) {
                            LOG.log(System.Logger.Level.DEBUG, "pathlock: releasing {0} failed, retrying in the background: {1}",
                                    token, failure.getMessage());
                            owner.releaseLater(token, List.of(), ttlMs);
                        }
                        // An error reply (WRONGTYPE: the key holds something else now) means the
                        // locks are gone with the project.
                    }
                    return null;
                });
    }

    /** {@link #release()}: the end of a try-with-resources block. */
    @Override
    public void close() {
        release();
    }

    @Override
    public String toString() {
        String state;
        synchronized (mu) {
            state = released ? "released" : lostWith != null ? "lost" : "held";
        }
        return "Lease[" + token + " on " + Paths.quote(owner.key()) + ", fence " + fence + ", " + state + ", "
                + PathLocks.describe(locks()) + "]";
    }

    // The watchdog. One timer per lease, at its next renewal or at its deadline, whichever comes
    // first; while two renewals are in flight, at its deadline. Renewals go on the shared
    // connection and are answered on Lettuce's event loop, which only does bookkeeping here.

    private boolean finished() {
        return released || lostWith != null;
    }

    /** Schedules the next wake-up, unless one at least as early is pending. Holds mu. */
    private void arm() {
        if (finished()) {
            return;
        }
        // Once the handle is closed nothing can renew the lease: it lapses at its deadline.
        long at = inflight.size() >= MAX_INFLIGHT || owner.redis().isClosed() ? deadline
                : Math.min(nextRenew, deadline);
        if (timer != null) {
            if (timerAt <= at) {
                return;
            }
            timer.cancel(false);
        }
        timerAt = at;
        timer = owner.scheduler().schedule(this::wake, Math.max(0, at - System.nanoTime()), TimeUnit.NANOSECONDS);
    }

    private void cancelTimer() {
        if (timer != null) {
            timer.cancel(false);
            timer = null;
            timerAt = Long.MAX_VALUE;
        }
    }

    private void wake() {
        boolean expired = false;
        synchronized (mu) {
            timer = null;
            timerAt = Long.MAX_VALUE;
            if (finished()) {
                return;
            }
            long now = System.nanoTime();
            if (now - deadline >= 0) {
                expired = true;
            } else {
                if (inflight.size() < MAX_INFLIGHT && now - nextRenew >= 0 && !owner.redis().isClosed()) {
                    renew(now);
                }
                arm();
            }
        }
        if (expired) {
            lose(LostReason.EXPIRED);
        }
    }

    /**
     * Sends a renewal, which may take until the deadline (or the command timeout) to answer; the
     * next is due a renewal period later, answered or not (see {@link #inflight}). Holds mu.
     */
    private void renew(long sentAt) {
        Duration limit = Duration.ofNanos(Math.max(TimeUnit.MILLISECONDS.toNanos(1),
                Math.min(deadline - sentAt, owner.redis().commandTimeout().toNanos())));
        CompletableFuture<Long> renewal = owner.renew(token, ttlMs, limit);
        inflight.add(renewal);
        nextRenew = sentAt + periodNanos;
        renewal.whenComplete((count, error) -> renewed(renewal, sentAt, count, error));
    }

    private void renewed(CompletableFuture<?> renewal, long sentAt, Long count, Throwable error) {
        // An answer, whatever it says, is one the server gave; WRONGTYPE too (the lease is gone).
        String answer = Errors.reply(error);
        owner.redis().observer().renewed(owner.key(), error == null || (answer != null && answer.startsWith("WRONGTYPE")));
        LostReason lose = null;
        synchronized (mu) {
            inflight.remove(renewal);
            if (finished()) {
                // Released (or lost) while the renewal was in flight: its answer means nothing now.
                return;
            }
            String reply = Errors.reply(error);
            if (reply != null && reply.startsWith("WRONGTYPE")) {
                lose = LostReason.REPLACED;
            } else if (error != null) {
                // No answer in time, or a cluster in the middle of a change: try again soon. The
                // lease stays held while its deadline is ahead; wake() reports it when it passes.
                // An error reply (an ACL refusal, say) is worth a warning: retrying may not help.
                if (reply == null) {
                    LOG.log(System.Logger.Level.DEBUG, "pathlock: renewing {0} failed: {1}", token,
                            Futures.unwrap(error).getMessage());
                } else {
                    LOG.log(System.Logger.Level.WARNING, "pathlock: renewing {0} was refused: {1}", token, reply);
                }
                nextRenew = System.nanoTime() + Math.max(1, periodNanos / 3);
            } else if (count > 0 && sentAt - countedSentAt > 0 && count < most) {
                // Some of the lease's locks are gone (one path released elsewhere with the token,
                // say): the work it protects is no longer covered.
                lose = LostReason.GONE;
            } else if (count > 0) {
                if (sentAt - countedSentAt > 0) {
                    most = System.nanoTime() - countUnsureUntil >= 0 ? count : 0;
                    countedSentAt = sentAt;
                }
                // The server set the new deadline at some moment after sentAt; sentAt + ttl is the
                // earliest it can be, so the client never believes in a lease longer than the
                // server keeps it.
                if (sentAt + ttlNanos - deadline > 0) {
                    deadline = sentAt + ttlNanos;
                }
                nextRenew = sentAt + periodNanos;
            } else {
                lose = LostReason.GONE;
            }
            if (lose == null) {
                arm();
            }
        }
        if (lose != null) {
            lose(lose);
        }
    }

    private void lose(LostReason reason) {
        LeaseLost lost = new LeaseLost(owner.key(), token, reason);
        List<Consumer<LeaseLost>> notify;
        List<CompletableFuture<LeaseLost>> futures;
        boolean ends;
        synchronized (mu) {
            if (finished()) {
                return;
            }
            ends = observed;
            lostWith = lost;
            cancelTimer();
            notify = List.copyOf(listeners);
            listeners.clear();
            futures = List.copyOf(lostFutures);
            lostFutures.clear();
        }
        LOG.log(System.Logger.Level.WARNING, lost.getMessage());
        if (ends) {
            owner.redis().observer().leaseEnded(this, lost);
        }
        Scheduling.CALLBACKS.execute(() -> {
            futures.forEach(future -> future.complete(lost));
            for (Consumer<LeaseLost> listener : notify) {
                notify(listener, lost);
            }
        });
    }

    private static void notify(Consumer<LeaseLost> listener, LeaseLost lost) {
        try {
            listener.accept(lost);
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.ERROR, "pathlock: a lost-lease listener failed", e);
        }
    }
}
