/**
 * Hierarchical path locks on Redis with the pathlock module.
 *
 * <p>A {@link io.pathlock.Connection} is the client's own connections to a standalone server or a
 * Redis Cluster (Netty and its Redis codec); a {@link io.pathlock.PathLocks} handle binds it to
 * one project key, with the defaults of every lease; each cloud-drive operation acquires its
 * locks in one all-or-nothing command and returns a {@link io.pathlock.Lease}, renewed by a
 * watchdog until it is released (it is {@link java.lang.AutoCloseable}) and reported the moment
 * it is lost. Refusals are {@link io.pathlock.Busy}, with the blockers and their notes.
 */
package io.pathlock;
