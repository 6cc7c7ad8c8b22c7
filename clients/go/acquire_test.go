package pathlock

// Acquiring: retries as the same owner after a cut connection, replicas, waiting acquires on
// connections of their own, and the caller's context.

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestAnAcquireWhoseReplyIsLostIsRetriedAsTheSameOwner(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		maxRetries int
		wait       time.Duration
	}{
		// go-redis resends the command itself (its MaxRetries), or the client does: the token is
		// the same either way.
		"go-redis retries":       {0, 0},
		"the client retries":     {-1, 0},
		"a waiting acquire":      {0, 5 * time.Second},
		"a waiting acquire only": {-1, 5 * time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := sharedClient(t)
			key := testKey(t)
			proxy := newDroppingProxy(t, sharedServer(t).addr(), 1)
			proxied := redis.NewClient(&redis.Options{Addr: proxy.addr(), MaxRetries: tc.maxRetries})
			defer proxied.Close()
			lease, err := mustNew(t, proxied, key, WithWait(tc.wait)).Move(bg, "/A/C", "/B")
			if err != nil {
				t.Fatal(err)
			}
			if proxy.dropped.Load() != 1 || proxy.acquires.Load() != 2 {
				t.Fatalf("dropped %d of %d acquires", proxy.dropped.Load(), proxy.acquires.Load())
			}
			// One owner, not two: both locks under the one token, with the retry's fence.
			if got, want := held(t, c, key), lockLines(lease.Token(), Request{Write, "/A/C"}, Request{Write, "/B/C"}); !sameLines(got, want) {
				t.Fatalf("held %v, want %v", got, want)
			}
			all, err := mustNew(t, c, key).Locks(bg, "", "")
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range all {
				if l.Fence != lease.Fence() {
					t.Fatalf("fence %d beside the lease's %d", l.Fence, lease.Fence())
				}
			}
			if err := lease.Release(bg); err != nil {
				t.Fatal(err)
			}
			if got := held(t, c, key); len(got) != 0 {
				t.Fatalf("left %v", got)
			}
		})
	}
}

func TestAnAcquireThatKeepsFailingReleasesItsToken(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	key := testKey(t)
	proxy := newDroppingProxy(t, sharedServer(t).addr(), 1000)
	proxied := redis.NewClient(&redis.Options{Addr: proxy.addr(), MaxRetries: -1})
	defer proxied.Close()
	_, err := mustNew(t, proxied, key, WithTTL(time.Minute)).Upload(bg, "/A/f")
	var nerr net.Error
	if err == nil || errors.Is(err, ErrBusy) || !(errors.As(err, &nerr) || transient(err)) {
		t.Fatalf("want a connection error, got %v", err)
	}
	if proxy.acquires.Load() < 2 {
		t.Fatalf("%d attempts", proxy.acquires.Load())
	}
	// The server granted it; the client frees it in the background, long before the TTL. Its
	// RELEASE goes through the proxy too, which only cuts ACQUIREs.
	waitUntil(t, 5*time.Second, "the orphaned grant to be released", func() bool { return len(held(t, c, key)) == 0 })
}

