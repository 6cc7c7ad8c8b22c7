/**
 * Hierarchical path locks on Redis and Valkey with the pathlock module, on Lettuce.
 *
 * <p>A {@link io.pathlock.PathLocks} handle, built from the application's Lettuce client, binds
 * it to one project key with the defaults of every lease; each cloud-drive operation acquires its
 * locks in one all-or-nothing command and returns a {@link io.pathlock.Lease}, renewed by a
 * watchdog until it is released (it is {@link java.lang.AutoCloseable}) and reported the moment
 * it is lost. Refusals are {@link io.pathlock.Busy}, with the blockers and their notes. {@link
 * io.pathlock.PathLocks#async()} has the same operations returning {@code CompletableFuture}s.
 */
package io.pathlock;
