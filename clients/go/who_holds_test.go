package pathlock

// Notes, nesting under a lease, inspection, and the requests refused before or by the server.

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func notes(locks []HeldLock) []string {
	out := []string{}
	for _, l := range locks {
		out = append(out, string(l.Mode)+" "+l.Path+" "+l.Note)
	}
	return out
}

func paths(locks []HeldLock) []string {
	out := []string{}
	for _, l := range locks {
		out = append(out, l.Path)
	}
	return out
}

func TestEachOperationNotesWhatItDoesUnlessToldOtherwise(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	locks := mustNew(t, c, testKey(t))
	cases := []struct {
		acquire func() (*Lease, error)
		note    string
	}{
		{func() (*Lease, error) { return locks.Move(bg, "/A/C", "/B") }, "move /A/C -> /B"},
		{func() (*Lease, error) { return locks.Upload(bg, "/D/f") }, "upload /D/f"},
		{func() (*Lease, error) { return locks.Create(bg, "/D/N") }, "create /D/N"},
		{func() (*Lease, error) { return locks.Read(bg, "/D/f") }, "read /D/f"},
		{func() (*Lease, error) { return locks.Rename(bg, "/D/f", "g") }, "rename /D/f -> /D/g"},
		{func() (*Lease, error) { return locks.Copy(bg, "/A/a.txt", "/B") }, "copy /A/a.txt -> /B"},
		{func() (*Lease, error) { return locks.Delete(bg, "/A") }, "delete /A"},
		{func() (*Lease, error) { return locks.Purge(bg, []string{"/bin/1", "/bin/2"}) }, "purge /bin/1 /bin/2"},
		{func() (*Lease, error) { return locks.Lock(bg, []Request{{Read, "/X"}, {Write, "/X/y"}}) }, "lock READ /X, WRITE /X/y"},
		{func() (*Lease, error) { return locks.Upload(bg, "/E/f", WithNote("alice: uploading f")) }, "alice: uploading f"},
	}
	for _, tc := range cases {
		lease, err := tc.acquire()
		if err != nil {
			t.Fatal(err)
		}
		all, err := locks.Locks(bg, "", "")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range all {
			if l.Note != tc.note {
				t.Errorf("note %q, want %q", l.Note, tc.note)
			}
		}
		if lease.Note() != tc.note {
			t.Errorf("lease.Note() %q, want %q", lease.Note(), tc.note)
		}
		_ = lease.Release(bg)
	}
	// The handle's note replaces the operation's; the call's replaces both; "" sends none.
	worker := mustNew(t, c, testKey(t), WithNote("worker-7"))
	for _, tc := range []struct {
		options []Option
		want    string
	}{{nil, "worker-7"}, {[]Option{WithNote("Алиса: f")}, "Алиса: f"}, {[]Option{WithNote("")}, ""}} {
		lease, err := worker.Upload(bg, "/F/f", tc.options...)
		if err != nil {
			t.Fatal(err)
		}
		all, _ := locks.Locks(bg, "", "")
		if got := notes(all); fmt.Sprint(got) != fmt.Sprint([]string{"WRITE /F/f " + tc.want}) {
			t.Errorf("notes %q, want %q", got, tc.want)
		}
		_ = lease.Release(bg)
	}
	// A default note stays short, however long the path (the server takes 256 bytes by default).
	long := "/" + strings.Repeat("é", 300)
	lease, err := locks.Upload(bg, long)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := locks.Locks(bg, "", "")
	if n := all[0].Note; !strings.HasPrefix(n, "upload /éé") || !strings.HasSuffix(n, "...") || len(n) > 100 || !utf8.ValidString(n) {
		t.Errorf("long note %q", n)
	}
	_ = lease.Release(bg)
}

