package pathlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Where the commands go.
//
// Short commands (an ACQUIRE without WAIT, RENEW, RELEASE, CHECK, LOCKS, WAITERS) go through
// the application's client with Do: its pool hands each command a connection of its own, so a
// renewal never waits behind another command on a connection, and a ClusterClient routes each
// by its key (go-redis takes the first argument after the command name as the key of a command
// it does not know, and COMMAND INFO's first key, which is also 1, once it has read it).
//
// A call that blocks on the server (ACQUIRE ... WAIT, and WAIT for replicas) holds its
// connection for as long as it waits. On the application's pool, enough waiters would take
// every connection, and renewals would then queue for one until the pool's timeout: leases
// would be lost to somebody's wait. So blocking calls run on a pool of their own, a second
// go-redis client made from the application client's options (the same addresses, credentials,
// TLS and dialer, and so the same failover master), one per application client, shared by
// every handle made from it. However many wait, the application's pool is left to the
// renewals. Each blocking call pins one connection of that pool (Conn), with a read timeout
// that covers its wait, and sends WAIT on the connection that made the grant, since WAIT
// counts that connection's writes.
//
// A waiting acquire comes here only once the application's client has refused it without a
// wait (acquire.go): most are granted at once and pin nothing, and a client the application
// has closed answers that first request with redis.ErrClosed, where this pool, a client of our
// own, would not know it was closed. A grant made here is confirmed through the application's
// client before it is handed out, for a client closed during the wait.
//
// go-redis tells nobody when the application closes its client, so a blocking pool is closed,
// and dropped from the registry, once nothing has used it for poolIdleTime: otherwise every
// client an application made and closed (one per tenant, or per test) would leave its blocking
// pool's idle connections open on the server, its goroutines running, and itself reachable. The
// next blocking call on a client still in use makes a new pool.

// blockingPool is the pool of blocking calls made from one application client.
type blockingPool struct {
	single  *redis.Client        // for a Client (or a failover Client)
	cluster *redis.ClusterClient // for a ClusterClient
	// grace is added to a blocking call's own length for its read timeout: the application's
	// read timeout, which is what it allows any command beyond its work on the server.
	grace time.Duration
	// noUnblock is set once the server refused CLIENT ID or CLIENT UNBLOCK to the client's
	// user (unblock.go).
	noUnblock atomic.Bool

	// The registry's bookkeeping, under poolsMu: the application client it was made from (its
	// key in pools), how many calls use it now, when the last one gave it back, and the timer
	// that retires it (one per pool, set again by every call that leaves it unused).
	client   redis.UniversalClient
	users    int
	lastUsed time.Time
	idle     *time.Timer
}

// failoverAddr is the Addr go-redis gives the options of a failover client
// (redis.NewFailoverClient), whose dialer asks the sentinels for the master.
const failoverAddr = "FailoverClient"

// At most this many connections of a blocking pool stay open while idle, as in the other
// clients; more are closed when they come back.
const maxIdleBlocking = 4

var (
	poolsMu sync.Mutex
	pools   = map[redis.UniversalClient]*blockingPool{}
	// poolIdleTime is how long a blocking pool may go unused before it is closed (a variable
	// for the tests, read and set under poolsMu).
	poolIdleTime = time.Minute
)

// checkClient refuses a client whose commands cannot be routed to one project key's server. A
// nil *redis.Client or *redis.ClusterClient in the interface (a client variable declared and
// never set) is refused as a nil interface is: it is not nil to a comparison with nil, and would
// otherwise pass here and panic at the first command.
func checkClient(client redis.UniversalClient) error {
	switch c := client.(type) {
	case *redis.Client:
		if c == nil {
			return invalid("the client is nil (a *redis.Client never set)")
		}
		return nil
	case *redis.ClusterClient:
		if c == nil {
			return invalid("the client is nil (a *redis.ClusterClient never set)")
		}
		return nil
	case nil:
		return invalid("the client is nil")
	}
	return invalid("a %T is not supported: give a *redis.Client (standalone or failover) or a *redis.ClusterClient", client)
}

// takePool answers the blocking pool of an application client, made on first use, for one
// call, which gives it back with put.
func takePool(client redis.UniversalClient) *blockingPool {
	poolsMu.Lock()
	defer poolsMu.Unlock()
	pool, ok := pools[client]
	if !ok {
		pool = newPool(client)
		pools[client] = pool
	}
	pool.users++
	return pool
}

// put gives back a pool taken by takePool; the last user starts its idle period.
func (p *blockingPool) put() {
	poolsMu.Lock()
	defer poolsMu.Unlock()
	p.users--
	p.lastUsed = time.Now()
	if p.users > 0 {
		return
	}
	if p.idle == nil {
		p.idle = time.AfterFunc(poolIdleTime, p.retire)
	} else {
		p.idle.Reset(poolIdleTime)
	}
}

// retire closes the pool and drops it from the registry if nobody has used it for its idle
// time. A timer that finds it in use, or used since, does nothing: the call that leaves it
// unused sets the timer again.
func (p *blockingPool) retire() {
	poolsMu.Lock()
	if p.users > 0 || time.Since(p.lastUsed) < poolIdleTime || pools[p.client] != p {
		poolsMu.Unlock()
		return
	}
	delete(pools, p.client)
	poolsMu.Unlock()
	if p.single != nil {
		_ = p.single.Close()
	} else {
		_ = p.cluster.Close()
	}
}

