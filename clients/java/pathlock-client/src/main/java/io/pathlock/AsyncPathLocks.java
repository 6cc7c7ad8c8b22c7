package io.pathlock;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;

/**
 * A {@link PathLocks} handle's operations, each returning a {@code CompletableFuture} at once:
 * {@code locks.async().move("/A/C", "/B").thenCompose(lease -> ...)}. They run on Lettuce's
 * asynchronous API and block no thread, Netty's event loops included; a call that waits on the
 * server does so on a connection of its own. The futures complete on Lettuce's threads (or the
 * client's), so work chained to them that blocks belongs on an executor of the application's
 * ({@code thenApplyAsync(..., executor)}).
 *
 * <p>A request that cannot be right (no locks, a root path, a move into the path's own subtree)
 * throws {@link IllegalArgumentException} at once, before anything is sent; everything else,
 * {@link Busy} among it, fails the future. Completing an acquire's future yourself gives the call
 * up, as cancelling it does: {@code cancel}, {@code orTimeout} and {@code completeOnTimeout} (which
 * complete that same future), {@code complete}, {@code completeExceptionally} and
 * {@code obtrudeValue}/{@code obtrudeException}. A wait on the server leaves the server's queue at
 * once, and whatever may have been granted meanwhile is released. A stage derived from it
 * ({@code thenApply}, {@code copy()}, ...) is another future: completing that one gives nothing up.
 */
public final class AsyncPathLocks {
    private final PathLocks locks;

    AsyncPathLocks(PathLocks locks) {
        this.locks = locks;
    }

    /**
     * The blocking handle this view belongs to.
     *
     * @return the handle
     */
    public PathLocks blocking() {
        return locks;
    }

