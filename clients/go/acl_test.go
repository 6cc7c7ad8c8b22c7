package pathlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// recipeUser makes an ACL user as docs/operations.md's application recipe does (the lock
// commands on proj:* keys, nothing else: the pathlock category where the server has module
// categories, the commands by name on Redis 7.0), plus extra rules, and answers a client
// logged in as that user, closed when the test ends.
func recipeUser(t *testing.T, s *server, extra ...string) *redis.Client {
	t.Helper()
	name := setRecipeUser(t, s, extra...)
	c := redis.NewClient(&redis.Options{Addr: s.addr(), Username: name, Password: "pw"})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// setRecipeUser makes recipeUser's ACL user (password pw) on s and answers its name. ACL users
// are per node: a cluster's test makes it on every node.
func setRecipeUser(t *testing.T, s *server, extra ...string) string {
	t.Helper()
	admin := s.client()
	defer admin.Close()
	categories, err := admin.Do(bg, "ACL", "CAT").StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	rules := []any{"~proj:*", "+@pathlock"}
	if !slices.Contains(categories, "pathlock") {
		rules = []any{"~proj:*", "+pathlock.acquire", "+pathlock.release", "+pathlock.renew",
			"+pathlock.locks", "+pathlock.check", "+pathlock.waiters"}
	}
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	args := append([]any{"ACL", "SETUSER", name, "reset", "on", ">pw"}, rules...)
	for _, rule := range extra {
		args = append(args, rule)
	}
	if err := admin.Do(bg, args...).Err(); err != nil {
		t.Fatal(err)
	}
	return name
}

// clusterRules are the rules docs/operations.md adds to the application recipe on a cluster:
// the slot map (CLUSTER SLOTS), go-redis's COMMAND (each command otherwise waits for a refused
// COMMAND and logs it); Lettuce's CLUSTER NODES, ioredis's ready check (CLUSTER INFO) and the
// PING of the Node client and redis-rs are for the other clients.
var clusterRules = []string{"+cluster|slots", "+cluster|nodes", "+cluster|info", "+command", "+ping"}

// Under the documented cluster rule line, on every node, a ClusterClient locks, renews, waits
// and releases on each master; without the cluster additions, every command fails with the
// refusal of CLUSTER SLOTS, as the docs say.
func TestTheDocumentedACLUserOnACluster(t *testing.T) {
	t.Parallel()
	nodes := sharedCluster(t)
	userClient := func(t *testing.T, extra ...string) *redis.ClusterClient {
		var name string
		for _, n := range nodes {
			name = setRecipeUser(t, n, extra...)
		}
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].addr()}, Username: name, Password: "pw"})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	t.Run("with the cluster rules", func(t *testing.T) {
		cc := userClient(t, clusterRules...)
		for _, key := range clusterKeys(t) {
			locks := mustNew(t, cc, key)
			holder, err := locks.Delete(bg, "/A", WithTTL(300*time.Millisecond))
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			time.AfterFunc(400*time.Millisecond, func() { _ = holder.Release(bg) })
			waiter, err := locks.Upload(bg, "/A/f", WithWait(5*time.Second))
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if err := holder.Err(); err != nil {
				t.Fatalf("%s: the holder, renewed past its TTL: %v", key, err)
			}
			if err := waiter.Release(bg); err != nil {
				t.Fatal(err)
			}
			if got := held(t, cc, key); len(got) != 0 {
				t.Fatalf("%s: left %v", key, got)
			}
		}
	})
	t.Run("without them", func(t *testing.T) {
		cc := userClient(t)
		_, err := mustNew(t, cc, clusterKeys(t)[0]).Delete(bg, "/A")
		if err == nil || !strings.Contains(err.Error(), "'cluster|slots'") {
			t.Fatalf("want the refusal of CLUSTER SLOTS, got %v", err)
		}
	})
}