// newPool makes the blocking pool of an application client (poolsMu held).
func newPool(client redis.UniversalClient) *blockingPool {
	pool := &blockingPool{client: client}
	switch c := client.(type) {
	case *redis.Client:
		opt := *c.Options()
		pool.grace = max(opt.ReadTimeout, time.Second)
		tune(&opt.PoolSize, &opt.MinIdleConns, &opt.MaxIdleConns, &opt.MaxActiveConns)
		// What go-redis keeps per client stays the application's: a push processor of our own
		// (go-redis registers its handlers on it, and refuses to register them twice), and a
		// copy of the maintenance settings (go-redis writes their mode back after a handshake).
		opt.PushNotificationProcessor = nil
		if opt.MaintNotificationsConfig != nil {
			config := *opt.MaintNotificationsConfig
			opt.MaintNotificationsConfig = &config
		}
		// The caller's deadline bounds a wait; there are no retries but the client's own, which
		// keep the token and the wait's budget.
		opt.ContextTimeoutEnabled = true
		opt.MaxRetries = -1
		if opt.Addr == failoverAddr {
			// The failover client drops its connections to a master the sentinels replaced; a
			// copy of its options does not get that signal, and a connection kept idle here
			// would still reach the old master, which takes writes until the sentinels demote
			// it. So each blocking call dials anew (a connection idle for a nanosecond is stale
			// to go-redis), through the dialer that asks for the current master.
			opt.ConnMaxIdleTime = time.Nanosecond
		}
		pool.single = redis.NewClient(&opt)
	case *redis.ClusterClient:
		opt := *c.Options()
		pool.grace = max(opt.ReadTimeout, time.Second)
		tune(&opt.PoolSize, &opt.MinIdleConns, &opt.MaxIdleConns, &opt.MaxActiveConns)
		opt.PushNotificationProcessor = nil
		if opt.MaintNotificationsConfig != nil {
			config := *opt.MaintNotificationsConfig
			opt.MaintNotificationsConfig = &config
		}
		opt.ContextTimeoutEnabled = true
		opt.MaxRetries = -1
		pool.cluster = redis.NewClusterClient(&opt)
	}
	return pool
}

// tune sizes a blocking pool: as many connections as the application's pool may have (at least
// go-redis's default), none opened ahead, a few kept idle.
func tune(size, minIdle, maxIdle, maxActive *int) {
	*size = max(*size, 10*runtime.GOMAXPROCS(0))
	*minIdle = 0
	*maxIdle = maxIdleBlocking
	*maxActive = 0
}

// node answers the client of the server that holds key: the pool's own client, or in a cluster
// the master of the key's slot (or the node at addr, after a redirection).
func (p *blockingPool) node(ctx context.Context, key, addr string) (*redis.Client, error) {
	if p.single != nil {
		return p.single, nil
	}
	if addr == "" {
		return p.cluster.MasterForKey(ctx, key)
	}
	var found *redis.Client
	var mu sync.Mutex
	err := p.cluster.ForEachMaster(ctx, func(_ context.Context, node *redis.Client) error {
		if node.Options().Addr == addr {
			mu.Lock()
			found = node
			mu.Unlock()
		}
		return nil
	})
	if err == nil && found == nil {
		err = fmt.Errorf("pathlock: no master at %s in the cluster's slot map", addr)
	}
	return found, err
}

// redirection reads a cluster's MOVED or ASK answer: where to go, and whether it is an ASK.
func redirection(err error) (addr string, ask bool, ok bool) {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return "", false, false
	}
	fields := strings.Fields(rerr.Error())
	if len(fields) != 3 || (fields[0] != "MOVED" && fields[0] != "ASK") {
		return "", false, false
	}
	return fields[2], fields[0] == "ASK", true
}

// transient is true for an error after which the command may or may not have run, or will run
// if sent again: the connection failed, or the server or cluster is briefly unable to serve. A
// command is retried after these and only these; any other error is the server's answer, the
// caller's context, or a closed client.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.Nil) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		for _, prefix := range []string{"LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "UNBLOCKED"} {
			if redis.HasErrorPrefix(err, prefix) {
				return true
			}
		}
		return false
	}
	var nerr net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.As(err, &nerr)
}

// wrongType is true for the server's WRONGTYPE: the key holds another type of value.
func wrongType(err error) bool {
	return redis.HasErrorPrefix(err, "WRONGTYPE")
}

// refusedArguments are the module's replies to an argument beyond one of its limits
// (pathlock.max-ttl, max-path-bytes, max-depth, max-paths-per-call, max-note-bytes), which the
// client cannot check before sending, as the server's configuration sets them
// (docs/commands.md, Errors). A path too long or too deep is often a user's, so it must be told
// from a server in trouble.
var refusedArguments = []string{
	"ERR invalid TTL", "ERR invalid WAIT", "ERR too many paths", "ERR NOTE too long",
	"ERR path too long", "ERR path too deep", "ERR invalid path",
}

// about turns the server's WRONGTYPE about key into a [*WrongTypeError], and its refusal of an
// argument into an error that errors.Is [ErrInvalid] and still unwraps to the server's error;
// other errors are answered as they are.
func about(key string, err error) error {
	if wrongType(err) {
		return &WrongTypeError{Key: key, Err: err}
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		for _, prefix := range refusedArguments {
			if strings.HasPrefix(rerr.Error(), prefix) {
				return fmt.Errorf("%w: the server refused a request on \"%s\": %w", ErrInvalid, escapeKey(key), err)
			}
		}
	}
	return err
}
