package pathlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pathlock/pathlock/clients/go"
)

// addr is the address of a Redis or Valkey server with the pathlock module loaded:
// "localhost:6379", say. The tests set it to a server they start.
var addr = "localhost:6379"

// storage stands for the application's own storage, which refuses a write whose fence is lower
// than the highest it has seen for that path.
type storage struct{}

func (storage) write(ctx context.Context, path string, fence int64) error { return ctx.Err() }

var store storage

// One client for the whole application; one handle per project key.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, err := pathlock.New(rdb, "proj:42", pathlock.WithTTL(time.Minute), pathlock.WithNote("alice"))
	if err != nil {
		panic(err)
	}
	fmt.Println(locks.Key())
	// Output: proj:42
}

func ExampleLocks_Upload() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:example-upload")

	lease, err := locks.Upload(ctx, "/D/report.pdf") // WRITE /D/report.pdf
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	err = store.write(lease.Context(), "/D/report.pdf", lease.Fence())
	fmt.Println(lease.Requests(), err)
	// Output: [WRITE /D/report.pdf] <nil>
}

func ExampleLocks_Read() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:example-read")

	// Readers share: two reads of one file are both granted; an upload waits for them.
	first, _ := locks.Read(ctx, "/D/report.pdf")
	second, err := locks.Read(ctx, "/D/report.pdf")
	fmt.Println(err)
	_, err = locks.Upload(ctx, "/D/report.pdf")
	fmt.Println(errors.Is(err, pathlock.ErrBusy))
	first.Release(ctx)
	second.Release(ctx)
	// Output:
	// <nil>
	// true
}

func ExampleLocks_Rename() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:example-rename")

	lease, err := locks.Rename(ctx, "/A/C", "C2") // a new name in the same folder
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	fmt.Println(lease.Requests())
	_, err = locks.Rename(ctx, "/A/C", "/B/C") // a name, not a path: Move changes folders
	fmt.Println(errors.Is(err, pathlock.ErrInvalid))
	// Output:
	// [WRITE /A/C WRITE /A/C2]
	// true
}

func ExampleLocks_Move() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:example-move")

	lease, err := locks.Move(ctx, "/A/C", "/B", pathlock.WithNote("alice: move /A/C into /B"))
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	fmt.Println(lease.Requests())
	// Nobody may upload into the folder being moved, and Busy says who holds it and why.
	_, err = locks.Upload(ctx, "/A/C/D/new.txt")
	var busy *pathlock.BusyError
	if errors.As(err, &busy) {
		fmt.Println(busy.Blockers[0].Path, "is locked:", busy.Blockers[0].Note)
	}
	// Output:
	// [WRITE /A/C WRITE /B/C]
	// /A/C is locked: alice: move /A/C into /B
}

func ExampleLocks_Copy() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:example-copy")

	lease, err := locks.Copy(ctx, "/A/a.txt", "/B")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	fmt.Println(lease.Requests())
	// Output: [READ /A/a.txt WRITE /B/a.txt]
}

func ExampleLocks_Delete() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:example-delete")

	// Willing to wait up to 5 s for whoever works inside /A.
	lease, err := locks.Delete(ctx, "/A", pathlock.WithWait(5*time.Second))
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	fmt.Println(lease.Requests(), lease.Note())
	// Output: [WRITE /A] delete /A
}

func ExampleLocks_Purge() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:example-purge")

	lease, err := locks.Purge(ctx, []string{"/bin/1", "/bin/2"})
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	fmt.Println(lease.Requests())
	// Output: [WRITE /bin/1 WRITE /bin/2]
}

func ExampleLocks_Lock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:example-lock")

	lease, err := locks.Lock(ctx, []pathlock.Request{{Mode: pathlock.Read, Path: "/S"}, {Mode: pathlock.Write, Path: "/S/x"}})
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	fmt.Println(lease.Note())
	// Output: lock READ /S, WRITE /S/x
}

func ExampleLocks_Locks() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:example-inspect")

	move, _ := locks.Move(ctx, "/A/C", "/B")
	defer move.Release(ctx)
	held, _ := locks.Locks(ctx, "/A", "") // at or under /A, anyone's
	for _, l := range held {
		fmt.Println(l.Mode, l.Path, l.Note)
	}
	blockers, _ := locks.Check(ctx, []pathlock.Request{{Mode: pathlock.Read, Path: "/B/C/x"}}, "")
	fmt.Println(len(blockers), "blocker")
	waiters, _ := locks.Waiters(ctx, "")
	fmt.Println(len(waiters), "waiters")
	// Output:
	// WRITE /A/C move /A/C -> /B
	// 1 blocker
	// 0 waiters
}

func ExampleLease_Lock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:example-nested")

	move, err := locks.Move(ctx, "/A/C", "/B")
	if err != nil {
		panic(err)
	}
	defer move.Release(ctx) // frees all three locks
	// Inside what the move holds: refused to everyone else, granted to the move itself.
	fence, err := move.Lock(ctx, []pathlock.Request{{Mode: pathlock.Write, Path: "/B/C/new.txt"}})
	fmt.Println(err, fence > move.Fence())
	// Output: <nil> true
}

func ExampleLease_Context() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:example-lost", pathlock.WithTTL(300*time.Millisecond))

	lease, err := locks.Upload(ctx, "/A/f")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	rdb.Del(ctx, "proj:example-lost") // someone deletes the project under the lease
	// The work under the lease is handed its context, which ends at once when the lease is lost.
	<-lease.Context().Done()
	fmt.Println(errors.Is(context.Cause(lease.Context()), pathlock.ErrLeaseLost), lease.IsLost())
	var lost *pathlock.LeaseLostError
	if errors.As(lease.Err(), &lost) {
		fmt.Println(lost.Reason)
	}
	// Output:
	// true true
	// gone
}

func ExampleLease_Release() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:example-release")

	lease, _ := locks.Upload(ctx, "/A/f")
	lease.Release(ctx)
	// After a release nothing waits forever: Lost() is closed and the context ends, with
	// ErrReleased as its cause; nothing was lost.
	<-lease.Lost()
	fmt.Println(lease.IsLost(), lease.Err(), context.Cause(lease.Context()))
	fmt.Println(lease.Release(ctx)) // twice is fine
	// Output:
	// false <nil> pathlock: lease released
	// <nil>
}
