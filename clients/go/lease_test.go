package pathlock

// The watchdog and the losses, against a real server.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var uuid4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestLostWhenTheTokenIsReleasedElsewhere(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	key := testKey(t)
	lease, err := mustNew(t, c, key, WithTTL(900*time.Millisecond)).Upload(bg, "/A/f")
	if err != nil {
		t.Fatal(err)
	}
	work := lease.Context()
	var called atomic.Int32
	context.AfterFunc(work, func() { called.Add(1) })
	time.Sleep(400 * time.Millisecond)
	if n, _ := c.Do(bg, "PATHLOCK.RELEASE", key, lease.Token()).Int(); n != 1 {
		t.Fatalf("RELEASE freed %d", n)
	}
	lostWithin(t, lease, time.Now(), 300*time.Millisecond+slack)
	if lostReason(lease) != Gone {
		t.Fatalf("reason %v", lease.Err())
	}
	var lostErr *LeaseLostError
	if !errors.Is(lease.Err(), ErrLeaseLost) || !errors.As(lease.Err(), &lostErr) || lostErr.Token != lease.Token() || lostErr.Key != key {
		t.Fatalf("Err() = %v", lease.Err())
	}
	<-work.Done()
	if cause := context.Cause(work); !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("the context's cause is %v", cause)
	}
	waitUntil(t, time.Second, "the AfterFunc callback", func() bool { return called.Load() == 1 })
	// Releasing a lost lease, twice, is not an error; the loss stays what it was.
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
	if lostReason(lease) != Gone {
		t.Fatalf("after release: %v", lease.Err())
	}
}

// gate is a go-redis hook that holds PATHLOCK.RENEW back before it is sent or after it is
// answered, to put a renewal in flight exactly when the lease is released.
type gate struct {
	after   bool
	closed  atomic.Bool
	holding chan struct{}
	open    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	answers []int64
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "pathlock.renew" || !g.closed.Load() {
			return next(ctx, cmd)
		}
		if !g.after {
			g.once.Do(func() { close(g.holding) })
			<-g.open
		}
		err := next(ctx, cmd)
		if g.after {
			g.once.Do(func() { close(g.holding) })
			<-g.open
		}
		if c, ok := cmd.(*redis.Cmd); ok {
			n, _ := c.Int64()
			g.mu.Lock()
			g.answers = append(g.answers, n)
			g.mu.Unlock()
		}
		return err
	}
}

func TestARenewalInFlightAtReleaseNeitherKeepsTheLockNorReportsALoss(t *testing.T) {
	t.Parallel()
	for _, after := range []bool{false, true} {
		t.Run(map[bool]string{false: "before-send", true: "after-answer"}[after], func(t *testing.T) {
			t.Parallel()
			key := testKey(t)
			c := sharedClient(t)
			gated := sharedServer(t).client()
			defer gated.Close()
			g := &gate{after: after, holding: make(chan struct{}), open: make(chan struct{})}
			gated.AddHook(g)
			lease, err := mustNew(t, gated, key, WithTTL(600*time.Millisecond)).Upload(bg, "/A/f")
			if err != nil {
				t.Fatal(err)
			}
			g.closed.Store(true)
			select {
			case <-g.holding:
			case <-time.After(2 * time.Second):
				t.Fatal("no renewal was held back")
			}
			if err := lease.Release(bg); err != nil {
				t.Fatal(err)
			}
			if got := held(t, c, key); len(got) != 0 {
				t.Fatalf("held %v after release", got)
			}
			close(g.open)
			waitUntil(t, 5*time.Second, "the held-back renewal to be answered", func() bool {
				g.mu.Lock()
				defer g.mu.Unlock()
				return len(g.answers) == 1
			})
			// Sent after the RELEASE it answers 0; answered before it, the RELEASE freed what it
			// renewed.
			if want := map[bool]int64{false: 0, true: 1}[after]; g.answers[0] != want {
				t.Fatalf("the renewal answered %d, want %d", g.answers[0], want)
			}
			time.Sleep(800 * time.Millisecond)
			if got := held(t, c, key); len(got) != 0 {
				t.Fatalf("held %v", got)
			}
			if lease.IsLost() || lease.Err() != nil {
				t.Fatalf("after release: %v", lease.Err())
			}
		})
	}
}

