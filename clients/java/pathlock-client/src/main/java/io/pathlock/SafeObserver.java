package io.pathlock;

import java.time.Duration;

/**
 * The application's {@link PathLockObserver} as the client calls it: an exception it throws is
 * logged and goes no further, so a faulty meter never fails a grant, a renewal or a release.
 */
final class SafeObserver implements PathLockObserver {
    private static final System.Logger LOG = System.getLogger("io.pathlock");

    private final PathLockObserver observer;

    SafeObserver(PathLockObserver observer) {
        this.observer = observer;
    }

    boolean isNone() {
        return observer == PathLockObserver.NONE;
    }

    @Override
    public void acquired(String key, String operation, Outcome outcome, Duration took) {
        try {
            observer.acquired(key, operation, outcome, took);
        } catch (RuntimeException e) {
            failed(e);
        }
    }

    @Override
    public void renewed(String key, boolean answered) {
        try {
            observer.renewed(key, answered);
        } catch (RuntimeException e) {
            failed(e);
        }
    }

    @Override
    public void leaseStarted(Lease lease) {
        try {
            observer.leaseStarted(lease);
        } catch (RuntimeException e) {
            failed(e);
        }
    }

    @Override
    public void leaseEnded(Lease lease, LeaseLost lost) {
        try {
            observer.leaseEnded(lease, lost);
        } catch (RuntimeException e) {
            failed(e);
        }
    }

    private static void failed(RuntimeException e) {
        LOG.log(System.Logger.Level.ERROR, "pathlock: an observer failed", e);
    }
}
