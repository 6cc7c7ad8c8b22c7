package pathlock

import (
	"context"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// slack is what a loaded test machine may add to a loss that must be reported within one
// renewal period.
const slack = 250 * time.Millisecond

var bg = context.Background()

// testKey is a project key of the test's own, so that tests on a shared server run in parallel.
func testKey(t testing.TB) string {
	return "proj:" + t.Name()
}

func mustNew(t testing.TB, client redis.UniversalClient, key string, options ...Option) *Locks {
	t.Helper()
	locks, err := New(client, key, options...)
	if err != nil {
		t.Fatal(err)
	}
	return locks
}

// sharedClient is a client of the shared server, closed when the test ends.
func sharedClient(t testing.TB) *redis.Client {
	t.Helper()
	c := sharedServer(t).client()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// held lists the live locks of key as "MODE path token", sorted, straight from PATHLOCK.LOCKS.
func held(t testing.TB, c redis.UniversalClient, key string) []string {
	t.Helper()
	reply, err := c.Do(bg, "PATHLOCK.LOCKS", key).Result()
	if err != nil {
		t.Fatal(err)
	}
	locks, err := parseHeld("LOCKS", reply)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, l := range locks {
		out = append(out, string(l.Mode)+" "+l.Path+" "+l.Token)
	}
	sort.Strings(out)
	return out
}

func lockLines(token string, requests ...Request) []string {
	out := []string{}
	for _, r := range requests {
		out = append(out, string(r.Mode)+" "+r.Path+" "+token)
	}
	sort.Strings(out)
	return out
}

func sameLines(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

var renewCallsRe = regexp.MustCompile(`cmdstat_pathlock\.renew:calls=(\d+)`)

// renewCalls is how many PATHLOCK.RENEW the server has run.
func renewCalls(t testing.TB, c redis.UniversalClient) int {
	t.Helper()
	info, err := c.Info(bg, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := renewCallsRe.FindStringSubmatch(strings.ToLower(info))
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// lostWithin waits for the lease's loss and checks that it came within limit of since.
func lostWithin(t testing.TB, lease *Lease, since time.Time, limit time.Duration) time.Duration {
	t.Helper()
	select {
	case <-lease.Lost():
	case <-time.After(limit + 2*time.Second):
		t.Fatal("the lease was never reported lost")
	}
	took := time.Since(since)
	if took > limit {
		t.Fatalf("reported lost after %v, more than %v", took, limit)
	}
	if !lease.IsLost() {
		t.Fatalf("Lost() closed but the lease is not lost: %v", lease.Err())
	}
	return took
}

func lostReason(lease *Lease) LostReason {
	if e, ok := lease.Err().(*LeaseLostError); ok {
		return e.Reason
	}
	return 0
}
