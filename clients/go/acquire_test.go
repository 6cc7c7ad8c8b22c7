package pathlock

// Acquiring: retries as the same owner after a cut connection, replicas, waiting acquires on
// connections of their own, and the caller's context.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
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

// waitRefused sends a waiting acquire on c that waits on c's blocking pool: another owner holds
// the path for the whole of its short wait (on free paths it would be granted without a wait,
// through c's own pool).
func waitRefused(t testing.TB, c redis.UniversalClient, key string) {
	t.Helper()
	locks := mustNew(t, c, key)
	holder, err := locks.Delete(bg, "/A")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locks.Upload(bg, "/A", WithWait(50*time.Millisecond)); !errors.Is(err, ErrBusy) {
		t.Fatalf("%T: want busy, got %v", c, err)
	}
	if err := holder.Release(bg); err != nil {
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
			waitRefused(t, c, testKey(t))
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
			if hasPool(c) {
				t.Fatal("a closed client's pool is still registered")
			}
		}
	})

	t.Run("a client still in use", func(t *testing.T) {
		for _, c := range []redis.UniversalClient{sharedClient(t), clusterClient(t, sharedCluster(t))} {
			for round := range 2 {
				waitRefused(t, c, testKey(t))
				if !hasPool(c) {
					t.Fatalf("%T, round %d: no pool after a wait", c, round)
				}
				expire(c)
				waitUntil(t, 5*time.Second, "the pool to close", func() bool { return !hasPool(c) })
			}
		}
	})
}

// hasPool tells whether the blocking pool of c is registered: whether a blocking call has used
// it (within the pools' idle time).
func hasPool(c redis.UniversalClient) bool {
	poolsMu.Lock()
	defer poolsMu.Unlock()
	return pools[c] != nil
}

