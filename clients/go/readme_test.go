package pathlock_test

// The README's program as printed, built in a fresh module that points at this checkout with a
// replace directive, and what a newcomer writes from the README alone.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pathlock/pathlock/clients/go"
)

func TestTheReadmeProgramRunsAsWritten(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("no Go block in the README")
	}
	program := string(blocks[0][1])
	if !strings.Contains(program, `"localhost:6379"`) {
		t.Fatal("the README's program does not connect to localhost:6379")
	}
	// The program's server is the default one; here it is the test server.
	program = strings.Replace(program, `"localhost:6379"`, `"`+addr+`"`, 1)

	dir, run := newcomerModule(t, program)
	run("go", "mod", "tidy")
	run("go", "build", "-o", "program", ".")
	out := run(filepath.Join(dir, "program"))
	if !regexp.MustCompile(`^moved /A/C into /B with fence \d+\n$`).MatchString(out) {
		t.Fatalf("printed %q", out)
	}

	// With the folder taken by someone else, the program's busy branch says by whom.
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, _ := pathlock.New(rdb, "proj:42")
	bob, err := locks.Rename(ctx, "/A/C", "D", pathlock.WithNote("bob: rename /A/C to /A/D"))
	if err != nil {
		t.Fatal(err)
	}
	out = run(filepath.Join(dir, "program"))
	_ = bob.Release(ctx)
	if out != "/A/C is locked (WRITE) by bob: rename /A/C to /A/D\n" {
		t.Fatalf("printed %q", out)
	}
}

// newcomerModule writes program as the main.go of a fresh module that points at this checkout
// with a replace directive, as the README's Install says, and answers its folder and a runner of
// commands in it.
func newcomerModule(t *testing.T, program string) (string, func(name string, args ...string) string) {
	t.Helper()
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := "module newcomer\n\ngo 1.22\n\nrequire github.com/pathlock/pathlock/clients/go v0.1.0\n\n" +
		"replace github.com/pathlock/pathlock/clients/go => " + here + "\n"
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"go.mod": goMod, "go.sum": string(sum), "main.go": program} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What it lacks comes from the module proxy, as it does for a newcomer: `go mod tidy` also
	// checks the modules that go-redis's own tests import (ginkgo, gomega, xxh3, testify), which
	// a fresh machine's module cache does not hold.
	return dir, func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
}

// The project README's Go lines are the body of a function that returns an error, as a
// newcomer pastes them into a handler: they must build, pass vet and be gofmt'd as printed.
func TestTheProjectReadmesGoLinesBuild(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) != 1 {
		t.Fatalf("%d Go blocks in the project README, not 1", len(blocks))
	}
	body := regexp.MustCompile(`(?m)^(.)`).ReplaceAllString(string(blocks[0][1]), "\t$1")
	program := `package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/pathlock/pathlock/clients/go"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	_ = move(context.Background(), rdb)
}

// moveFolder stands for the application's work.
func moveFolder(ctx context.Context, from, to string, fence int64) error { return ctx.Err() }

func move(ctx context.Context, rdb *redis.Client) error {
` + body + "}\n"
	_, run := newcomerModule(t, program)
	run("go", "mod", "tidy")
	run("go", "vet", ".")
	if out := run("gofmt", "-l", "."); out != "" {
		t.Fatalf("not gofmt'd as printed:\n%s", run("gofmt", "-d", "."))
	}
}

func TestWhatANewcomerWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr}) // one client for the whole application
	defer rdb.Close()
	key := "proj:newcomer"
	locks, err := pathlock.New(rdb, key, pathlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var said []string
	bobDone := make(chan int64, 1)

	move, err := locks.Move(ctx, "/A/C", "/B", pathlock.WithNote("alice: move /A/C into /B"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := move.Lock(ctx, []pathlock.Request{{Mode: pathlock.Write, Path: "/B/C/new.txt"}}); err != nil {
		t.Fatal(err)
	}
	go func() {
		// Bob is willing to wait up to 10 s for the move to finish.
		upload, err := locks.Upload(ctx, "/B/C/bob.txt", pathlock.WithWait(10*time.Second), pathlock.WithNote("bob: upload"))
		if err != nil {
			t.Error(err)
			bobDone <- 0
			return
		}
		defer upload.Release(ctx)
		bobDone <- upload.Fence()
	}()
	var waiters []pathlock.Waiter
	for len(waiters) == 0 {
		time.Sleep(10 * time.Millisecond)
		waiters, _ = locks.Waiters(ctx, "")
	}
	for _, w := range waiters {
		said = append(said, w.Note+" waits for "+w.Requests[0].String())
	}
	mine, _ := locks.Locks(ctx, "", move.Token())
	for _, l := range mine {
		said = append(said, l.Path+": "+l.Note)
	}
	var busy *pathlock.BusyError
	if _, err := locks.Upload(ctx, "/B/C/new.txt"); errors.As(err, &busy) {
		said = append(said, "busy: "+busy.Blockers[0].Note)
	}
	select {
	case <-bobDone:
		t.Fatal("bob was granted inside the move")
	case <-time.After(4 * time.Second): // longer than the TTL: the move is still held, bob waits
	}
	if err := move.Err(); err != nil {
		t.Fatal(err)
	}
	if err := move.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if fence := <-bobDone; fence <= move.Fence() {
		t.Fatalf("bob's fence %d after the move's %d", fence, move.Fence())
	}
	want := []string{
		"bob: upload waits for WRITE /B/C/bob.txt",
		"/A/C: alice: move /A/C into /B",
		"/B/C: alice: move /A/C into /B",
		"/B/C/new.txt: alice: move /A/C into /B",
		"busy: alice: move /A/C into /B",
	}
	if strings.Join(said, "\n") != strings.Join(want, "\n") {
		t.Fatalf("said\n%s\nwant\n%s", strings.Join(said, "\n"), strings.Join(want, "\n"))
	}
	time.Sleep(50 * time.Millisecond)
	if all, _ := locks.Locks(ctx, "", ""); len(all) != 0 {
		t.Fatalf("left %v", all)
	}

	// Mistakes a newcomer makes are told what to do instead.
	_, err = locks.Upload(ctx, "")
	if !errors.Is(err, pathlock.ErrInvalid) || !strings.Contains(err.Error(), `Lock(ctx, []pathlock.Request{{Mode: pathlock.Write, Path: "/"}})`) {
		t.Fatal(err)
	}
	_, err = locks.Upload(ctx, "/A", pathlock.WithTTL(500*time.Microsecond)) // half a millisecond?
	if !errors.Is(err, pathlock.ErrInvalid) || !strings.Contains(err.Error(), "at least 1 millisecond") {
		t.Fatal(err)
	}
	_, err = locks.Rename(ctx, "/A/C", "/B/C") // a path, where rename takes a name
	if !errors.Is(err, pathlock.ErrInvalid) || !strings.Contains(err.Error(), "rename takes a name") {
		t.Fatal(err)
	}
	rdb.Set(ctx, "settings", "{}", 0)
	settings, _ := pathlock.New(rdb, "settings")
	if _, err := settings.Upload(ctx, "/A"); !errors.Is(err, pathlock.ErrWrongType) || !strings.Contains(err.Error(), `"settings" is not a pathlock project`) {
		t.Fatal(err)
	}
}
