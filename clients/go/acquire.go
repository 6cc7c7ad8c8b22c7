package pathlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Granting: one PATHLOCK.ACQUIRE under a token, retried as the same owner after a connection
// error, with the blockers of a refusal and the replicas' acknowledgement. A new owner's first
// grant and a lease's further locks (Lease.Lock) both come through here.
//
// A waiting acquire first asks without waiting, through the application's client with Do: most
// are granted at once, and then no connection of the blocking pool is pinned for them, and a
// client the application has closed answers redis.ErrClosed (the blocking pool, a client of
// our own, would not know). Only a refusal with wait left sends the request again, with WAIT
// for what is left, on a pinned connection of the blocking pool (conns.go). A call with
// replicas makes its grant on a pinned connection from the start, since WAIT counts the writes
// of the connection that made the grant. A grant made on a pinned connection is confirmed
// through the application's client (a RENEW, which also dates its deadline) before it is
// handed out: a client closed before or during the wait answers redis.ErrClosed there, and the
// grant is then released on the pinned connection, which is still open.

// ask is who asks for what. fresh is a new owner's first grant, whose token holds nothing else:
// on a failure after which it may hold locks anyway, the token is released. A lease's further
// locks (fresh false) are never released that way, since that would free the lease too.
type ask struct {
	token    string
	requests []Request
	s        settings
	fresh    bool
}

// granted is a grant's fence, and when the request that got it was sent: the lease's clock
// starts there, which is never later than the server's.
type granted struct {
	fence int64
	sent  time.Time
}

// retryPause is the pause before an acquire's third and later attempts (the second goes out at
// once), within what is left of its wait.
const retryPause = 20 * time.Millisecond

// maxRedirects bounds the MOVED and ASK answers a blocking call follows, as go-redis's own
// MaxRedirects does for the others.
const maxRedirects = 5

func (l *Locks) grant(ctx context.Context, a ask) (granted, error) {
	g := grantAttempt{l: l, a: a, budgetEnd: time.Now().Add(a.s.wait), queue: a.s.replicas > 0}
	result, err := g.run(ctx)
	if err != nil && g.mayHold && a.fresh {
		// A grant may have happened that no reply reported (or that failed its replicas): the
		// token is freed once the server answers, before its TTL would free it.
		releaseLater(l.client, l.key, a.token, g.lastSent.Add(a.s.wait+a.s.ttl))
	}
	return result, err
}

type grantAttempt struct {
	l         *Locks
	a         ask
	budgetEnd time.Time
	// pin is the connection of a blocking call while no request is pending on it.
	pin *pinned
	// queue is set while the next attempt goes to a pinned connection of the blocking pool (to
	// wait on the server, or for the replicas' WAIT), and clear while it goes through the
	// application's client without a wait.
	queue bool
	// unsure is set once an attempt failed without an answer: the server may have granted it.
	unsure bool
	// mayHold is set while the token may hold locks that no lease owns.
	mayHold  bool
	lastSent time.Time
}

