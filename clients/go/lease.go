package pathlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

type status int

const (
	statusHeld status = iota
	statusLost
	statusReleased
	// statusDropped: released because the context it was acquired with ended, not by Release.
	statusDropped
)

// Lease is the locks granted to one owner (its token), kept alive by a watchdog that renews
// them every third of the TTL until the lease is released or lost.
//
// A loss is reported at once, three ways: [Lease.Err] answers a [*LeaseLostError] (poll it
// between steps of long work), the channel of [Lease.Lost] is closed (select on it), and
// [Lease.Context] is cancelled with that error as its cause (hand it to the work, which then
// stops; [context.AfterFunc] on it makes a callback). A loss is final.
//
// A normal release ends the lease too, and then nothing that waits for a loss waits forever:
// the Lost channel is closed and the context cancelled with the cause [ErrReleased], which is
// not [ErrLeaseLost]; Err stays nil and IsLost false, as nothing was lost.
//
// A lease belongs to the context it was acquired with, as a database/sql transaction does:
// when that context ends, the lease is released (in the background), and work still running
// under it learns so from all three: its context and Lost end, and Err answers [ErrReleased]
// wrapping that context's cause (IsLost stays false). To bound only how long an acquire waits
// for busy locks, use [WithWait], not a context with a timeout.
//
// A Lease is safe for use by several goroutines.
type Lease struct {
	locks *Locks
	token string
	fence int64
	s     settings
	// parent is the context the lease was acquired with; values keeps its values (for the
	// client's hooks) without its end, for the commands sent after it ended.
	parent     context.Context
	values     context.Context
	stopParent func() bool

	mu       sync.Mutex
	requests []Request
	status   status
	err      error
	// deadline is when the lease expires as far as the client can tell: the send time of the
	// request that last set it, plus the TTL. The server set its own from a later moment (when
	// the request arrived), so ours is never later than the server's.
	deadline  time.Time
	nextRenew time.Time
	renewing  bool
	// most is the most locks a renewal has found. The watchdog's renewals are one at a time,
	// so the count they see only falls when locks of the lease are gone (released with its
	// token elsewhere, or expired), even while Lock grants more.
	most    int64
	timer   *time.Timer
	done    chan struct{}
	ctx     context.Context
	cancel  context.CancelCauseFunc
	freeing bool
}

func startLease(parent context.Context, l *Locks, token string, g granted, requests []Request, s settings) *Lease {
	lease := &Lease{
		locks:     l,
		token:     token,
		fence:     g.fence,
		s:         s,
		parent:    parent,
		values:    context.WithoutCancel(parent),
		requests:  requests,
		deadline:  g.sent.Add(s.ttl),
		nextRenew: g.sent.Add(s.period()),
	}
	// Both callbacks take the lease's mutex first, so they see it whole even if they run at
	// once (a parent context that has already ended, a grant older than a renewal period).
	lease.mu.Lock()
	lease.timer = time.AfterFunc(time.Until(lease.nextRenew), lease.fire)
	lease.stopParent = context.AfterFunc(parent, func() {
		_ = lease.release(lease.values, statusDropped,
			fmt.Errorf("%w: the context it was acquired with ended: %w", ErrReleased, context.Cause(parent)))
	})
	lease.mu.Unlock()
	return lease
}

// Key is the project key.
func (l *Lease) Key() string { return l.locks.key }

// Token is the owner's token, a UUID v4 made by the client.
func (l *Lease) Token() string { return l.token }

// Fence is the fence of the grant: pass it to the storage the locks protect, which keeps the
// highest fence it has seen for each path it writes and refuses a write with a lower one.
func (l *Lease) Fence() int64 { return l.fence }

// TTL is the TTL each renewal sets.
func (l *Lease) TTL() time.Duration { return l.s.ttl }

// Note is the note sent with the grant, shown with the locks to whoever they block ("" for
// none).
func (l *Lease) Note() string {
	if l.s.note == nil {
		return ""
	}
	return *l.s.note
}

// Requests are every lock the lease holds, as requested: the operation's, then those
// [Lease.Lock] added.
func (l *Lease) Requests() []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Request(nil), l.requests...)
}

// Err says why work under the lease must stop: a [*LeaseLostError] once the lease is lost
// (errors.Is(err, ErrLeaseLost)), or [ErrReleased] wrapping the cause of the context it was
// acquired with once that context ended and released it (its locks are free for others, though
// nothing was lost). It is nil while the lease is held and after [Lease.Release], as the other
// clients' checks pass after a release. Poll it between steps of long work; once [Lease.Lost]
// is closed, it tells a loss, or the end of the context, from a release.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.status != statusLost && l.status != statusDropped {
		return nil
	}
	return l.err
}

