//go:build linux

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
	"syscall"
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
	// Killed with the benchmark, should it be stopped before its cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
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
	// The three take turns operation by operation (each iteration runs one lock plus release of
	// each, starting with a different one each time), and each operation is timed alone: the
	// medians of interleaved samples hold on a busy machine, where a burst of other work falls
	// on all three alike, better than three timed runs one after the other.
	table := "\n| locks held | pathlock | redsync | bsm/redislock | redsync / pathlock | redislock / pathlock |\n|---:|---:|---:|---:|---:|---:|\n"
	for _, n := range []int{0, held} {
		fill(b, rdb, n)
		var medians map[string]time.Duration
		b.Run(fmt.Sprintf("held=%d", n), func(b *testing.B) {
			samples := map[string][]time.Duration{}
			for i := range b.N {
				for k := range contenders {
					c := contenders[(i+k)%len(contenders)]
					start := time.Now()
					if err := c.once(); err != nil {
						b.Fatal(err)
					}
					samples[c.name] = append(samples[c.name], time.Since(start))
				}
			}
			medians = map[string]time.Duration{}
			for _, c := range contenders {
				xs := samples[c.name]
				sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
				medians[c.name] = xs[len(xs)/2]
				b.ReportMetric(float64(medians[c.name])/1e3, c.name+"-us")
			}
		})
		table += fmt.Sprintf("| %d | %.0f us | %.0f us | %.0f us | %.2f | %.2f |\n", n,
			float64(medians["pathlock"])/1e3, float64(medians["redsync"])/1e3, float64(medians["redislock"])/1e3,
			float64(medians["redsync"])/float64(medians["pathlock"]), float64(medians["redislock"])/float64(medians["pathlock"]))
	}
	// Printed rather than logged: a parent benchmark's log is not shown when its children pass.
	fmt.Printf("lock plus release, median of each one's operations, timed in turns:\n%s", table)
}