// A waiting acquire on free paths is granted by its first request, sent without a wait through
// the application's client: no connection of the blocking pool is pinned for it, nor the pool
// made. Refused first, it waits on a pinned connection and is granted in the order it queued.
func TestAWaitingAcquireAsksWithoutWaitingFirst(t *testing.T) {
	t.Parallel()
	admin := sharedClient(t)
	key := testKey(t)
	for _, c := range []redis.UniversalClient{sharedClient(t), clusterClient(t, sharedCluster(t))} {
		lease, err := mustNew(t, c, key).Upload(bg, "/A/f", WithWait(5*time.Second))
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if hasPool(c) {
			t.Fatalf("%T: a grant on free paths made the blocking pool", c)
		}
		if err := lease.Release(bg); err != nil {
			t.Fatal(err)
		}
	}

	c := sharedClient(t)
	locks := mustNew(t, c, key)
	holder, err := locks.Delete(bg, "/A")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease *Lease
		err   error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	wait := func(out chan<- result, note string) {
		lease, err := locks.Upload(bg, "/A/f", WithWait(10*time.Second), WithNote(note))
		out <- result{lease, err}
	}
	queued := func(n int) func() bool {
		return func() bool {
			w, _ := locks.Waiters(bg, "")
			return len(w) == n
		}
	}
	go wait(first, "first")
	waitUntil(t, 5*time.Second, "the first waiter to queue", queued(1))
	go wait(second, "second")
	waitUntil(t, 5*time.Second, "the second waiter to queue", queued(2))
	if !hasPool(c) {
		t.Fatal("the waiters queued without the blocking pool")
	}
	if w, _ := locks.Waiters(bg, ""); w[0].Note != "first" || w[1].Note != "second" {
		t.Fatalf("queued %+v", w)
	}
	if err := holder.Release(bg); err != nil {
		t.Fatal(err)
	}
	r1 := <-first
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	select {
	case r := <-second:
		t.Fatalf("the second waiter was granted beside the first: %v", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := r1.lease.Release(bg); err != nil {
		t.Fatal(err)
	}
	r2 := <-second
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	if r2.lease.Fence() <= r1.lease.Fence() {
		t.Fatalf("fences %d then %d", r1.lease.Fence(), r2.lease.Fence())
	}
	if err := r2.lease.Release(bg); err != nil {
		t.Fatal(err)
	}
	if got := held(t, admin, key); len(got) != 0 {
		t.Fatalf("left %v", got)
	}
}

// A waiting acquire on a client the application has closed fails with go-redis's ErrClosed, as
// any other call does, and leaves no lock on the server: closed before the call, whether the
// paths are free or busy, and closed while the call waits on the blocking pool (which the
// application's Close does not reach).
func TestAWaitingAcquireOnAClosedClientFails(t *testing.T) {
	t.Parallel()
	admin := sharedClient(t)
	closedErr := func(t *testing.T, lease *Lease, err error) {
		t.Helper()
		if lease != nil || !errors.Is(err, redis.ErrClosed) {
			t.Fatalf("want redis.ErrClosed, got %v, %v", lease, err)
		}
	}

	t.Run("free paths", func(t *testing.T) {
		t.Parallel()
		key := testKey(t)
		for _, c := range []redis.UniversalClient{sharedServer(t).client(), clusterClient(t, sharedCluster(t))} {
			locks := mustNew(t, c, key)
			_ = c.Close()
			lease, err := locks.Upload(bg, "/A/f", WithWait(100*time.Millisecond), WithTTL(3*time.Second))
			closedErr(t, lease, err)
		}
		if got := held(t, admin, key); len(got) != 0 {
			t.Fatalf("left %v", got)
		}
	})

	t.Run("busy paths", func(t *testing.T) {
		t.Parallel()
		key := testKey(t)
		holder, err := mustNew(t, admin, key).Delete(bg, "/A")
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Release(bg)
		c := sharedServer(t).client()
		_ = c.Close()
		started := time.Now()
		lease, err := mustNew(t, c, key).Upload(bg, "/A/f", WithWait(5*time.Second))
		closedErr(t, lease, err)
		if took := time.Since(started); took > time.Second {
			t.Fatalf("refused after %v", took)
		}
		if got, want := held(t, admin, key), lockLines(holder.Token(), Request{Write, "/A"}); !sameLines(got, want) {
			t.Fatalf("held %v, want %v", got, want)
		}
	})

	t.Run("closed during the wait", func(t *testing.T) {
		t.Parallel()
		key := testKey(t)
		holder, err := mustNew(t, admin, key).Delete(bg, "/A")
		if err != nil {
			t.Fatal(err)
		}
		c := sharedServer(t).client()
		locks := mustNew(t, c, key)
		done := make(chan error, 1)
		go func() {
			lease, err := locks.Upload(bg, "/A/f", WithWait(10*time.Second), WithTTL(30*time.Second))
			if lease != nil {
				err = fmt.Errorf("granted %v (error %v)", lease, err)
			}
			done <- err
		}()
		waitUntil(t, 5*time.Second, "the upload to queue", func() bool {
			w, _ := mustNew(t, admin, key).Waiters(bg, "")
			return len(w) == 1
		})
		_ = c.Close()
		if err := holder.Release(bg); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, redis.ErrClosed) {
			t.Fatalf("want redis.ErrClosed, got %v", err)
		}
		// Released at once on the connection that made the grant, not left to its 30 s TTL.
		if got := held(t, admin, key); len(got) != 0 {
			t.Fatalf("left %v", got)
		}
	})

	// What the README says of a lease held when the client is closed: it cannot release its
	// locks (Release answers the error), and unreleased it is lost (at its next renewal; see
	// TestALeaseOnAClosedClientIsLostAtItsNextRenewal).
	t.Run("a lease held", func(t *testing.T) {
		t.Parallel()
		key := testKey(t)
		c := sharedServer(t).client()
		locks := mustNew(t, c, key, WithTTL(600*time.Millisecond))
		released, err := locks.Upload(bg, "/A/f")
		if err != nil {
			t.Fatal(err)
		}
		kept, err := locks.Upload(bg, "/A/g")
		if err != nil {
			t.Fatal(err)
		}
		closed := time.Now()
		_ = c.Close()
		if err := released.Release(bg); !errors.Is(err, redis.ErrClosed) {
			t.Fatalf("Release on a closed client: %v", err)
		}
		lostWithin(t, kept, closed, 600*time.Millisecond+slack)
		if lostReason(kept) != Expired {
			t.Fatalf("lost as %v", kept.Err())
		}
		if err := kept.Release(bg); err != nil {
			t.Fatalf("Release of a lost lease: %v", err)
		}
	})

	t.Run("replicas", func(t *testing.T) {
		t.Parallel()
		master := ownServer(t)
		replicaOf(t, master)
		admin := master.client()
		defer admin.Close()
		key := testKey(t)
		c := master.client()
		_ = c.Close()
		lease, err := mustNew(t, c, key).Upload(bg, "/A/f", WithReplicas(1), WithTTL(30*time.Second))
		closedErr(t, lease, err)
		if got := held(t, admin, key); len(got) != 0 {
			t.Fatalf("left %v", got)
		}
	})
}

// When the PATHLOCK.CHECK that is to name the blockers of a refusal fails, the BusyError says
// that they could not be read, never that nothing holds the paths: here the CHECK is refused
// with NOPERM to an ACL user that may do anything but CHECK. The check's error is CheckErr,
// which errors.As finds through Unwrap, while errors.Is(err, ErrBusy) still holds.
func TestABusyWhoseCheckFailedSaysTheBlockersCouldNotBeRead(t *testing.T) {
	t.Parallel()
	var settings contractSettings
	if err := decodeJSON(filepath.Join(contractDir, "contract.json"), &settings); err != nil || settings.Messages["busy_unread"] == "" {
		t.Fatalf("the contract's busy_unread message: %v", err)
	}
	admin := sharedClient(t)
	key := testKey(t)
	user := "nocheck-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := admin.Do(bg, "ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "&*", "+@all", "-pathlock.check").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(bg, "ACL", "DELUSER", user).Err() })
	holder, err := mustNew(t, admin, key).Upload(bg, "/F/x")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(bg)
	c := redis.NewClient(&redis.Options{Addr: sharedServer(t).addr(), Username: user, Password: "pw"})
	t.Cleanup(func() { _ = c.Close() })
	locks := mustNew(t, c, key)
	// Refused at once, and after a wait on the blocking pool.
	for _, wait := range []time.Duration{0, 50 * time.Millisecond} {
		lease, err := locks.Upload(bg, "/F/x", WithWait(wait))
		var busy *BusyError
		if lease != nil || !errors.As(err, &busy) || !errors.Is(err, ErrBusy) {
			t.Fatalf("wait %v: want a *BusyError, got %v, %v", wait, lease, err)
		}
		var rerr redis.Error
		if !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Error(), "NOPERM") || busy.CheckErr == nil || len(busy.Blockers) != 0 {
			t.Fatalf("wait %v: want the CHECK's NOPERM inside, got %#v", wait, busy)
		}
		want := strings.NewReplacer("{locks}", "WRITE /F/x", "{key}", key, "{check_error}", busy.CheckErr.Error()).
			Replace(settings.Messages["busy_unread"])
		if err.Error() != want || strings.Contains(err.Error(), "nothing holds") {
			t.Fatalf("wait %v: message %q, want %q", wait, err, want)
		}
	}
	// The same user's CHECK refused is the error of Check itself, not a Busy.
	if _, err := locks.Check(bg, []Request{{Write, "/F/x"}}, ""); errors.Is(err, ErrBusy) || err == nil {
		t.Fatalf("Check: %v", err)
	}
}