func (g *grantAttempt) run(ctx context.Context) (granted, error) {
	defer func() {
		if g.pin != nil {
			g.pin.close()
		}
	}()
	var addr string
	var askFirst bool
	failures, redirects := 0, 0
	for {
		if err := ctx.Err(); err != nil {
			g.mayHold = g.unsure && g.a.fresh
			return granted{}, context.Cause(ctx)
		}
		if g.queue && g.pin == nil {
			pin, err := g.l.pin(ctx, addr, g.a.s)
			if err != nil {
				failures++
				if !transient(err) || (failures > 1 && !time.Now().Before(g.budgetEnd)) {
					g.mayHold = g.unsure && g.a.fresh
					return granted{}, err
				}
				g.pause(ctx)
				continue
			}
			g.pin = pin
		}
		// Only a pinned connection waits on the server: the whole wait when nothing was sent
		// before, else what is left of it.
		var wait time.Duration
		if g.queue {
			wait = g.a.s.wait
			if failures > 0 || !g.lastSent.IsZero() {
				wait = max(time.Until(g.budgetEnd), 0)
			}
		}
		args := acquireArgs(g.l.key, g.a, wait)
		sent := time.Now()
		g.lastSent = sent
		g.mayHold = g.a.fresh
		var reply any
		var err error
		onPin := g.pin != nil
		if onPin {
			reply, err = g.pin.do(ctx, askFirst, args)
			askFirst = false
		} else {
			reply, err = g.l.client.Do(ctx, args...).Result()
		}
		switch {
		case err == nil:
			fence, perr := parseGrant(reply, g.a.token)
			if perr != nil {
				return granted{}, perr
			}
			return g.granted(ctx, fence, sent, onPin)
		case errors.Is(err, redis.Nil):
			if cerr := ctx.Err(); cerr != nil {
				// Our own CLIENT UNBLOCK, for the caller's context: the request left the queue.
				g.mayHold = g.unsure && g.a.fresh
				return granted{}, context.Cause(ctx)
			}
			if fence, ok := g.recoverEarlierGrant(ctx); ok {
				return g.granted(ctx, fence, sent, false)
			}
			g.mayHold = g.unsure && g.a.fresh
			if !g.queue && time.Now().Before(g.budgetEnd) {
				// Refused without waiting, with wait left: the same request (the same token)
				// now waits on the server, on a pinned connection, for what is left. The
				// blockers are asked for only if that is refused too.
				g.queue = true
				continue
			}
			return granted{}, g.l.busy(ctx, g.a.token, g.a.requests)
		}
		if to, isAsk, ok := redirection(err); ok && g.pin != nil && redirects < maxRedirects {
			// Only a blocking call's pinned connection sees these (go-redis follows them for Do):
			// the slot moved, or is moving; the request goes to the node named.
			redirects++
			g.mayHold = g.unsure && g.a.fresh
			if cluster := g.pin.pool.cluster; cluster != nil && !isAsk {
				cluster.ReloadState(ctx)
			}
			g.pin.close()
			g.pin = nil
			addr, askFirst = to, isAsk
			continue
		}
		if !transient(err) {
			// The server refused the request itself, or the client is closed, or the caller's
			// context ended before the request was sent; only an earlier attempt may hold.
			g.mayHold = g.unsure && g.a.fresh
			if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
				return granted{}, context.Cause(ctx)
			}
			return granted{}, about(g.l.key, err)
		}
		// The request may have been granted with its reply lost: from here on, giving up
		// releases the token. A connection of its own is not used again after a failure, and
		// the retry asks without waiting first again (a call with replicas excepted).
		firstFailure := !g.unsure
		g.unsure = true
		failures++
		if g.pin != nil {
			g.pin.close()
			g.pin = nil
		}
		g.queue = g.a.s.replicas > 0
		if !firstFailure {
			if !time.Now().Before(g.budgetEnd) {
				return granted{}, err
			}
			g.pause(ctx)
		}
	}
}

// pause waits before the next attempt: retryPause, or what is left of the wait, or until ctx
// ends.
func (g *grantAttempt) pause(ctx context.Context) {
	d := min(retryPause, max(time.Until(g.budgetEnd), 0))
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// granted finishes a grant: the replicas' WAIT, and a renewal through the application's client
// when the grant was made on a pinned connection, or waited so long that its deadline must be
// dated again.
func (g *grantAttempt) granted(ctx context.Context, fence int64, sent time.Time, onPin bool) (granted, error) {
	if g.a.s.replicas > 0 {
		if err := g.awaitReplicas(ctx); err != nil {
			return granted{}, err
		}
	}
	if g.a.fresh && (onPin || time.Since(sent) > g.a.s.ttl/3) {
		// A grant made on the blocking pool has not been near the application's client, which
		// the application may have closed meanwhile: the lease it would make could never renew
		// nor release its locks. And a grant that waited on the server cannot tell when in
		// that wait it was made. A renewal through the application's client answers both: it
		// proves the client open and the lease alive, and dates its deadline.
		sent = time.Now()
		n, err := g.l.client.Do(ctx, "PATHLOCK.RENEW", g.l.key, g.a.token, millis(g.a.s.ttl)).Int64()
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				// Nothing will go through the closed client again, the background release
				// included: the connection that made the grant frees it.
				g.releaseOnPin(ctx)
			}
			return granted{}, about(g.l.key, err)
		}
		if n <= 0 {
			g.mayHold = false
			return granted{}, &LeaseLostError{Key: g.l.key, Token: g.a.token, Reason: Gone}
		}
	}
	g.mayHold = false
	return granted{fence: fence, sent: sent}, nil
}

