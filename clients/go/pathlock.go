// Package pathlock is the Go client of pathlock, a Redis and Valkey module of hierarchical path
// locks, on go-redis v9.
//
// A [Locks] handle binds the application's go-redis client (a *redis.Client, standalone or
// failover, or a *redis.ClusterClient) to one project key. Each cloud-drive operation (Upload,
// Read, Rename, Move, Copy, Delete, Purge, or Lock for anything else) asks for exactly its locks
// in one all-or-nothing PATHLOCK.ACQUIRE and returns a [*Lease], which a watchdog renews every
// third of its TTL until it is released. A lost lease is reported at once, through its context,
// its Lost channel and its Err.
//
//	locks, err := pathlock.New(rdb, "proj:42")
//	if err != nil {
//		return err
//	}
//	lease, err := locks.Move(ctx, "/A/C", "/B") // WRITE /A/C, WRITE /B/C
//	var busy *pathlock.BusyError
//	if errors.As(err, &busy) {
//		// busy.Blockers: who holds what, and why (their notes)
//	}
//	if err != nil {
//		return err
//	}
//	defer lease.Release(ctx)
//	return moveFolder(lease.Context(), "/A/C", "/B/C", lease.Fence())
//
// The clients of every language follow one contract, docs/clients.md in the project; this
// package's README says where Go differs.
package pathlock

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Locks is a handle: the application's client bound to one project key, with the defaults of
// every lease it takes. Making one costs nothing (no connection is opened), and it is safe for
// use by several goroutines.
type Locks struct {
	client redis.UniversalClient
	key    string
	s      settings
}

// New makes a handle for the project key on client, a *redis.Client (standalone, or the failover
// client of redis.NewFailoverClient) or a *redis.ClusterClient. The options set the defaults of
// every lease it takes: [WithTTL] (30 s), [WithWait] (0), [WithReplicas] (0),
// [WithReplicasTimeout] (1 s), [WithNote] (none: each operation's own). It fails with
// [ErrInvalid] for another kind of client, an empty key, or an option that cannot be right.
func New(client redis.UniversalClient, key string, options ...Option) (*Locks, error) {
	if err := checkClient(client); err != nil {
		return nil, err
	}
	if key == "" {
		// Redis takes "" as a key like any other, so an unset variable would put every project's
		// locks in one: the same mistake the helpers refuse in an empty path.
		return nil, invalid(`the project key is empty: name the project's key ("proj:42")`)
	}
	s, err := defaults().with(options)
	if err != nil {
		return nil, err
	}
	return &Locks{client: client, key: key, s: s}, nil
}

// Key is the project key.
func (l *Locks) Key() string { return l.key }

// acquire takes a new lease on requests: the call's options over the handle's, the note the
// call's, else the handle's, else the operation's own (name).
func (l *Locks) acquire(ctx context.Context, requests []Request, name string, options []Option) (*Lease, error) {
	s, err := l.s.with(options)
	if err != nil {
		return nil, err
	}
	if s.note == nil {
		note := defaultNote(name)
		s.note = &note
	}
	// The client makes the token, so that a retry after a lost reply is the same owner.
	token := newToken()
	g, err := l.grant(ctx, ask{token: token, requests: requests, s: s, fresh: true})
	if err != nil {
		return nil, err
	}
	return startLease(ctx, l, token, g, requests, s), nil
}

// The operations. Each asks for its locks in one PATHLOCK.ACQUIRE, all or nothing, and takes
// the options of one call ([WithTTL], [WithWait], [WithReplicas], [WithReplicasTimeout],
// [WithNote]) over the handle's. They refuse an empty path and the project root ("", "/"),
// which would lock the whole project: ask for that with Lock and "/". They fail with a
// [*BusyError] when the locks are busy, and the lease they return belongs to ctx: it is
// released when ctx ends (see [Lease]).

// Upload locks WRITE path: a file being uploaded (created or replaced).
func (l *Locks) Upload(ctx context.Context, path string, options ...Option) (*Lease, error) {
	return l.one(ctx, Write, "upload", path, options)
}

// Create locks WRITE path: a new file or folder.
func (l *Locks) Create(ctx context.Context, path string, options ...Option) (*Lease, error) {
	return l.one(ctx, Write, "create", path, options)
}

// Read locks READ path: a file being read or downloaded, or a folder listed, which nobody may
// change meanwhile; other readers are welcome.
func (l *Locks) Read(ctx context.Context, path string, options ...Option) (*Lease, error) {
	return l.one(ctx, Read, "read", path, options)
}

// Delete locks WRITE path: a file or folder being deleted.
func (l *Locks) Delete(ctx context.Context, path string, options ...Option) (*Lease, error) {
	return l.one(ctx, Write, "delete", path, options)
}

func (l *Locks) one(ctx context.Context, mode Mode, operation, path string, options []Option) (*Lease, error) {
	if _, err := named("path", path); err != nil {
		return nil, err
	}
	return l.acquire(ctx, []Request{{mode, path}}, operation+" "+path, options)
}