// ended answers why the lease ended: its loss, or the release's cause (which errors.Is
// [ErrReleased]); nil while it is held.
func (l *Lease) ended() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// IsLost tells whether the lease was lost; it stays false after a normal release.
func (l *Lease) IsLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status == statusLost
}

// Lost answers a channel that is closed when the lease ends: at once when it is lost, and when
// it is released, so that nothing waits on it forever. [Lease.Err] then says which: the loss,
// the end of the context it was acquired with, or nil after [Lease.Release].
func (l *Lease) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		if l.status != statusHeld {
			close(l.done)
		}
	}
	return l.done
}

// Context answers a context derived from the one the lease was acquired with, cancelled when
// the lease ends: with a [*LeaseLostError] as its cause ([context.Cause]) when it is lost, with
// [ErrReleased] when it is released. Hand it to the work done under the lease.
func (l *Lease) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancelCause(l.parent)
		if l.status != statusHeld {
			l.cancel(l.err)
		}
	}
	return l.ctx
}

func (l *Lease) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	state := [...]string{statusHeld: "held", statusLost: "lost", statusReleased: "released",
		statusDropped: "released (its context ended)"}[l.status]
	return fmt.Sprintf("Lease(%s fence=%d %s %v)", l.token, l.fence, state, l.requests)
}

// end moves the lease from held to st, once; it answers false when it had already ended.
func (l *Lease) end(st status, err error) bool {
	l.mu.Lock()
	if l.status != statusHeld {
		l.mu.Unlock()
		return false
	}
	l.status, l.err = st, err
	l.timer.Stop()
	if l.done != nil {
		close(l.done)
	}
	cancel := l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel(err)
	}
	l.stopParent()
	return true
}

func (l *Lease) lose(reason LostReason) {
	l.end(statusLost, &LeaseLostError{Key: l.locks.key, Token: l.token, Reason: reason})
}

// The watchdog: fire runs on the timer's goroutine and only decides; a renewal runs on a
// goroutine of its own, so that one stuck on a paused server never delays the deadline.

func (l *Lease) fire() {
	l.mu.Lock()
	if l.status != statusHeld {
		l.mu.Unlock()
		return
	}
	now := time.Now()
	if !now.Before(l.deadline) {
		l.mu.Unlock()
		l.lose(Expired)
		return
	}
	if !l.renewing && !now.Before(l.nextRenew) {
		l.renewing = true
		go l.renew()
	}
	l.arm(now)
	l.mu.Unlock()
}

// arm sets the timer for the next renewal, or for the deadline while a renewal is in flight
// (l.mu held).
func (l *Lease) arm(now time.Time) {
	wake := l.deadline
	if !l.renewing && l.nextRenew.Before(wake) {
		wake = l.nextRenew
	}
	l.timer.Reset(wake.Sub(now))
}

// retryAfter is how long the watchdog waits before it retries a renewal that failed with a
// connection error: often enough to land several times before the deadline.
func (l *Lease) retryAfter() time.Duration {
	return min(max(l.s.period()/4, 5*time.Millisecond), 250*time.Millisecond)
}

func (l *Lease) renew() {
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	sent := time.Now()
	// A renewal still unanswered at the deadline comes too late, whatever it says: the
	// deadline bounds it where the client honours contexts (ContextTimeoutEnabled), and the
	// timer declares the loss at the deadline anyway.
	ctx, cancel := context.WithDeadline(l.values, deadline)
	n, err := l.locks.client.Do(ctx, "PATHLOCK.RENEW", l.locks.key, l.token, millis(l.s.ttl)).Int64()
	cancel()
	l.mu.Lock()
	l.renewing = false
	// A renewal that was in flight when the lease was released answers 0 (or renews what the
	// RELEASE then frees): either way it is not a loss.
	if l.status != statusHeld {
		l.mu.Unlock()
		return
	}
	var reason LostReason
	switch {
	case err == nil && n > 0 && n >= l.most:
		l.most = n
		if d := sent.Add(l.s.ttl); d.After(l.deadline) {
			l.deadline = d
		}
		l.nextRenew = sent.Add(l.s.period())
	case err == nil:
		reason = Gone
	case wrongType(err):
		reason = Replaced
	case errors.Is(err, redis.ErrClosed):
		// The application closed its client: no renewal can succeed before the deadline, nor
		// ever, so the loss is reported now (as expired) rather than after retries that cannot
		// succeed.
		reason = Expired
	default:
		// A connection error, a server briefly unable to serve: the lease is not lost while
		// its deadline is ahead.
		l.nextRenew = time.Now().Add(l.retryAfter())
	}
	if reason != 0 {
		l.mu.Unlock()
		l.lose(reason)
		return
	}
	l.arm(time.Now())
	l.mu.Unlock()
}