// Under the documented recipe (no CLIENT ID, no CLIENT UNBLOCK, no WAIT), a waiting acquire
// with a context that can end is still granted, and cancelling it takes the request off the
// queue: the pinned connection is closed instead of unblocked. Given CLIENT ID and CLIENT
// UNBLOCK, the unblock does it.
func TestTheDocumentedACLUserWaitsAndCancels(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		extra []string
	}{
		{"recipe", nil},
		{"with CLIENT ID and UNBLOCK", []string{"+client|id", "+client|unblock"}},
		{"with CLIENT ID only", []string{"+client|id"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := sharedServer(t)
			client := recipeUser(t, s, c.extra...)
			key := testKey(t)
			locks := mustNew(t, client, key)

			// A plain acquire, renewed past its TTL, and released.
			holder, err := locks.Delete(bg, "/A", WithTTL(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond)
			if err := holder.Err(); err != nil {
				t.Fatalf("the holder's lease: %v", err)
			}

			// A waiting acquire with a context that can end, granted when the holder releases.
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			time.AfterFunc(300*time.Millisecond, func() { _ = holder.Release(bg) })
			waiter, err := locks.Upload(ctx, "/A/f", WithWait(5*time.Second))
			if err != nil {
				t.Fatalf("the waiting acquire: %v", err)
			}

			// Cancelled while it waits: the request leaves the queue at once.
			ctx, cancelCause := context.WithCancelCause(bg)
			stop := errors.New("the user gave up")
			time.AfterFunc(300*time.Millisecond, func() { cancelCause(stop) })
			wait := 20 * time.Second
			if c.name == "with CLIENT ID only" {
				wait = time.Second
			}
			started := time.Now()
			_, err = locks.Upload(ctx, "/A/f", WithWait(wait))
			if err != stop {
				t.Fatalf("want the context's cause, got %v", err)
			}
			if c.name == "with CLIENT ID only" {
				// CLIENT UNBLOCK refused: the wait above ran to its end (1 s), but the next
				// one closes its connection instead.
				ctx, cancelCause = context.WithCancelCause(bg)
				time.AfterFunc(300*time.Millisecond, func() { cancelCause(stop) })
				started = time.Now()
				_, err = locks.Upload(ctx, "/A/f", WithWait(20*time.Second))
				if err != stop {
					t.Fatalf("want the context's cause, got %v", err)
				}
			}
			if took := time.Since(started); took > 3*time.Second {
				t.Fatalf("the cancelled wait took %v", took)
			}
			waitUntil(t, 3*time.Second, "the cancelled waiter to leave the queue", func() bool {
				w, err := locks.Waiters(bg, "")
				return err == nil && len(w) == 0
			})
			if err := waiter.Release(bg); err != nil {
				t.Fatal(err)
			}
			if got := held(t, s.client(), key); len(got) != 0 {
				t.Fatalf("held %v", got)
			}
		})
	}
}

// The replicas option needs WAIT: under the recipe it fails with the server's NOPERM, and the
// grant it made is released.
func TestReplicasUnderTheDocumentedACLUserFailAndHoldNothing(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	client := recipeUser(t, s)
	key := testKey(t)
	locks := mustNew(t, client, key)
	_, err := locks.Upload(bg, "/A", WithReplicas(1), WithReplicasTimeout(100*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("want NOPERM, got %v", err)
	}
	admin := s.client()
	defer admin.Close()
	waitUntil(t, 3*time.Second, "the grant to be released", func() bool {
		return len(held(t, admin, key)) == 0
	})
}

// The documented cluster user follows a slot moved to another master: go-redis reads the slot
// map again (CLUSTER SLOTS) after the MOVED of a renewal, and a waiting acquire, whose pool still
// maps the slot to the old master, follows it to the new one.
func TestTheDocumentedACLUserFollowsAMovedSlot(t *testing.T) {
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
	var name string
	for _, n := range nodes {
		name = setRecipeUser(t, n, clusterRules...)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].addr()}, Username: name, Password: "pw"})
	t.Cleanup(func() { _ = cc.Close() })
	key := testKey(t)
	locks := mustNew(t, cc, key, WithTTL(3*time.Second))
	first, err := locks.Upload(bg, "/warm", WithWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Release(bg)
	holder, err := locks.Delete(bg, "/A")
	if err != nil {
		t.Fatal(err)
	}
	before := redirections(t, nodes)
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
	if redirections(t, nodes) == before {
		t.Fatal("no node answered MOVED or ASK: the slot move was not followed")
	}
	time.Sleep(1200 * time.Millisecond) // the waiter's renewals, on the new master
	if err := waiter.Err(); err != nil {
		t.Fatal(err)
	}
}
