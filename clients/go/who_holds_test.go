package pathlock

// What the Go client does beyond the contract's scenarios (clients/contract, run by
// contract_test.go): its default notes and tokens, the options Lease.Lock refuses, the checks of
// its own types, and WRONGTYPE on a waiting acquire's connection.

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

func TestDefaultNotesStayShortAndTokensAreUUIDv4(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	locks := mustNew(t, c, testKey(t))
	// The server takes 256 bytes of note by default; a default note stays under 100, however
	// long the path, cut at a character.
	long := "/" + strings.Repeat("é", 300)
	lease, err := locks.Upload(bg, long)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(bg)
	all, _ := locks.Locks(bg, "", "")
	if n := all[0].Note; !strings.HasPrefix(n, "upload /éé") || !strings.HasSuffix(n, "...") || len(n) > 100 || !utf8.ValidString(n) {
		t.Errorf("long note %q", n)
	}
	if !uuid4.MatchString(lease.Token()) {
		t.Errorf("token %q is not a UUID v4", lease.Token())
	}
}

func TestLeaseLockTakesTheLeasesTTLAndReplicas(t *testing.T) {
	t.Parallel()
	locks := mustNew(t, sharedClient(t), testKey(t))
	move, err := locks.Move(bg, "/A/C", "/B")
	if err != nil {
		t.Fatal(err)
	}
	defer move.Release(bg)
	for _, option := range []Option{WithTTL(time.Hour), WithReplicas(1), WithReplicasTimeout(time.Minute)} {
		if _, err := move.Lock(bg, []Request{{Write, "/B/C/x"}}, option); !errors.Is(err, ErrInvalid) {
			t.Errorf("want ErrInvalid, got %v", err)
		}
	}
	if fence, err := move.Lock(bg, []Request{{Write, "/B/C/x"}}, WithNote("move: x"), WithWait(time.Second)); err != nil || fence <= move.Fence() {
		t.Fatalf("fence %d: %v", fence, err)
	}
}

func TestPathsAndOptionsTheContractDoesNotList(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	if _, err := New(c, testKey(t), WithTTL(0)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "ttl must be at least 1 millisecond, not 0s") {
		t.Fatal(err)
	}
	if _, err := New(nil, testKey(t)); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	// A client variable declared and never set is a typed nil in the interface: refused as the
	// nil interface is, not a panic at the first command.
	var single *redis.Client
	var cluster *redis.ClusterClient
	for _, typed := range []redis.UniversalClient{single, cluster} {
		if locks, err := New(typed, testKey(t)); locks != nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "the client is nil") {
			t.Fatalf("%T: %v, %v", typed, locks, err)
		}
	}
	// An empty key is a variable that was never set (as the Node.js and Java clients say too).
	if locks, err := New(c, ""); locks != nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "the project key is empty") {
		t.Fatal(err)
	}
	locks := mustNew(t, c, testKey(t))
	refused := []struct {
		call func() (*Lease, error)
		says string
	}{
		{func() (*Lease, error) { return locks.Upload(bg, "/A/../B") }, "'..'"},
		{func() (*Lease, error) { return locks.Lock(bg, []Request{{Read, "/A/.."}}) }, "'..'"},
		{func() (*Lease, error) { return locks.Purge(bg, nil) }, "at least one"},
		{func() (*Lease, error) { return locks.Lock(bg, []Request{{"SHARED", "/A"}}) }, "READ or WRITE"},
		{func() (*Lease, error) { return locks.Upload(bg, "/A", WithTTL(-time.Second)) }, "ttl must be at least 1 millisecond, not -1s"},
		{func() (*Lease, error) { return locks.Upload(bg, "/A", WithWait(-time.Millisecond)) }, "wait must be 0 milliseconds or more, not -1ms"},
	}
	for i, tc := range refused {
		lease, err := tc.call()
		if lease != nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("case %d: want ErrInvalid saying %q, got %v", i, tc.says, err)
		}
	}
	if _, err := locks.Check(bg, nil, ""); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	// Beyond the server's limits (its defaults here), which the client cannot know before it
	// asks: ErrInvalid too, naming the key, with the server's error inside.
	many := make([]Request, 65)
	for i := range many {
		many[i] = Request{Write, fmt.Sprintf("/f%d", i)}
	}
	beyond := []struct {
		call func() (*Lease, error)
		says string
	}{
		{func() (*Lease, error) { return locks.Upload(bg, "/"+strings.Repeat("a", 5000)) }, "path too long"},
		{func() (*Lease, error) { return locks.Upload(bg, strings.Repeat("/a", 300)) }, "path too deep"},
		{func() (*Lease, error) { return locks.Lock(bg, many) }, "too many paths"},
		{func() (*Lease, error) { return locks.Upload(bg, "/A", WithNote(strings.Repeat("n", 300))) }, "NOTE too long"},
		{func() (*Lease, error) { return locks.Upload(bg, "/A", WithTTL(48*time.Hour)) }, "invalid TTL"},
		{func() (*Lease, error) {
			// A waiting acquire's first request carries no wait, so the server sees the wait,
			// and refuses it, when the paths are busy.
			holder, err := locks.Delete(bg, "/A")
			if err != nil {
				return nil, err
			}
			defer holder.Release(bg)
			return locks.Upload(bg, "/A/f", WithWait(48*time.Hour))
		}, "invalid WAIT"},
		{func() (*Lease, error) { _, err := locks.Check(bg, many, ""); return nil, err }, "too many paths"},
	}
	for i, tc := range beyond {
		lease, err := tc.call()
		var server redis.Error
		if lease != nil || !errors.Is(err, ErrInvalid) || !errors.As(err, &server) || !strings.Contains(server.Error(), tc.says) ||
			!strings.Contains(err.Error(), `refused a request on "`+testKey(t)+`"`) {
			t.Errorf("case %d: want ErrInvalid with the server's %q, got %v", i, tc.says, err)
		}
	}
	if all := held(t, c, testKey(t)); len(all) != 0 {
		t.Fatalf("refused requests left %v", all)
	}
	// What goes on the wire: a TTL of 60 s and half a millisecond is 60001 ms, a wait of 1.5 ms
	// is 2 ms, and an empty note sends no NOTE.
	empty := ""
	args := acquireArgs("k", ask{token: "t", requests: []Request{{Write, "/A"}}, s: settings{ttl: time.Minute + 500*time.Microsecond, note: &empty}}, 1500*time.Microsecond)
	if got := fmt.Sprint(args); got != "[PATHLOCK.ACQUIRE k TOKEN t TTL 60001 WAIT 2 WRITE /A]" {
		t.Fatalf("args %s", got)
	}
}

func TestAWaitingAcquireOnAKeyOfAnotherTypeIsRefusedNamingIt(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	key := testKey(t)
	c.Set(bg, key, "hello", 0)
	_, err := mustNew(t, c, key).Upload(bg, "/A", WithWait(time.Second))
	var wrong *WrongTypeError
	if !errors.As(err, &wrong) || !errors.Is(err, ErrWrongType) || wrong.Key != key || wrong.Unwrap() == nil ||
		!strings.Contains(err.Error(), fmt.Sprintf("key %q is not a pathlock project", key)) {
		t.Fatal(err)
	}
}

func TestMessagesEscapeTheKeysBytes(t *testing.T) {
	t.Parallel()
	key := "proj:\"a\"\\b\n\x7f\xff é"
	want := `key "proj:\"a\"\\b\x0a\x7f\xff é" is not a pathlock project: it holds another type of value (check the key name)`
	if got := (&WrongTypeError{Key: key}).Error(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
