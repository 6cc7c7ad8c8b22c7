package pathlock

// The failover client of redis.NewFailoverClient: a master, its replica and a sentinel. The
// blocking pool is made from the client's options, whose dialer asks the sentinel for the
// master, so after a failover its calls reach the new master too.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinel starts a sentinel watching master as "mymaster", and answers its address.
func sentinel(t testing.TB, master *server) string {
	t.Helper()
	port, err := freePort(false)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile sentinel.log\n"+
		"sentinel monitor mymaster 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n",
		port, dir, master.port)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(serverBinary(), conf, "--sentinel")
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer s.Close()
	waitUntil(t, 10*time.Second, "the sentinel to see the replica", func() bool {
		replicas, err := s.Replicas(bg, "mymaster").Result()
		return err == nil && len(replicas) == 1
	})
	return addr
}

func masterAddr(t testing.TB, sentinelAddr string) string {
	s := redis.NewSentinelClient(&redis.Options{Addr: sentinelAddr})
	defer s.Close()
	addr, err := s.GetMasterAddrByName(bg, "mymaster").Result()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(addr, ":")
}

func TestAFailoverClientWaitsAndCountsReplicasOnTheMasterTheSentinelsName(t *testing.T) {
	t.Parallel()
	master := ownServer(t)
	replica := replicaOf(t, master)
	sentinelAddr := sentinel(t, master)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinelAddr}})
	defer rdb.Close()
	key := testKey(t)
	locks := mustNew(t, rdb, key, WithTTL(3*time.Second))

	// Before the failover: a wait and a replicated grant, through both pools.
	holder, err := locks.Delete(bg, "/A")
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(200*time.Millisecond, func() { _ = holder.Release(bg) })
	lease, err := locks.Upload(bg, "/A/f", WithWait(5*time.Second), WithReplicas(1))
	if err != nil {
		t.Fatal(err)
	}
	rc := replica.client()
	defer rc.Close()
	if got, want := held(t, rc, key), lockLines(lease.Token(), Request{Write, "/A/f"}); !sameLines(got, want) {
		t.Fatalf("the replica holds %v, want %v", got, want)
	}

	// The sentinel promotes the replica; the lease, replicated, is renewed on the new master.
	s := redis.NewSentinelClient(&redis.Options{Addr: sentinelAddr})
	defer s.Close()
	if err := s.Failover(bg, "mymaster").Err(); err != nil {
		t.Fatal(err)
	}
	failedOver := time.Now()
	waitUntil(t, 20*time.Second, "the replica to be promoted", func() bool {
		return masterAddr(t, sentinelAddr) == replica.addr()
	})
	t.Logf("promoted after %v", time.Since(failedOver))
	// A waiting acquire reaches the new master. Its first request goes through the failover
	// client's own pool, which closes its connections to the old master (still taking writes
	// until the sentinels demote it) only when it hears of the switch: a grant made there
	// before that is released and asked again, as any command's would be. The path is busy on
	// the new master, so the call then waits on the blocking pool, whose connections are each
	// dialled anew through the sentinel: a connection kept idle there would reach the old
	// master, be granted at once, and fail its confirming renewal on the new one, every time.
	// (A replicated grant waits for the sentinel to make the old master a replica, which took
	// it 16 s in a trial run; the grant before the failover counted the replicas.)
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	onNewMaster := func(l *Lease) bool {
		return strings.Contains(strings.Join(held(t, rc, key), ","), lockLines(l.Token(), Request{Write, "/B/f"})[0])
	}
	errOldMaster := errors.New("granted on the old master")
	var next *Lease
	for {
		blocker, err := mustNew(t, rc, key).Delete(bg, "/B")
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(200*time.Millisecond, func() { _ = blocker.Release(bg) })
		next, err = locks.Upload(ctx, "/B/f", WithWait(5*time.Second))
		_ = blocker.Release(bg)
		if err == nil && onNewMaster(next) {
			break
		}
		if err == nil {
			err = errOldMaster
			_ = next.Release(bg)
		}
		if ctx.Err() != nil || !(transient(err) || errors.Is(err, ErrBusy) || errors.Is(err, ErrLeaseLost) || err == errOldMaster) {
			t.Fatal(err)
		}
		t.Logf("%v: %v", time.Since(failedOver), err)
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("a waiting grant on the new master after %v", time.Since(failedOver))
	if err := lease.Err(); err != nil {
		t.Fatalf("the replicated lease was lost in the failover: %v", err)
	}
	_ = next.Release(bg)
	_ = lease.Release(bg)
}