    /**
     * {@link PathLocks#upload(String)}: {@code WRITE path}.
     *
     * @param path the file
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> upload(String path) {
        return upload(path, AcquireOptions.NONE);
    }

    /**
     * {@link PathLocks#upload(String, AcquireOptions)}.
     *
     * @param path    the file
     * @param options the call's settings
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> upload(String path, AcquireOptions options) {
        return locks.acquire(List.of(LockRequest.write(Paths.notRoot("upload", path))), options, "upload " + path);
    }

    /**
     * {@link PathLocks#create(String)}: {@code WRITE path}.
     *
     * @param path the file or folder
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> create(String path) {
        return create(path, AcquireOptions.NONE);
    }

    /**
     * {@link PathLocks#create(String, AcquireOptions)}.
     *
     * @param path    the file or folder
     * @param options the call's settings
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> create(String path, AcquireOptions options) {
        return locks.acquire(List.of(LockRequest.write(Paths.notRoot("create", path))), options, "create " + path);
    }

    /**
     * {@link PathLocks#read(String)}: {@code READ path}.
     *
     * @param path the file or folder
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> read(String path) {
        return read(path, AcquireOptions.NONE);
    }

    /**
     * {@link PathLocks#read(String, AcquireOptions)}.
     *
     * @param path    the file or folder
     * @param options the call's settings
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> read(String path, AcquireOptions options) {
        return locks.acquire(List.of(LockRequest.read(Paths.notRoot("read", path))), options, "read " + path);
    }

    /**
     * {@link PathLocks#rename(String, String)}: {@code WRITE path}, {@code WRITE <folder>/newName}.
     *
     * @param path    the file or folder
     * @param newName its new name in the same folder
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> rename(String path, String newName) {
        return rename(path, newName, AcquireOptions.NONE);
    }

    /**
     * {@link PathLocks#rename(String, String, AcquireOptions)}.
     *
     * @param path    the file or folder
     * @param newName its new name in the same folder
     * @param options the call's settings
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> rename(String path, String newName, AcquireOptions options) {
        String target = Paths.renamed(path, newName);
        return locks.acquire(List.of(LockRequest.write(path), LockRequest.write(target)), options,
                "rename " + path + " -> " + target);
    }

    /**
     * {@link PathLocks#move(String, String)}: {@code WRITE path}, {@code WRITE intoFolder/<last segment>}.
     *
     * @param path       the file or folder
     * @param intoFolder the folder it goes into
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> move(String path, String intoFolder) {
        return move(path, intoFolder, AcquireOptions.NONE);
    }

    /**
     * {@link PathLocks#move(String, String, AcquireOptions)}.
     *
     * @param path       the file or folder
     * @param intoFolder the folder it goes into
     * @param options    the call's settings
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> move(String path, String intoFolder, AcquireOptions options) {
        String target = Paths.into("move", path, intoFolder);
        return locks.acquire(List.of(LockRequest.write(path), LockRequest.write(target)), options,
                "move " + path + " -> " + intoFolder);
    }

    /**
     * {@link PathLocks#copy(String, String)}: {@code READ path}, {@code WRITE intoFolder/<last segment>}.
     *
     * @param path       the file or folder
     * @param intoFolder the folder the copy goes into
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> copy(String path, String intoFolder) {
        return copy(path, intoFolder, AcquireOptions.NONE);
    }

    /**
     * {@link PathLocks#copy(String, String, AcquireOptions)}.
     *
     * @param path       the file or folder
     * @param intoFolder the folder the copy goes into
     * @param options    the call's settings
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> copy(String path, String intoFolder, AcquireOptions options) {
        String target = Paths.into("copy", path, intoFolder);
        return locks.acquire(List.of(LockRequest.read(path), LockRequest.write(target)), options,
                "copy " + path + " -> " + intoFolder);
    }

    /**
     * {@link PathLocks#delete(String)}: {@code WRITE path}.
     *
     * @param path the file or folder
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> delete(String path) {
        return delete(path, AcquireOptions.NONE);
    }

    /**
     * {@link PathLocks#delete(String, AcquireOptions)}.
     *
     * @param path    the file or folder
     * @param options the call's settings
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> delete(String path, AcquireOptions options) {
        return locks.acquire(List.of(LockRequest.write(Paths.notRoot("delete", path))), options, "delete " + path);
    }

    /**
     * {@link PathLocks#purge(String...)}: {@code WRITE} each path, all or nothing.
     *
     * @param paths the paths
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> purge(String... paths) {
        return purge(Arrays.asList(paths), AcquireOptions.NONE);
    }

    /**
     * {@link PathLocks#purge(Collection, AcquireOptions)}.
     *
     * @param paths   the paths
     * @param options the call's settings
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> purge(Collection<String> paths, AcquireOptions options) {
        Objects.requireNonNull(paths, "paths");
        List<LockRequest> requests = new ArrayList<>(paths.size());
        for (String path : paths) {
            requests.add(LockRequest.write(Paths.notRoot("purge", path)));
        }
        return locks.acquire(requests, options, "purge " + String.join(" ", paths));
    }

    /**
     * {@link PathLocks#lock(LockRequest...)}: the given pairs, all or nothing.
     *
     * @param requests the locks
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> lock(LockRequest... requests) {
        return lock(Arrays.asList(requests), AcquireOptions.NONE);
    }

    /**
     * {@link PathLocks#lock(Collection, AcquireOptions)}.
     *
     * @param requests the locks
     * @param options  the call's settings
     * @return the lease, when granted
     */
    public CompletableFuture<Lease> lock(Collection<LockRequest> requests, AcquireOptions options) {
        List<LockRequest> list = List.copyOf(PathLocks.nonEmpty(requests));
        return locks.acquire(list, options, "lock " + PathLocks.describe(list));
    }

    /**
     * {@link PathLocks#check(Collection, String)}.
     *
     * @param requests the locks one would ask for
     * @param token    the owner whose locks do not count, or null
     * @return the blockers
     */
    public CompletableFuture<List<HeldLock>> check(Collection<LockRequest> requests, String token) {
        return locks.checkAsync(requests, token);
    }

    /**
     * {@link PathLocks#locks(String, String)}.
     *
     * @param path  the path, or null for everywhere
     * @param token the owner, or null for anyone's
     * @return the locks
     */
    public CompletableFuture<List<HeldLock>> locks(String path, String token) {
        return locks.locksAsync(path, token);
    }

    /**
     * {@link PathLocks#waiters(String)}.
     *
     * @param path the path, or null for all
     * @return the waiters
     */
    public CompletableFuture<List<Waiter>> waiters(String path) {
        return locks.waitersAsync(path);
    }
}
