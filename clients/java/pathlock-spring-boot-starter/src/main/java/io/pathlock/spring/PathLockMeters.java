package io.pathlock.spring;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.pathlock.Lease;
import io.pathlock.LeaseLost;
import io.pathlock.LostReason;
import io.pathlock.PathLockObserver;
import java.time.Duration;
import java.util.EnumMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * pathlock's Micrometer meters, fed by the client's {@link PathLockObserver} hook. Names follow
 * Micrometer's conventions (dot-separated, lowercase; each registry renders them its own way, e.g.
 * Prometheus's {@code pathlock_acquire_seconds}):
 *
 * <ul>
 * <li>{@code pathlock.acquire} (timer): every acquire, from the call to its end, tagged {@code
 * operation} ({@code move}, {@code upload}, {@code copy}, {@code rename}, {@code delete}, {@code
 * create}, {@code read}, {@code purge}, {@code lock}, or {@code nested} for more locks under a
 * lease) and {@code outcome} ({@code granted} at once, {@code waited}: granted after waiting,
 * {@code busy}, {@code error});</li>
 * <li>{@code pathlock.leases.held} (gauge): leases handed out and neither released nor lost;</li>
 * <li>{@code pathlock.leases.lost} (counter): leases lost, tagged {@code reason} ({@code gone},
 * {@code expired}, {@code replaced});</li>
 * <li>{@code pathlock.renewals} (counter): the watchdog's renewals, tagged {@code outcome} ({@code
 * answered}, or {@code failed}: no answer in time or an error reply, retried until the lease's
 * deadline).</li>
 * </ul>
 *
 * <p>Tags never carry a project key or a path, whose numbers have no bound.
 */
public class PathLockMeters implements PathLockObserver {
    private final MeterRegistry registry;
    private final AtomicLong held = new AtomicLong();
    private final Map<LostReason, Counter> lost = new EnumMap<>(LostReason.class);
    private final Counter renewalsAnswered;
    private final Counter renewalsFailed;

    /**
     * Registers the meters that exist from the start (the gauge, and the counters at zero, so that
     * a dashboard shows 0 rather than nothing) in {@code registry}.
     *
     * @param registry the application's registry
     */
    public PathLockMeters(MeterRegistry registry) {
        this.registry = registry;
        Gauge.builder("pathlock.leases.held", held, AtomicLong::get)
                .description("pathlock leases held: handed out, neither released nor lost")
                .baseUnit("leases")
                .register(registry);
        for (LostReason reason : LostReason.values()) {
            lost.put(reason, Counter.builder("pathlock.leases.lost")
                    .description("pathlock leases lost before their release")
                    .tag("reason", reason.name().toLowerCase(Locale.ROOT))
                    .baseUnit("leases")
                    .register(registry));
        }
        renewalsAnswered = renewals("answered");
        renewalsFailed = renewals("failed");
    }

    private Counter renewals(String outcome) {
        return Counter.builder("pathlock.renewals")
                .description("pathlock lease renewals sent by the watchdog")
                .tag("outcome", outcome)
                .register(registry);
    }

    @Override
    public void acquired(String key, String operation, Outcome outcome, Duration took) {
        Timer.builder("pathlock.acquire")
                .description("pathlock acquires, from the call to its end")
                .tag("operation", operation)
                .tag("outcome", outcome.name().toLowerCase(Locale.ROOT))
                .register(registry)
                .record(took);
    }

    @Override
    public void renewed(String key, boolean answered) {
        (answered ? renewalsAnswered : renewalsFailed).increment();
    }

    @Override
    public void leaseStarted(Lease lease) {
        held.incrementAndGet();
    }

    @Override
    public void leaseEnded(Lease lease, LeaseLost loss) {
        held.decrementAndGet();
        if (loss != null) {
            lost.get(loss.reason()).increment();
        }
    }

    /**
     * Leases held now, as the gauge reads it.
     *
     * @return the count
     */
    public long held() {
        return held.get();
    }
}