func TestReleasesRacingRenewalsNeverReportALoss(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	key := testKey(t)
	locks := mustNew(t, c, key, WithTTL(300*time.Millisecond))
	rng := rand.New(rand.NewSource(7))
	calls := renewCalls(t, c)
	var leases []*Lease
	for i := range 40 {
		lease, err := locks.Upload(bg, fmt.Sprintf("/f%d", i%5))
		if err != nil {
			t.Fatal(err)
		}
		// Around the renewal period (100 ms), so that releases land before, during and after
		// renewals.
		time.Sleep(time.Duration(60+rng.Intn(80)) * time.Millisecond)
		if err := lease.Release(bg); err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
	}
	if renewCalls(t, c) <= calls {
		t.Fatal("no renewal ever ran")
	}
	time.Sleep(100 * time.Millisecond)
	for _, lease := range leases {
		if lease.IsLost() {
			t.Fatalf("a released lease was reported lost: %v", lease.Err())
		}
	}
	if got := held(t, c, key); len(got) != 0 {
		t.Fatalf("held %v", got)
	}
}

func TestAReleasedLeaseEndsItsContextAndLostChannelWithReleased(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	locks := mustNew(t, c, testKey(t))
	lease, err := locks.Delete(bg, "/A")
	if err != nil {
		t.Fatal(err)
	}
	lost, work := lease.Lost(), lease.Context()
	select {
	case <-lost:
		t.Fatal("Lost() closed while held")
	default:
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
	<-lost
	<-work.Done()
	if cause := context.Cause(work); cause != ErrReleased {
		t.Fatalf("cause %v", cause)
	}
	if lease.IsLost() || lease.Err() != nil {
		t.Fatalf("after release: %v", lease.Err())
	}
	// Asked for after the release, they are ended already.
	<-lease.Lost()
	<-lease.Context().Done()
	if _, err := lease.Lock(bg, []Request{{Write, "/A/x"}}); !errors.Is(err, ErrReleased) {
		t.Fatalf("Lock after release: %v", err)
	}
}

func TestALeaseIsReleasedWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	key := testKey(t)
	ctx, cancel := context.WithCancelCause(bg)
	lease, err := mustNew(t, c, key).Upload(ctx, "/A/f")
	if err != nil {
		t.Fatal(err)
	}
	work := lease.Context()
	stopped := errors.New("the request was cancelled")
	cancel(stopped)
	<-work.Done()
	if cause := context.Cause(work); cause != stopped {
		t.Fatalf("cause %v", cause)
	}
	waitUntil(t, 5*time.Second, "the lease to be released", func() bool { return len(held(t, c, key)) == 0 })
	<-lease.Lost()
	// Work that polls Err() rather than watching the context must stop too: its locks are free
	// for others now. It is not a loss.
	if err := lease.Err(); lease.IsLost() || !errors.Is(err, ErrReleased) || !errors.Is(err, stopped) || errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Err() = %v, IsLost() = %v", err, lease.IsLost())
	}
	if _, err := lease.Lock(bg, []Request{{Write, "/A/f/x"}}); !errors.Is(err, ErrReleased) || !errors.Is(err, stopped) {
		t.Fatalf("Lock after the context ended: %v", err)
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
}

// A lease held when the application closes its client is lost at its next renewal, which
// answers redis.ErrClosed: a closed client never comes back, so the watchdog does not retry
// until the deadline. Its context ends with the *LeaseLostError as its cause.
func TestALeaseOnAClosedClientIsLostAtItsNextRenewal(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	c := sharedServer(t).client()
	lease, err := mustNew(t, c, testKey(t), WithTTL(ttl)).Upload(bg, "/A/f")
	if err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	_ = c.Close()
	// The first renewal goes out a third of the TTL after the grant.
	took := lostWithin(t, lease, closed, ttl/3+slack)
	var lost *LeaseLostError
	if !errors.As(context.Cause(lease.Context()), &lost) || lost.Reason != Expired || lease.Err() != lost {
		t.Fatalf("after %v: cause %v, Err %v", took, context.Cause(lease.Context()), lease.Err())
	}
	if err := lease.Release(bg); err != nil {
		t.Fatalf("Release of a lost lease: %v", err)
	}
}