// awaitReplicas sends WAIT on the connection that made the grant (WAIT counts that
// connection's writes); with fewer acknowledgements than asked, a new owner's grant is
// released.
func (g *grantAttempt) awaitReplicas(ctx context.Context) error {
	wanted := g.a.s.replicas
	acked, err := g.pin.conn.Do(ctx, "WAIT", wanted, millis(g.a.s.replicasTimeout)).Int64()
	if err != nil {
		return err
	}
	if acked >= int64(wanted) {
		return nil
	}
	g.releaseOnPin(ctx)
	return &NotReplicatedError{Acknowledged: int(acked), Wanted: wanted}
}

// releaseOnPin frees a new owner's grant on the pinned connection that made it (which works
// whether or not the application has closed its client), even once ctx has ended; if that
// fails, the token is left to the background release of grant.
func (g *grantAttempt) releaseOnPin(ctx context.Context) {
	if !g.a.fresh || g.pin == nil {
		return
	}
	if err := g.pin.conn.Do(context.WithoutCancel(ctx), "PATHLOCK.RELEASE", g.l.key, g.a.token).Err(); err == nil {
		g.mayHold = false
	}
}

// recoverEarlierGrant: after an attempt of a new owner went unanswered, a refusal of the retry
// does not prove that the token holds nothing. The earlier attempt may have been granted, and
// a request of another owner queued since (waiting for us) refuses our retry, since nobody
// overtakes a waiter. A fresh token holds locks only if that grant happened, so a RENEW that
// finds any tells (and refreshes them as the retry would have); the fence is the one LOCKS
// reports for the token's lock on the first path.
func (g *grantAttempt) recoverEarlierGrant(ctx context.Context) (int64, bool) {
	if !g.unsure || !g.a.fresh {
		return 0, false
	}
	n, err := g.l.client.Do(ctx, "PATHLOCK.RENEW", g.l.key, g.a.token, millis(g.a.s.ttl)).Int64()
	if err != nil || n <= 0 {
		return 0, false
	}
	reply, err := g.l.client.Do(ctx, "PATHLOCK.LOCKS", g.l.key, g.a.requests[0].Path, "TOKEN", g.a.token).Result()
	if err != nil {
		return 0, false
	}
	held, err := parseHeld("PATHLOCK.LOCKS", reply)
	if err != nil || len(held) == 0 {
		return 0, false
	}
	return held[0].Fence, true
}

// busy is the error of a refused request: a [*BusyError] with the live locks that refused it,
// as PATHLOCK.CHECK reports them. When the CHECK fails, the BusyError says so (CheckErr), since
// no blockers would read as "nothing holds these paths"; but a key now of another type is a
// [*WrongTypeError], and the end of the caller's context is that context's cause, as for any
// other call.
func (l *Locks) busy(ctx context.Context, token string, requests []Request) error {
	blockers, err := l.check(ctx, requests, token)
	switch {
	case err == nil:
		return &BusyError{Key: l.key, Requests: requests, Blockers: blockers}
	case errors.As(err, new(*WrongTypeError)):
		return err
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return context.Cause(ctx)
	}
	return &BusyError{Key: l.key, Requests: requests, CheckErr: err}
}