// Release stops the watchdog, then frees every lock of the lease (PATHLOCK.RELEASE key token),
// those taken by [Lease.Lock] too. Releasing twice, or a lost lease, is not an error (a lost
// lease's leftovers are freed all the same). A renewal still in flight is let finish and its
// answer ignored. It sends the RELEASE even when ctx has ended (a deferred Release after a
// request's context ended must still free the locks); when the server cannot be reached, it
// returns the error and retries in the background until the TTL has passed, by when the locks
// have expired anyway.
func (l *Lease) Release(ctx context.Context) error {
	return l.release(ctx, statusReleased, ErrReleased)
}

// release ends the lease as st (released, or dropped with its context) and frees its locks.
func (l *Lease) release(ctx context.Context, st status, cause error) error {
	l.mu.Lock()
	if l.freeing {
		l.mu.Unlock()
		return nil
	}
	l.freeing = true
	wasLost := l.status == statusLost
	l.mu.Unlock()
	l.end(st, cause)
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	_, err := l.locks.client.Do(ctx, "PATHLOCK.RELEASE", l.locks.key, l.token).Result()
	switch {
	case err == nil || wrongType(err):
		// A key overwritten by another value took the locks with it: nothing left to free.
		return nil
	case transient(err) || ctx.Err() != nil:
		releaseLater(l.locks.client, l.locks.key, l.token, time.Now().Add(l.s.ttl))
	}
	if wasLost {
		return nil
	}
	return err
}

// Lock takes more locks under the lease's token, inside or beside what it holds, and answers
// the fence of that grant. They take the lease's TTL and replicas, are renewed by its watchdog
// and freed by its release; the note and the wait are the lease's unless [WithNote] or
// [WithWait] (the only options it takes) say otherwise. Locking what the lease already holds is
// an idempotent re-acquire (a new fence; a note replaces theirs; [Lease.Fence] stays the first
// grant's). It fails with a [*BusyError] when another owner is in the way, a [*LeaseLostError]
// once the lease is lost (it renews the lease first, to find out), and [ErrReleased] once it
// is released. A Lock that fails with a connection error may still have been granted: such
// locks are the lease's.
func (l *Lease) Lock(ctx context.Context, requests []Request, options ...Option) (int64, error) {
	requests, err := checked(requests)
	if err != nil {
		return 0, err
	}
	s, err := l.s.with(options)
	if err != nil {
		return 0, err
	}
	if s.ttl != l.s.ttl || s.replicas != l.s.replicas || s.replicasTimeout != l.s.replicasTimeout {
		return 0, invalid("Lease.Lock takes WithWait and WithNote only: its locks take the lease's TTL and replicas")
	}
	if err := l.proveHeld(ctx); err != nil {
		return 0, err
	}
	g, err := l.locks.grant(ctx, ask{token: l.token, requests: requests, s: s})
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	if l.status != statusHeld {
		err := l.err
		l.mu.Unlock()
		// The lease ended while the grant was on its way: nobody renews those locks now.
		releaseLater(l.locks.client, l.locks.key, l.token, time.Now().Add(l.s.ttl))
		return 0, err
	}
	for _, r := range requests {
		if !contains(l.requests, r) {
			l.requests = append(l.requests, r)
		}
	}
	l.mu.Unlock()
	return g.fence, nil
}

func contains(requests []Request, r Request) bool {
	for _, have := range requests {
		if have == r {
			return true
		}
	}
	return false
}

// proveHeld renews the lease before it takes more locks: once its own locks are gone (its key
// deleted, its token released elsewhere), an ACQUIRE under its token would make new ones that
// keep answering its renewals, and the loss would go unseen.
func (l *Lease) proveHeld(ctx context.Context) error {
	if err := l.ended(); err != nil {
		return err
	}
	sent := time.Now()
	n, err := l.locks.client.Do(ctx, "PATHLOCK.RENEW", l.locks.key, l.token, millis(l.s.ttl)).Int64()
	switch {
	case wrongType(err):
		l.lose(Replaced)
	case err != nil:
		return err
	case n <= 0:
		l.lose(Gone)
	default:
		l.mu.Lock()
		if d := sent.Add(l.s.ttl); l.status == statusHeld && d.After(l.deadline) {
			l.deadline = d
		}
		l.mu.Unlock()
	}
	return l.ended()
}