// A move held for 5 s with a 3 s TTL, and an upload into it that waits on the same handle and
// client, whose pool has one connection: the move keeps its lease for its whole run, and the
// upload is granted only after it. Had the wait taken the connection the renewals need, the
// move would be lost after 3 s.
func TestAWaiterOnTheHoldersClientNeverHoldsUpItsRenewals(t *testing.T) {
	t.Parallel()
	// The contract's scenario runs it on go-redis's default pool; here, on a pool of one.
	c := redis.NewClient(&redis.Options{Addr: sharedServer(t).addr(), PoolSize: 1})
	defer c.Close()
	locks := mustNew(t, c, testKey(t), WithTTL(3*time.Second))
	move, err := locks.Move(bg, "/A/C", "/B")
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	granted := make(chan time.Time, 1)
	go func() {
		upload, err := locks.Upload(bg, "/B/C/new.txt", WithWait(10*time.Second))
		if err != nil {
			t.Error(err)
			granted <- time.Time{}
			return
		}
		granted <- time.Now()
		_ = upload.Release(bg)
	}()
	waitUntil(t, 5*time.Second, "the upload to queue", func() bool {
		w, _ := locks.Waiters(bg, "")
		return len(w) > 0
	})
	for time.Since(started) < 5*time.Second {
		if err := move.Err(); err != nil {
			t.Fatalf("lost after %v: %v", time.Since(started), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-granted:
		t.Fatal("the upload was granted inside the move")
	default:
	}
	ended := time.Now()
	if err := move.Release(bg); err != nil {
		t.Fatal(err)
	}
	at := <-granted
	if at.Before(ended) {
		t.Fatalf("granted %v before the move ended", ended.Sub(at))
	}
	if move.IsLost() {
		t.Fatal(move.Err())
	}
}

func TestACancelledContextTakesAWaitingAcquireOffTheQueue(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	key := testKey(t)
	locks := mustNew(t, c, key)
	holder, err := locks.Delete(bg, "/A")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(bg)

	// Cancelled: a CLIENT UNBLOCK ends the wait at once.
	ctx, cancel := context.WithCancelCause(bg)
	stop := errors.New("the user gave up")
	time.AfterFunc(300*time.Millisecond, func() { cancel(stop) })
	started := time.Now()
	_, err = locks.Upload(ctx, "/A/f", WithWait(20*time.Second))
	if err != stop {
		t.Fatalf("want the context's cause, got %v", err)
	}
	if took := time.Since(started); took > 3*time.Second {
		t.Fatalf("the cancelled wait took %v", took)
	}
	if w, _ := locks.Waiters(bg, ""); len(w) != 0 {
		t.Fatalf("still waiting: %v", w)
	}

	// A deadline ends it too (the read deadline of the pinned connection).
	ctx, cancelTimeout := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancelTimeout()
	started = time.Now()
	_, err = locks.Upload(ctx, "/A/f", WithWait(20*time.Second))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the deadline, got %v", err)
	}
	if took := time.Since(started); took > 3*time.Second {
		t.Fatalf("the wait past its deadline took %v", took)
	}
	waitUntil(t, 5*time.Second, "the waiter to leave", func() bool {
		w, _ := locks.Waiters(bg, "")
		return len(w) == 0
	})
	if got, want := held(t, c, key), lockLines(holder.Token(), Request{Write, "/A"}); !sameLines(got, want) {
		t.Fatalf("held %v", got)
	}
}

func TestAGrantThatWaitedLongerThanAThirdOfItsTTLIsRenewedAtOnce(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	key := testKey(t)
	locks := mustNew(t, c, key)
	holder, err := locks.Delete(bg, "/A")
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(500*time.Millisecond, func() { _ = holder.Release(bg) })
	calls := renewCalls(t, c)
	lease, err := locks.Upload(bg, "/A/f", WithWait(5*time.Second), WithTTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(bg)
	if renewCalls(t, c) == calls {
		t.Fatal("no renewal dated the grant")
	}
	time.Sleep(1200 * time.Millisecond)
	if err := lease.Err(); err != nil {
		t.Fatal(err)
	}
}

// An application that makes a client per tenant (or a test suite, one per test) and closes it
// after a waiting acquire leaves nothing open behind it: the blocking pool made for each client
// is closed once unused, and one still in use is made again at its next wait.
func TestABlockingPoolIsClosedOnceUnused(t *testing.T) {
	// Not parallel: it sets how long every pool may stay unused.
	idle := func(d time.Duration) {
		poolsMu.Lock()
		poolIdleTime = d
		poolsMu.Unlock()
	}
	registered := func(c redis.UniversalClient) bool {
		poolsMu.Lock()
		defer poolsMu.Unlock()
		return pools[c] != nil
	}
	// expire starts a short idle period for the pool of c, as a call that just gave it back.
	expire := func(c redis.UniversalClient) {
		idle(50 * time.Millisecond)
		takePool(c).put()
	}
	t.Cleanup(func() { idle(time.Minute) })

	t.Run("closed clients", func(t *testing.T) {
		idle(time.Hour)
		srv := sharedServer(t)
		admin := sharedClient(t)
		const name = "closed-client-pool"
		named := func() int {
			list, err := admin.ClientList(bg).Result()
			if err != nil {
				t.Fatal(err)
			}
			return strings.Count(list, " name="+name+" ")
		}
		var closed []*redis.Client
		for range 3 {
			c := redis.NewClient(&redis.Options{Addr: srv.addr(), ClientName: name})
			lease, err := mustNew(t, c, testKey(t)).Upload(bg, "/A", WithWait(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Release(bg); err != nil {
				t.Fatal(err)
			}
			_ = c.Close()
			closed = append(closed, c)
		}
		// What used to stay for ever: each closed client's blocking pool, with a connection.
		if n := named(); n != len(closed) {
			t.Fatalf("%d connections named %s before the pools' idle time, want %d", n, name, len(closed))
		}
		for _, c := range closed {
			expire(c)
		}
		waitUntil(t, 5*time.Second, "the closed clients' pools to close", func() bool { return named() == 0 })
		for _, c := range closed {
			if registered(c) {
				t.Fatal("a closed client's pool is still registered")
			}
		}
	})

	t.Run("a client still in use", func(t *testing.T) {
		for _, c := range []redis.UniversalClient{sharedClient(t), clusterClient(t, sharedCluster(t))} {
			locks := mustNew(t, c, testKey(t))
			for round := range 2 {
				lease, err := locks.Upload(bg, "/A", WithWait(time.Second))
				if err != nil {
					t.Fatalf("%T, round %d: %v", c, round, err)
				}
				if err := lease.Release(bg); err != nil {
					t.Fatal(err)
				}
				if !registered(c) {
					t.Fatalf("%T: no pool after a wait", c)
				}
				expire(c)
				waitUntil(t, 5*time.Second, "the pool to close", func() bool { return !registered(c) })
			}
		}
	})
}
