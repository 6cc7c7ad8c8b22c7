// Package bench compares lock plus release of one path through the pathlock Go client with
// redsync and bsm/redislock, each on go-redis against one redis-server started here, with 0
// and 100,000 other locks held: in the same project for pathlock, as other keys for the others.
// It is a module of its own, so that the client's go.mod needs go-redis only. Run it with
// `make bench-go`; docs/performance.md quotes a run.
package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/pathlock/pathlock/clients/go"
)

// held is how many other locks are held in the second half of each benchmark.
const held = 100_000

// startServer starts a redis-server (REDIS_SERVER) with the module (PATHLOCK_MODULE) on a free
// loopback port, stopped when the benchmark ends.
func startServer(b *testing.B) *redis.Client {
	b.Helper()
	module := os.Getenv("PATHLOCK_MODULE")
	if module == "" {
		module = filepath.Join("..", "..", "..", "target", "release", "libpathlock.so")
	}
	module, _ = filepath.Abs(module)
	binary := os.Getenv("REDIS_SERVER")
	if binary == "" {
		binary = "redis-server"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(binary, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", b.TempDir(), "--loadmodule", module)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	b.Cleanup(func() { _ = rdb.Close() })
	for i := 0; rdb.Ping(context.Background()).Err() != nil; i++ {
		if i > 500 {
			b.Fatal("the server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return rdb
}

// fill holds n locks: leases of their own in the project for pathlock, keys for the others.
func fill(b *testing.B, rdb *redis.Client, n int) {
	b.Helper()
	ctx := context.Background()
	for start := 0; start < n; start += 1000 {
		pipe := rdb.Pipeline()
		for i := start; i < min(start+1000, n); i++ {
			pipe.Do(ctx, "PATHLOCK.ACQUIRE", "proj:bench", "TTL", 3_600_000, "WRITE", fmt.Sprintf("/held/%d/f", i))
			pipe.Set(ctx, fmt.Sprintf("lock:held:%d", i), "token", time.Hour)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if n > 0 {
		if got, _ := rdb.DBSize(ctx).Result(); got != int64(n)+1 {
			b.Fatalf("%d keys, want %d", got, n+1)
		}
	}
}

func BenchmarkLockRelease(b *testing.B) {
	rdb := startServer(b)
	ctx := context.Background()
	locks, err := pathlock.New(rdb, "proj:bench")
	if err != nil {
		b.Fatal(err)
	}
	rs := redsync.New(goredis.NewPool(rdb))
	locker := redislock.New(rdb)
	contenders := []struct {
		name string
		once func() error
	}{
		{"pathlock", func() error {
			lease, err := locks.Upload(ctx, "/bench/f")
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}},
		{"redsync", func() error {
			mutex := rs.NewMutex("lock:bench", redsync.WithExpiry(30*time.Second), redsync.WithTries(1))
			if err := mutex.LockContext(ctx); err != nil {
				return err
			}
			if ok, err := mutex.UnlockContext(ctx); !ok || err != nil {
				return fmt.Errorf("unlock: %v %v", ok, err)
			}
			return nil
		}},
		{"redislock", func() error {
			lock, err := locker.Obtain(ctx, "lock:bench", 30*time.Second, nil)
			if err != nil {
				return err
			}
			return lock.Release(ctx)
		}},
	}
	// perOp[held][round][name] is the time per lock plus release of the round's last run (the
	// framework runs each with growing counts; the last is the one it reports).
	perOp := map[int][]map[string]time.Duration{}
	for _, n := range []int{0, held} {
		fill(b, rdb, n)
		// The three take turns, rounds times, so that a busy moment of the machine falls on
		// each alike; go test names the repeats #01, #02, ...
		for round := range rounds {
			perOp[n] = append(perOp[n], map[string]time.Duration{})
			for _, c := range contenders {
				b.Run(fmt.Sprintf("held=%d/%s", n, c.name), func(b *testing.B) {
					for range b.N {
						if err := c.once(); err != nil {
							b.Fatal(err)
						}
					}
					perOp[n][round][c.name] = b.Elapsed() / time.Duration(b.N)
				})
			}
		}
	}
	// The medians, and the median of each round's ratio: a ratio measured side by side holds
	// better on a busy machine than the times themselves.
	table := "\n| locks held | pathlock | redsync | bsm/redislock | redsync / pathlock | redislock / pathlock |\n|---:|---:|---:|---:|---:|---:|\n"
	for _, n := range []int{0, held} {
		med := func(f func(r map[string]time.Duration) float64) float64 {
			var xs []float64
			for _, r := range perOp[n] {
				xs = append(xs, f(r))
			}
			sort.Float64s(xs)
			return xs[len(xs)/2]
		}
		us := func(name string) float64 {
			return med(func(r map[string]time.Duration) float64 { return float64(r[name]) / 1e3 })
		}
		ratio := func(name string) float64 {
			return med(func(r map[string]time.Duration) float64 { return float64(r[name]) / float64(r["pathlock"]) })
		}
		table += fmt.Sprintf("| %d | %.0f us | %.0f us | %.0f us | %.2f | %.2f |\n", n,
			us("pathlock"), us("redsync"), us("redislock"), ratio("redsync"), ratio("redislock"))
	}
	// Printed rather than logged: a parent benchmark's log is not shown when its children pass.
	fmt.Printf("lock plus release, medians of %d interleaved rounds:\n%s", rounds, table)
}

// rounds is how many times each contender runs at each number of locks held.
const rounds = 7