func acquireArgs(key string, a ask, wait time.Duration) []any {
	args := make([]any, 0, 10+2*len(a.requests))
	args = append(args, "PATHLOCK.ACQUIRE", key, "TOKEN", a.token, "TTL", millis(a.s.ttl))
	if ms := millis(wait); ms > 0 {
		args = append(args, "WAIT", ms)
	}
	if a.s.note != nil && *a.s.note != "" {
		args = append(args, "NOTE", *a.s.note)
	}
	for _, r := range a.requests {
		args = append(args, string(r.Mode), r.Path)
	}
	return args
}

// pinned is one connection of the blocking pool, held for the commands of one blocking call.
type pinned struct {
	pool *blockingPool
	conn *redis.Conn
	node *redis.Client
	// id is the connection's CLIENT ID, known when the caller's context can be cancelled: a
	// CLIENT UNBLOCK then takes a waiting request off the queue (go-redis does not interrupt a
	// read when a context is cancelled, only when its deadline passes).
	id int64
	// own is set instead of id for a user who may not run CLIENT ID or CLIENT UNBLOCK: conn is
	// then the connection of its own that a cancellation closes (unblock.go).
	own *ownConn
}

// pin takes a connection of the blocking pool to the key's server (or addr's, after a
// redirection), with a read timeout that covers the call's waits.
func (l *Locks) pin(ctx context.Context, addr string, s settings) (*pinned, error) {
	pool := takePool(l.client)
	node, err := pool.node(ctx, l.key, addr)
	if err != nil {
		pool.put()
		return nil, err
	}
	timeout := pool.grace + s.wait + time.Millisecond
	if s.replicas > 0 {
		timeout += s.replicasTimeout
	}
	p := &pinned{pool: pool, conn: node.WithTimeout(timeout).Conn(), node: node}
	if ctx.Done() == nil || s.wait <= 0 {
		return p, nil
	}
	if !pool.noUnblock.Load() {
		p.id, err = p.conn.ClientID(ctx).Result()
		if err == nil {
			return p, nil
		}
		if !redis.HasErrorPrefix(err, noPermission) {
			p.close()
			return nil, err
		}
		pool.noUnblock.Store(true)
	}
	// The user may not unblock: the wait runs on a connection of its own (unblock.go).
	_ = p.conn.Close()
	p.own = dialOwn(node)
	p.conn = p.own.client.WithTimeout(timeout).Conn()
	return p, nil
}

// do sends a command on the pinned connection (after ASKING, for an ASK redirection), and
// unblocks it if ctx is cancelled meanwhile.
func (p *pinned) do(ctx context.Context, asking bool, args []any) (any, error) {
	if asking {
		if err := p.conn.Do(ctx, "ASKING").Err(); err != nil {
			return nil, err
		}
	}
	if p.own != nil {
		stop := context.AfterFunc(ctx, p.own.cut)
		defer stop()
	}
	if p.id != 0 {
		unblocked := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			defer close(unblocked)
			unblock, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			err := p.node.Do(unblock, "CLIENT", "UNBLOCK", p.id).Err()
			if redis.HasErrorPrefix(err, noPermission) {
				// Given CLIENT ID but not CLIENT UNBLOCK: this wait runs to its end, the
				// next ones on connections of their own.
				p.pool.noUnblock.Store(true)
			}
		})
		defer func() {
			// An UNBLOCK on its way must land before the connection goes back to the pool,
			// where it could end another call's wait.
			if !stop() {
				<-unblocked
			}
		}()
	}
	return p.conn.Do(ctx, args...).Result()
}

func (p *pinned) close() {
	_ = p.conn.Close()
	if p.own != nil {
		_ = p.own.client.Close()
	}
	p.pool.put()
}

// newToken is a random UUID v4 in its canonical form, which the module stores compactly.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
