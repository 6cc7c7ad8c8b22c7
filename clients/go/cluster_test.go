package pathlock

// A real Redis Cluster: each project key is routed to its shard, by go-redis for the short
// commands and by the client for the blocking ones.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func clusterKeys(t testing.TB) []string {
	keys := []string{}
	for _, suffix := range []string{"a", "b", "c", "d"} {
		keys = append(keys, testKey(t)+":"+suffix)
	}
	return keys
}

var movedRe = regexp.MustCompile(`errorstat_(MOVED|ASK):count=(\d+)`)

// redirections is how many MOVED and ASK answers the nodes have given.
func redirections(t testing.TB, nodes []*server) int {
	total := 0
	for _, n := range nodes {
		c := n.client()
		info, err := c.Info(bg, "errorstats").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range movedRe.FindAllStringSubmatch(info, -1) {
			count, _ := strconv.Atoi(m[2])
			total += count
		}
	}
	return total
}

func TestReplicasAndWaitsOnAClusterRunOnTheKeysMaster(t *testing.T) {
	t.Parallel()
	nodes := sharedCluster(t)
	cc := clusterClient(t, nodes)
	for _, key := range clusterKeys(t) {
		// The masters have no replica: WAIT on the key's master answers 0.
		_, err := mustNew(t, cc, key, WithReplicas(1), WithReplicasTimeout(100*time.Millisecond)).Upload(bg, "/A")
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("%s: %v", key, err)
		}
		if got := held(t, cc, key); len(got) != 0 {
			t.Fatalf("%s: left %v", key, got)
		}
		// A waiting acquire, on a pinned connection to the key's master.
		locks := mustNew(t, cc, key)
		holder, err := locks.Delete(bg, "/A")
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(200*time.Millisecond, func() { _ = holder.Release(bg) })
		waiter, err := locks.Upload(bg, "/A/f", WithWait(5*time.Second))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		_ = waiter.Release(bg)
	}
}

// go-redis sends a command it does not know to the node of its first argument (and, once it has
// read COMMAND INFO, of the first key it reports, which is the same): no node ever answers
// MOVED or ASK to the client's commands while the slots stay put.
func TestGoRedisRoutesTheModulesCommandsByTheirKey(t *testing.T) {
	nodes := sharedCluster(t)
	cc := clusterClient(t, nodes)
	before := redirections(t, nodes)
	for _, key := range clusterKeys(t) {
		locks := mustNew(t, cc, key, WithTTL(600*time.Millisecond))
		lease, err := locks.Move(bg, "/A/C", "/B")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // two renewals
		if _, err := locks.Check(bg, []Request{{Write, "/A"}}, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := locks.Waiters(bg, ""); err != nil {
			t.Fatal(err)
		}
		if err := lease.Err(); err != nil {
			t.Fatal(err)
		}
		_ = lease.Release(bg)
	}
	if after := redirections(t, nodes); after != before {
		t.Fatalf("the nodes answered %d MOVED or ASK", after-before)
	}
}

// A slot moved to another master while a lease is held there: go-redis follows the MOVED for
// the renewals, and a waiting acquire, whose pool still maps the slot to the old master,
// follows it to the new one.
func TestAWaitingAcquireFollowsItsSlotToAnotherMaster(t *testing.T) {
	t.Parallel()
	nodes, err := newCluster(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.close()
		}
	})
	cc := clusterClient(t, nodes)
	key := testKey(t)
	// Long enough for the migration's steps on a loaded machine: the holder must keep its locks
	// (renewed through go-redis's ASK and MOVED) until the waiter follows them.
	locks := mustNew(t, cc, key, WithTTL(3*time.Second))
	// The blocking pool has read the slot map once.
	first, err := locks.Upload(bg, "/warm", WithWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Release(bg)
	holder, err := locks.Delete(bg, "/A")
	if err != nil {
		t.Fatal(err)
	}
	migrateSlot(t, nodes, key)
	time.AfterFunc(500*time.Millisecond, func() { _ = holder.Release(bg) })
	waiter, err := locks.Upload(bg, "/A/f", WithWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Release(bg)
	if holder.IsLost() {
		t.Fatal(holder.Err())
	}
	time.Sleep(1200 * time.Millisecond)
	if err := waiter.Err(); err != nil {
		t.Fatal(err)
	}
}

// migrateSlot moves key's slot, with the key, to the other master of a 2-master cluster.
func migrateSlot(t testing.TB, nodes []*server, key string) {
	t.Helper()
	ctx := context.Background()
	clients := []*redis.Client{nodes[0].client(), nodes[1].client()}
	defer clients[0].Close()
	defer clients[1].Close()
	slot64, err := clients[0].ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slot := int(slot64)
	ids := make([]string, 2)
	for i, c := range clients {
		if ids[i], err = c.Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
			t.Fatal(err)
		}
	}
	from := 0
	if owner, _ := clients[1].Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", slot).Int(); owner > 0 {
		from = 1
	}
	to := 1 - from
	steps := []error{
		clients[to].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[from]).Err(),
		clients[from].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to]).Err(),
		clients[from].Do(ctx, "MIGRATE", "127.0.0.1", nodes[to].port, "", 0, 5000, "KEYS", key).Err(),
		clients[to].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[to]).Err(),
		clients[from].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[to]).Err(),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("migration step %d: %v", i, err)
		}
	}
	if n, _ := clients[to].Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", slot).Int(); n != 1 {
		t.Fatalf("the key did not arrive: %d keys in slot %d", n, slot)
	}
	if !strings.Contains(fmt.Sprint(clients[to].Do(ctx, "PATHLOCK.LOCKS", key).Val()), "/A") {
		t.Fatal("the locks did not travel with the key")
	}
}
