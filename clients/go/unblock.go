package pathlock

import (
	"context"
	"net"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Cancelling a waiting acquire without CLIENT UNBLOCK.
//
// go-redis does not interrupt a read when a context is cancelled (only when its deadline
// passes), so a cancelled wait is ended on the server: CLIENT UNBLOCK with the pinned
// connection's CLIENT ID (acquire.go). An ACL user given only the lock commands, as the recipe
// of docs/operations.md is, may run neither: CLIENT ID answers NOPERM, and so would CLIENT
// UNBLOCK. Such a wait runs instead on a connection of its own, dialed for it, whose socket is
// closed when the context is cancelled: the server drops the request of a connection that
// closes, and the read fails at once (a grant that was made just before is released, as after
// any lost reply). Dialing costs a round trip or two per waiting call, which only these users
// pay; the pool remembers the refusal so that it is not asked for again.

// noPermission is the server's answer to a command the ACL user may not run.
const noPermission = "NOPERM"

// ownConn is the connection of its own of one blocking call, and its socket.
type ownConn struct {
	client *redis.Client
	mu     sync.Mutex
	socket net.Conn
	closed bool
}

// dialOwn makes a client of one connection to node's server, with node's options, that keeps
// the socket it dials.
func dialOwn(node *redis.Client) *ownConn {
	own := &ownConn{}
	opt := *node.Options()
	opt.PoolSize, opt.MinIdleConns, opt.MaxIdleConns, opt.MaxActiveConns = 1, 0, 0, 1
	// As in newPool: a push processor and maintenance settings of its own.
	opt.PushNotificationProcessor = nil
	if opt.MaintNotificationsConfig != nil {
		config := *opt.MaintNotificationsConfig
		opt.MaintNotificationsConfig = &config
	}
	dial := opt.Dialer
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		socket, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		own.mu.Lock()
		defer own.mu.Unlock()
		if own.closed {
			// Cancelled while it dialed: the request is never sent.
			_ = socket.Close()
			return nil, net.ErrClosed
		}
		own.socket = socket
		return socket, nil
	}
	own.client = redis.NewClient(&opt)
	return own
}

// cut closes the socket under go-redis, which ends a read that waits on it.
func (o *ownConn) cut() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	if o.socket != nil {
		_ = o.socket.Close()
	}
}