// Rename locks WRITE path and WRITE its new name in the same folder: Rename(ctx, "/A/C", "C2")
// locks /A/C and /A/C2. newName is one segment; a name with "/", empty, ".", ".." or the current
// name is refused ([Locks.Move] changes folders).
func (l *Locks) Rename(ctx context.Context, path, newName string, options ...Option) (*Lease, error) {
	target, err := renamed(path, newName)
	if err != nil {
		return nil, err
	}
	return l.acquire(ctx, []Request{{Write, path}, {Write, target}}, "rename "+path+" -> "+target, options)
}

// Move locks WRITE path and WRITE intoFolder/<last segment of path>: Move(ctx, "/A/C", "/B")
// locks /A/C and /B/C. A move into the path itself or under it, or into its own folder, is
// refused before anything is sent.
func (l *Locks) Move(ctx context.Context, path, intoFolder string, options ...Option) (*Lease, error) {
	target, err := into("move", path, intoFolder)
	if err != nil {
		return nil, err
	}
	return l.acquire(ctx, []Request{{Write, path}, {Write, target}}, "move "+path+" -> "+intoFolder, options)
}

// Copy locks READ path and WRITE intoFolder/<last segment of path>: Copy(ctx, "/A/a.txt", "/B")
// locks /A/a.txt for reading and /B/a.txt for writing. The same copies are refused as by Move.
func (l *Locks) Copy(ctx context.Context, path, intoFolder string, options ...Option) (*Lease, error) {
	target, err := into("copy", path, intoFolder)
	if err != nil {
		return nil, err
	}
	return l.acquire(ctx, []Request{{Read, path}, {Write, target}}, "copy "+path+" -> "+intoFolder, options)
}

// Purge locks WRITE on each path: emptying the recycle bin.
func (l *Locks) Purge(ctx context.Context, paths []string, options ...Option) (*Lease, error) {
	if len(paths) == 0 {
		return nil, invalid("purge needs at least one path")
	}
	requests := make([]Request, len(paths))
	for i, path := range paths {
		if _, err := named("path", path); err != nil {
			return nil, err
		}
		requests[i] = Request{Write, path}
	}
	return l.acquire(ctx, requests, "purge "+strings.Join(paths, " "), options)
}

// Lock takes any requests ([Read] or [Write] on a path) in one grant; "/" is the whole project.
// Its default note names them: "lock READ /X, WRITE /X/y".
func (l *Locks) Lock(ctx context.Context, requests []Request, options ...Option) (*Lease, error) {
	requests, err := checked(requests)
	if err != nil {
		return nil, err
	}
	return l.acquire(ctx, requests, described(requests), options)
}

// Inspecting.

// Check answers the live locks that would block requests now (PATHLOCK.CHECK): none when they
// would be granted, waiters aside. With a token, that owner's own locks do not count.
func (l *Locks) Check(ctx context.Context, requests []Request, token string) ([]HeldLock, error) {
	requests, err := checked(requests)
	if err != nil {
		return nil, err
	}
	return l.check(ctx, requests, token)
}

func (l *Locks) check(ctx context.Context, requests []Request, token string) ([]HeldLock, error) {
	args := make([]any, 0, 4+2*len(requests))
	args = append(args, "PATHLOCK.CHECK", l.key)
	if token != "" {
		args = append(args, "TOKEN", token)
	}
	for _, r := range requests {
		args = append(args, string(r.Mode), r.Path)
	}
	reply, err := l.client.Do(ctx, args...).Result()
	if err != nil {
		return nil, about(l.key, err)
	}
	return parseHeld("PATHLOCK.CHECK", reply)
}

// Locks answers the live locks at or under path ("" for the whole project), in path order;
// only token's when token is not "" (PATHLOCK.LOCKS).
func (l *Locks) Locks(ctx context.Context, path, token string) ([]HeldLock, error) {
	args := []any{"PATHLOCK.LOCKS", l.key}
	if path != "" {
		args = append(args, path)
	}
	if token != "" {
		args = append(args, "TOKEN", token)
	}
	reply, err := l.client.Do(ctx, args...).Result()
	if err != nil {
		return nil, about(l.key, err)
	}
	return parseHeld("PATHLOCK.LOCKS", reply)
}

// Waiters answers the waiting acquires for paths at or under path ("" for the whole project),
// in queue order (PATHLOCK.WAITERS).
func (l *Locks) Waiters(ctx context.Context, path string) ([]Waiter, error) {
	args := []any{"PATHLOCK.WAITERS", l.key}
	if path != "" {
		args = append(args, path)
	}
	reply, err := l.client.Do(ctx, args...).Result()
	if err != nil {
		return nil, about(l.key, err)
	}
	return parseWaiters(reply)
}

func (l *Locks) String() string {
	return fmt.Sprintf("pathlock.Locks(%q)", l.key)
}
