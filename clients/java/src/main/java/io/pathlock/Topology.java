package io.pathlock;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * Where a key's commands go: the one server of a standalone connection, or in a Redis Cluster the
 * master that serves the key's slot, as {@code CLUSTER SLOTS} last said and {@code -MOVED} replies
 * have corrected since.
 *
 * <p>The slot map is loaded when the connection opens. A {@code -MOVED} fixes its slot at once and
 * reloads the whole map in the background (one move often comes with others); a connection error
 * marks the map stale, so the next command reloads it first, since a failover may have made another
 * node the master.
 */
final class Topology {
    private final boolean cluster;
    private final List<Address> seeds;
    private final AtomicReferenceArray<Address> slots;
    private final Object lock = new Object();
    private volatile boolean loaded;
    private volatile boolean stale;
    private CompletableFuture<Void> refreshing;

    Topology(boolean cluster, List<Address> seeds) {
        this.cluster = cluster;
        this.seeds = List.copyOf(seeds);
        this.slots = cluster ? new AtomicReferenceArray<>(SlotHash.SLOTS) : null;
    }

    boolean isCluster() {
        return cluster;
    }

    /** The node for a key, or null while no node is known to serve its slot. */
    Address route(byte[] key) {
        if (!cluster) {
            return seeds.get(0);
        }
        return slots.get(SlotHash.slot(key));
    }

    /** Any node, for a command without a key. */
    Address anyNode() {
        if (cluster) {
            for (int slot = 0; slot < SlotHash.SLOTS; slot++) {
                Address address = slots.get(slot);
                if (address != null) {
                    return address;
                }
            }
        }
        return seeds.get(0);
    }

    /** Completes when the map may be used: at once unless it was never loaded or is stale. */
    CompletableFuture<Void> ready(Lane lane) {
        if (!cluster || loaded && !stale) {
            return CompletableFuture.completedFuture(null);
        }
        return refresh(lane);
    }

    void markStale() {
        if (cluster) {
            stale = true;
        }
    }

    void moved(int slot, Address to, Lane lane) {
        slots.set(slot, to);
        refresh(lane);
    }

    /** Reloads the slot map from the first node that answers; one reload at a time. */
    CompletableFuture<Void> refresh(Lane lane) {
        synchronized (lock) {
            if (refreshing != null) {
                return refreshing;
            }
            refreshing = new CompletableFuture<>();
        }
        CompletableFuture<Void> done = refreshing;
        Set<Address> candidates = new LinkedHashSet<>();
        for (int slot = 0; slot < SlotHash.SLOTS; slot++) {
            Address address = slots.get(slot);
            if (address != null) {
                candidates.add(address);
            }
        }
        candidates.addAll(seeds);
        tryLoad(lane, new ArrayList<>(candidates), 0, null, done);
        done.whenComplete((ok, error) -> {
            synchronized (lock) {
                refreshing = null;
            }
        });
        return done;
    }

    private void tryLoad(Lane lane, List<Address> candidates, int index, Throwable last,
            CompletableFuture<Void> done) {
        if (index >= candidates.size()) {
            done.completeExceptionally(new ConnectionException(
                    "no cluster node answered CLUSTER SLOTS (tried " + candidates + ")" + (last == null ? "" : ": " + last.getMessage()),
                    last));
            return;
        }
        Address node = candidates.get(index);
        lane.executeAt(node, List.of(Reply.args("CLUSTER", "SLOTS")), lane.commandTimeoutMs())
                .whenComplete((replies, error) -> {
                    if (error != null) {
                        tryLoad(lane, candidates, index + 1, Futures.unwrap(error), done);
                        return;
                    }
                    Object reply = replies.get(0);
                    if (reply instanceof Reply.Error e) {
                        tryLoad(lane, candidates, index + 1, new ServerException(e.message()), done);
                        return;
                    }
                    try {
                        load(node, Reply.array(reply));
                        done.complete(null);
                    } catch (RuntimeException e) {
                        tryLoad(lane, candidates, index + 1, e, done);
                    }
                });
    }

    /** {@code CLUSTER SLOTS}: {@code [start, end, [host, port, id, ...], replicas...]} per range. */
    private void load(Address asked, List<Object> ranges) {
        Address[] map = new Address[SlotHash.SLOTS];
        for (Object entry : ranges) {
            List<Object> range = Reply.array(entry);
            int start = (int) Reply.integer(range.get(0));
            int end = (int) Reply.integer(range.get(1));
            List<Object> master = Reply.array(range.get(2));
            String host = Reply.text(master.get(0));
            int port = (int) Reply.integer(master.get(1));
            // An empty or unknown endpoint means "the address you reached me at".
            Address address = new Address(host == null || host.isEmpty() || host.equals("?") ? asked.host() : host, port);
            for (int slot = start; slot <= end; slot++) {
                map[slot] = address;
            }
        }
        for (int slot = 0; slot < SlotHash.SLOTS; slot++) {
            slots.set(slot, map[slot]);
        }
        loaded = true;
        stale = false;
    }
}