func TestBusyNamesTheBlockersWithTheirNotesOrSaysNothingHoldsThem(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	key := testKey(t)
	alice := mustNew(t, c, key, WithNote("alice"))
	bob := mustNew(t, c, key)
	move, err := alice.Move(bg, "/A/C", "/B", WithNote("alice: move /A/C into /B"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.Upload(bg, "/A/C/D/new.txt")
	var busy *BusyError
	if !errors.As(err, &busy) {
		t.Fatal(err)
	}
	b := busy.Blockers[0]
	if len(busy.Blockers) != 1 || b.Path != "/A/C" || b.Mode != Write || b.Token != move.Token() || b.Fence != move.Fence() || b.Note != "alice: move /A/C into /B" {
		t.Fatalf("blockers %+v", busy.Blockers)
	}
	if !strings.Contains(err.Error(), "alice: move /A/C into /B") {
		t.Fatalf("message %q", err)
	}
	// Only an earlier waiter in the way: no blocker, and the message says so.
	waiting := make(chan error, 1)
	go func() {
		lease, err := bob.Upload(bg, "/A/C/x", WithWait(10*time.Second))
		if err == nil {
			_ = lease.Release(bg)
		}
		waiting <- err
	}()
	waitUntil(t, 5*time.Second, "the waiter to queue", func() bool {
		w, _ := bob.Waiters(bg, "")
		return len(w) == 1
	})
	if err := move.Release(bg); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	empty := &BusyError{Requests: []Request{{Write, "/A"}}}
	if msg := empty.Error(); !strings.Contains(msg, "nothing holds these paths now") || strings.Contains(msg, "held by") {
		t.Fatalf("message %q", msg)
	}
}

func TestCheckLocksAndWaitersOnTheHandle(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	locks := mustNew(t, c, testKey(t))
	other := mustNew(t, c, testKey(t))
	move, err := locks.Move(bg, "/A/C", "/B")
	if err != nil {
		t.Fatal(err)
	}
	beside, err := other.Upload(bg, "/A/CD/notes.txt")
	if err != nil {
		t.Fatal(err)
	}
	check := func(got []HeldLock, err error, want ...string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(paths(got)) != fmt.Sprint(want) {
			t.Fatalf("got %v, want %v", paths(got), want)
		}
	}
	all, err := locks.Locks(bg, "", "")
	check(all, err, "/A/C", "/A/CD/notes.txt", "/B/C")
	if all[0].Token != move.Token() || all[1].Token != beside.Token() {
		t.Fatalf("tokens %+v", all)
	}
	got, err := locks.Locks(bg, "/A", "")
	check(got, err, "/A/C", "/A/CD/notes.txt")
	got, err = locks.Locks(bg, "", move.Token())
	check(got, err, "/A/C", "/B/C")
	got, err = locks.Locks(bg, "/B", move.Token())
	check(got, err, "/B/C")
	got, err = locks.Check(bg, []Request{{Write, "/A"}}, "")
	check(got, err, "/A/C", "/A/CD/notes.txt")
	got, err = locks.Check(bg, []Request{{Write, "/A"}}, move.Token())
	check(got, err, "/A/CD/notes.txt")
	got, err = locks.Check(bg, []Request{{Read, "/Z"}}, "")
	check(got, err)
	if w, err := locks.Waiters(bg, ""); err != nil || len(w) != 0 {
		t.Fatalf("waiters %v %v", w, err)
	}
	type result struct {
		lease *Lease
		err   error
	}
	waited := make(chan result, 1)
	go func() {
		lease, err := other.Upload(bg, "/B/C/x", WithWait(5*time.Second), WithNote("bob waits"))
		waited <- result{lease, err}
	}()
	waitUntil(t, 5*time.Second, "the upload to queue", func() bool {
		w, _ := locks.Waiters(bg, "")
		return len(w) > 0
	})
	queue, err := locks.Waiters(bg, "")
	if err != nil || len(queue) != 1 {
		t.Fatalf("waiters %v %v", queue, err)
	}
	q := queue[0]
	if fmt.Sprint(q.Requests) != fmt.Sprint([]Request{{Write, "/B/C/x"}}) || q.Note != "bob waits" || q.Waited < 0 || q.Left <= 0 || q.Left > 5*time.Second {
		t.Fatalf("waiter %+v", q)
	}
	if w, _ := locks.Waiters(bg, "/B/C"); len(w) != 1 || w[0].Token != q.Token {
		t.Fatalf("waiters under /B/C: %v", w)
	}
	if w, _ := locks.Waiters(bg, "/A"); len(w) != 0 {
		t.Fatalf("waiters under /A: %v", w)
	}
	_ = move.Release(bg)
	_ = beside.Release(bg)
	r := <-waited
	if r.err != nil || r.lease.Token() != q.Token {
		t.Fatalf("the waiter: %v", r.err)
	}
	_ = r.lease.Release(bg)
	if all, _ := locks.Locks(bg, "", ""); len(all) != 0 {
		t.Fatalf("left %v", all)
	}
}

func TestALeaseLocksMoreUnderItsOwnTokenRenewsAndReleasesThem(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	locks := mustNew(t, c, testKey(t), WithTTL(300*time.Millisecond))
	bob := mustNew(t, c, testKey(t))
	move, err := locks.Move(bg, "/A/C", "/B")
	if err != nil {
		t.Fatal(err)
	}
	// Inside what the move holds: refused to everyone else, granted to the move.
	if _, err := bob.Upload(bg, "/B/C/new.txt"); !errors.Is(err, ErrBusy) {
		t.Fatal(err)
	}
	fence, err := move.Lock(bg, []Request{{Write, "/B/C/new.txt"}})
	if err != nil || fence <= move.Fence() {
		t.Fatalf("fence %d after %d: %v", fence, move.Fence(), err)
	}
	if got := fmt.Sprint(move.Requests()); got != fmt.Sprint([]Request{{Write, "/A/C"}, {Write, "/B/C"}, {Write, "/B/C/new.txt"}}) {
		t.Fatalf("requests %s", got)
	}
	mine, _ := locks.Locks(bg, "", move.Token())
	if n := notes(mine); n[len(n)-1] != "WRITE /B/C/new.txt move /A/C -> /B" {
		t.Fatalf("notes %q", n)
	}
	// Beside it too; and again: an idempotent re-acquire, with a new fence and note.
	if _, err := move.Lock(bg, []Request{{Read, "/R"}}); err != nil {
		t.Fatal(err)
	}
	again, err := move.Lock(bg, []Request{{Write, "/B/C/new.txt"}}, WithNote("move: writing new.txt"))
	if err != nil || again <= fence {
		t.Fatalf("again %d after %d: %v", again, fence, err)
	}
	if mine, _ := locks.Locks(bg, "", move.Token()); len(mine) != 4 {
		t.Fatalf("holds %v", mine)
	}
	if l, _ := locks.Locks(bg, "/B/C/new.txt", ""); len(l) != 1 || l[0].Note != "move: writing new.txt" {
		t.Fatalf("note %v", l)
	}
	// Another owner in the way: busy, with that owner as the blocker.
	other, err := bob.Upload(bg, "/S/x")
	if err != nil {
		t.Fatal(err)
	}
	var busy *BusyError
	if _, err := move.Lock(bg, []Request{{Write, "/S"}}); !errors.As(err, &busy) || len(busy.Blockers) != 1 || busy.Blockers[0].Token != other.Token() {
		t.Fatalf("want busy by %s: %v", other.Token(), err)
	}
	_ = other.Release(bg)
	// Options that are not the lease's to change are refused.
	if _, err := move.Lock(bg, []Request{{Write, "/T"}}, WithTTL(time.Hour)); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	// The watchdog keeps every one of them alive well past the TTL.
	time.Sleep(1200 * time.Millisecond)
	if err := move.Err(); err != nil {
		t.Fatal(err)
	}
	mine, _ = locks.Locks(bg, "", move.Token())
	for _, l := range mine {
		if l.TTL <= 0 || l.TTL > 300*time.Millisecond {
			t.Fatalf("ttl %v", l.TTL)
		}
	}
	if len(mine) != 4 {
		t.Fatalf("holds %v", mine)
	}
	// Releasing the lease frees everything its token holds.
	_ = move.Release(bg)
	if all, _ := locks.Locks(bg, "", ""); len(all) != 0 {
		t.Fatalf("left %v", all)
	}
	if _, err := move.Lock(bg, []Request{{Write, "/A/C/x"}}); !errors.Is(err, ErrReleased) {
		t.Fatal(err)
	}
}

func TestANestedLockWaitsOnAConnectionOfItsOwn(t *testing.T) {
	t.Parallel()
	// The wait outlasts the TTL more than twice: had it held up the move's renewals, the move
	// would be lost by the time the nested lock is granted.
	c := sharedClient(t)
	locks := mustNew(t, c, testKey(t), WithTTL(300*time.Millisecond))
	other, err := locks.Upload(bg, "/Q/x")
	if err != nil {
		t.Fatal(err)
	}
	move, err := locks.Move(bg, "/A/C", "/B")
	if err != nil {
		t.Fatal(err)
	}
	defer move.Release(bg)
	time.AfterFunc(800*time.Millisecond, func() { _ = other.Release(bg) })
	started := time.Now()
	if _, err := move.Lock(bg, []Request{{Write, "/Q"}}, WithWait(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(started); took < 700*time.Millisecond || took > 3*time.Second {
		t.Fatalf("granted after %v", took)
	}
	if err := move.Err(); err != nil {
		t.Fatal(err)
	}
	mine, _ := locks.Locks(bg, "", move.Token())
	if fmt.Sprint(paths(mine)) != fmt.Sprint([]string{"/A/C", "/B/C", "/Q"}) {
		t.Fatalf("holds %v", paths(mine))
	}
}

func TestALostLeaseTakesNoMoreLocksAndALostNestedLockLosesTheLease(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	key := testKey(t)
	locks := mustNew(t, c, key, WithTTL(600*time.Millisecond))
	// The key deleted under the lease: Lock finds out before it would make the key again.
	lease, err := locks.Move(bg, "/A/C", "/B")
	if err != nil {
		t.Fatal(err)
	}
	c.Del(bg, key)
	if _, err := lease.Lock(bg, []Request{{Write, "/B/C/x"}}); !errors.Is(err, ErrLeaseLost) || lostReason(lease) != Gone {
		t.Fatalf("Lock on a deleted key: %v", err)
	}
	if n, _ := c.Exists(bg, key).Result(); n != 0 {
		t.Fatal("the key was made again")
	}
	_ = lease.Release(bg)
	// Locks of the lease released elsewhere while a nested lock still answers the renewals.
	lease, err = locks.Move(bg, "/A/C", "/B")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Lock(bg, []Request{{Write, "/B/C/x"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a renewal has counted the lease's three locks
	released := time.Now()
	if n, _ := c.Do(bg, "PATHLOCK.RELEASE", key, lease.Token(), "/A/C").Int(); n != 1 {
		t.Fatalf("freed %d", n)
	}
	lostWithin(t, lease, released, 200*time.Millisecond+slack)
	if lostReason(lease) != Gone {
		t.Fatal(lease.Err())
	}
	_ = lease.Release(bg)
	if all, _ := locks.Locks(bg, "", ""); len(all) != 0 {
		t.Fatalf("left %v", all)
	}
}

func TestHelpersRefuseEmptyAndRootPathsAndMovesIntoThemselves(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	locks := mustNew(t, c, testKey(t))
	refused := []struct {
		call func() (*Lease, error)
		says string
	}{
		{func() (*Lease, error) { return locks.Upload(bg, "") }, "whole project"},
		{func() (*Lease, error) { return locks.Upload(bg, "/") }, "whole project"},
		{func() (*Lease, error) { return locks.Create(bg, "//") }, "whole project"},
		{func() (*Lease, error) { return locks.Read(bg, "/./") }, "whole project"},
		{func() (*Lease, error) { return locks.Delete(bg, "/") }, "whole project"},
		{func() (*Lease, error) { return locks.Upload(bg, "/A/../B") }, "'..'"},
		{func() (*Lease, error) { return locks.Move(bg, "/", "/B") }, "whole project"},
		{func() (*Lease, error) { return locks.Copy(bg, "", "/B") }, "whole project"},
		{func() (*Lease, error) { return locks.Purge(bg, []string{"/bin/1", ""}) }, "whole project"},
		{func() (*Lease, error) { return locks.Purge(bg, nil) }, "at least one"},
		{func() (*Lease, error) { return locks.Move(bg, "/A/C", "") }, "folder is empty"},
		// Into itself or its subtree, or into its own folder.
		{func() (*Lease, error) { return locks.Move(bg, "/A", "/A/C") }, "into itself"},
		{func() (*Lease, error) { return locks.Move(bg, "/A", "/A") }, "into itself"},
		{func() (*Lease, error) { return locks.Copy(bg, "/A/", "//A/./C") }, "into itself"},
		{func() (*Lease, error) { return locks.Move(bg, "/A/C", "/A") }, "already in"},
		{func() (*Lease, error) { return locks.Copy(bg, "/A", "/") }, "already in"},
		{func() (*Lease, error) { return locks.Move(bg, "/A/C", "/A/../B") }, "'..'"},
		// Item 2: rename takes a name.
		{func() (*Lease, error) { return locks.Rename(bg, "/A/C", "/A/D") }, "rename takes a name"},
		{func() (*Lease, error) { return locks.Rename(bg, "/A/C", "") }, "rename takes a name"},
		{func() (*Lease, error) { return locks.Rename(bg, "/A/C", ".") }, "rename takes a name"},
		{func() (*Lease, error) { return locks.Rename(bg, "/A/C", "..") }, "rename takes a name"},
		{func() (*Lease, error) { return locks.Rename(bg, "/A/C", "C") }, "rename takes a name"},
		{func() (*Lease, error) { return locks.Rename(bg, "/", "C") }, "whole project"},
		{func() (*Lease, error) { return locks.Lock(bg, []Request{{Write, ""}}) }, "empty"},
		{func() (*Lease, error) { return locks.Lock(bg, nil) }, "no locks"},
		{func() (*Lease, error) { return locks.Lock(bg, []Request{{"SHARED", "/A"}}) }, "READ or WRITE"},
	}
	for i, tc := range refused {
		lease, err := tc.call()
		if lease != nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("case %d: want ErrInvalid saying %q, got %v", i, tc.says, err)
		}
	}
	if all, _ := locks.Locks(bg, "", ""); len(all) != 0 {
		t.Fatalf("a refused call locked %v", all)
	}
	// Beside them, what is fine: /A/CD is not inside /A/C, a move into the root.
	for _, call := range []func() (*Lease, error){
		func() (*Lease, error) { return locks.Move(bg, "/A/C", "/A/CD") },
		func() (*Lease, error) { return locks.Move(bg, "/A/C", "/") },
		func() (*Lease, error) { return locks.Copy(bg, "/A/C", "/A/C2/D") },
		func() (*Lease, error) { return locks.Rename(bg, "/A/C", "C2") },
	} {
		lease, err := call()
		if err != nil {
			t.Fatal(err)
		}
		_ = lease.Release(bg)
	}
	// The whole project, asked for in so many words.
	everything, err := locks.Lock(bg, []Request{{Write, "/"}})
	if err != nil {
		t.Fatal(err)
	}
	if all, _ := locks.Locks(bg, "", ""); fmt.Sprint(notes(all)) != fmt.Sprint([]string{"WRITE / lock WRITE /"}) {
		t.Fatalf("notes %v", notes(all))
	}
	if _, err := locks.Upload(bg, "/A"); !errors.Is(err, ErrBusy) {
		t.Fatal(err)
	}
	_ = everything.Release(bg)
}

func TestDurationsAreCheckedWithTheirUnitsAndRoundedUpToWholeMilliseconds(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	if _, err := New(c, testKey(t), WithTTL(0)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "ttl must be at least 1 millisecond, not 0s") {
		t.Fatal(err)
	}
	if _, err := New(c, testKey(t), WithReplicasTimeout(0)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "replicas timeout must be at least 1 millisecond") {
		t.Fatal(err)
	}
	locks := mustNew(t, c, testKey(t))
	for _, tc := range []struct {
		option Option
		says   string
	}{
		{WithTTL(500 * time.Microsecond), "ttl must be at least 1 millisecond, not 500µs"},
		{WithTTL(-time.Second), "ttl must be at least 1 millisecond, not -1s"},
		{WithWait(-time.Millisecond), "wait must be 0 milliseconds or more, not -1ms"},
		{WithReplicas(-1), "replicas must be 0 replicas or more, not -1"},
	} {
		if _, err := locks.Upload(bg, "/A", tc.option); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("want %q, got %v", tc.says, err)
		}
	}
	// A fraction of a millisecond is rounded up: a TTL of 60 s and half a millisecond is sent as
	// 60001 ms.
	lease, err := locks.Upload(bg, "/A", WithTTL(time.Minute+500*time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	args := acquireArgs(locks.key, ask{token: "t", requests: []Request{{Write, "/A"}}, s: lease.s}, 1500*time.Microsecond)
	if got := fmt.Sprint(args[:8]); got != "[PATHLOCK.ACQUIRE "+locks.key+" TOKEN t TTL 60001 WAIT 2]" {
		t.Fatalf("args %s", got)
	}
	all, _ := locks.Locks(bg, "", "")
	if len(all) != 1 || all[0].TTL <= 59*time.Second || all[0].TTL > time.Minute+time.Millisecond {
		t.Fatalf("ttl %v", all)
	}
	_ = lease.Release(bg)
	if all, _ := locks.Locks(bg, "", ""); len(all) != 0 {
		t.Fatalf("left %v", all)
	}
}

func TestAKeyOfAnotherTypeIsNamedAndSaidNotToBeAProject(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	other := testKey(t) + ":cache"
	c.Set(bg, other, "hello", 0)
	locks := mustNew(t, c, other)
	for i, call := range []func() error{
		func() error { _, err := locks.Upload(bg, "/A"); return err },
		func() error { _, err := locks.Upload(bg, "/A", WithWait(time.Second)); return err },
		func() error { _, err := locks.Locks(bg, "", ""); return err },
		func() error { _, err := locks.Check(bg, []Request{{Read, "/A"}}, ""); return err },
		func() error { _, err := locks.Waiters(bg, ""); return err },
	} {
		err := call()
		var wrong *WrongTypeError
		if !errors.As(err, &wrong) || !errors.Is(err, ErrWrongType) || wrong.Key != other ||
			!strings.Contains(err.Error(), fmt.Sprintf("key %q is not a pathlock project", other)) || wrong.Unwrap() == nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	// A project overwritten under a lease: the lease is lost, and says why.
	key := testKey(t)
	lease, err := mustNew(t, c, key, WithTTL(600*time.Millisecond)).Upload(bg, "/A")
	if err != nil {
		t.Fatal(err)
	}
	c.Set(bg, key, "not a project any more", 0)
	lostWithin(t, lease, time.Now(), 200*time.Millisecond+slack)
	if lostReason(lease) != Replaced || !strings.Contains(lease.Err().Error(), "another type of value") {
		t.Fatal(lease.Err())
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
}

func TestNewRefusesAClientItCannotRoute(t *testing.T) {
	t.Parallel()
	if _, err := New(nil, "proj:x"); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
}
