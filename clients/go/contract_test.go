package pathlock

// The Go runner of the clients' contract (clients/contract/README.md): every scenario of
// clients/contract/scenarios/*.json, one subtest each, on servers of its own (so that the
// scenarios run in parallel), with the texts of clients/contract/contract.json.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const contractDir = "../contract"

type contractSettings struct {
	Format        int               `json:"format"`
	SlackMs       int               `json:"slack_ms"`
	TaskTimeoutMs int               `json:"task_timeout_ms"`
	Clients       []string          `json:"clients"`
	Messages      map[string]string `json:"messages"`
}

type scenario struct {
	Name     string            `json:"name"`
	Topology string            `json:"topology"`
	Key      string            `json:"key"`
	Except   map[string]string `json:"except"`
	Steps    []map[string]any  `json:"steps"`
	file     string
}

// decodeJSON reads JSON with numbers kept as written (1500.5 stays 1500.5 ms).
func decodeJSON(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(into); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func TestContract(t *testing.T) {
	var settings contractSettings
	if err := decodeJSON(filepath.Join(contractDir, "contract.json"), &settings); err != nil {
		t.Fatal(err)
	}
	if settings.Format != 1 {
		t.Fatalf("contract format %d; this runner reads format 1", settings.Format)
	}
	files, err := filepath.Glob(filepath.Join(contractDir, "scenarios", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in %s: %v", contractDir, err)
	}
	sort.Strings(files)
	for _, file := range files {
		var doc struct {
			Scenarios []scenario `json:"scenarios"`
		}
		if err := decodeJSON(file, &doc); err != nil {
			t.Fatal(err)
		}
		for _, sc := range doc.Scenarios {
			sc.file = filepath.Base(file)
			t.Run(sc.Name, func(t *testing.T) {
				if reason, ok := sc.Except["go"]; ok {
					t.Skip(reason)
				}
				t.Parallel()
				r := newRun(t, &settings, sc)
				defer r.cleanup()
				for i, step := range sc.Steps {
					if reason, ok := exceptOf(step)["go"]; ok {
						t.Logf("%s step %d skipped: %s", sc.file, i, reason)
						continue
					}
					r.step(i, r.fill(step).(map[string]any))
				}
			})
		}
	}
}

func exceptOf(step map[string]any) map[string]any {
	except, _ := step["except"].(map[string]any)
	return except
}

// run is one scenario's servers, clients and names.
type run struct {
	t        *testing.T
	settings *contractSettings
	sc       scenario
	key      string
	servers  map[string]*server // "master", "replica"
	nodes    []*server          // a cluster's
	client   redis.UniversalClient
	admin    map[string]redis.UniversalClient
	handles  map[string]*Locks
	mu       sync.Mutex
	leases   map[string]*Lease
	tasks    map[string]*task
	marks    map[string]time.Time
}

// task is a call running in the background: an acquire, a lock, or a wait for a loss.
type task struct {
	done  chan struct{}
	lease *Lease
	fence int64
	err   error
	// outcome of a loss wait: "lost:<reason>" or "released".
	outcome string
}

func newRun(t *testing.T, settings *contractSettings, sc scenario) *run {
	r := &run{
		t: t, settings: settings, sc: sc, key: sc.Key,
		servers: map[string]*server{}, admin: map[string]redis.UniversalClient{},
		handles: map[string]*Locks{}, leases: map[string]*Lease{},
		tasks: map[string]*task{}, marks: map[string]time.Time{},
	}
	if r.key == "" {
		r.key = "proj:contract"
	}
	switch sc.Topology {
	case "single", "replica":
		master := ownServer(t)
		r.servers["master"] = master
		if sc.Topology == "replica" {
			r.servers["replica"] = replicaOf(t, master)
		}
		for name, s := range r.servers {
			c := s.client()
			t.Cleanup(func() { _ = c.Close() })
			r.admin[name] = c
		}
		c := master.client()
		t.Cleanup(func() { _ = c.Close() })
		r.client = c
	case "cluster":
		nodes, err := newCluster(3)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, n := range nodes {
				n.close()
			}
		})
		r.nodes = nodes
		r.client = clusterClient(t, nodes)
		r.admin["master"] = clusterClient(t, nodes)
	default:
		t.Fatalf("unknown topology %q", sc.Topology)
	}
	return r
}

func (r *run) slack() time.Duration { return time.Duration(r.settings.SlackMs) * time.Millisecond }
func (r *run) taskTimeout() time.Duration {
	return time.Duration(r.settings.TaskTimeoutMs) * time.Millisecond
}

// cleanup waits for the tasks and releases whatever the scenario still holds.
func (r *run) cleanup() {
	for _, tk := range r.tasks {
		select {
		case <-tk.done:
		case <-time.After(r.taskTimeout()):
		}
		if tk.lease != nil {
			_ = tk.lease.Release(bg)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, lease := range r.leases {
		_ = lease.Release(bg)
	}
}

var placeholder = regexp.MustCompile(`\{(key|token:[^}]+|fence:[^}]+)\}`)

// fill replaces the placeholders of every string in v.
func (r *run) fill(v any) any {
	switch v := v.(type) {
	case string:
		return placeholder.ReplaceAllStringFunc(v, func(m string) string {
			name := m[1 : len(m)-1]
			switch {
			case name == "key":
				return r.key
			case strings.HasPrefix(name, "token:"):
				return r.lease(name[len("token:"):]).Token()
			default:
				return strconv.FormatInt(r.lease(name[len("fence:"):]).Fence(), 10)
			}
		})
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = r.fill(x)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if k == "except" {
				out[k] = x
				continue
			}
			out[k] = r.fill(x)
		}
		return out
	}
	return v
}

func (r *run) lease(name string) *Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	lease, ok := r.leases[name]
	if !ok {
		r.t.Fatalf("no lease named %q", name)
	}
	return lease
}

func (r *run) setLease(name string, lease *Lease) {
	if name == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leases[name] = lease
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(v any) float64 {
	switch v := v.(type) {
	case json.Number:
		f, err := v.Float64()
		if err == nil {
			return f
		}
	case float64:
		return v
	case string:
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
	}
	panic(fmt.Sprintf("not a number: %#v", v))
}

func integer(v any) int64 { return int64(num(v)) }

// millisOf is a duration given in milliseconds, a fraction carried as time.Duration carries it.
func millisOf(v any) time.Duration {
	if s, ok := v.(string); ok {
		panic(fmt.Sprintf("%q milliseconds cannot be a time.Duration", s))
	}
	return time.Duration(num(v) * float64(time.Millisecond))
}

// options maps the contract's options to the client's.
func options(v any) []Option {
	m, _ := v.(map[string]any)
	var out []Option
	for name, value := range m {
		switch name {
		case "ttl_ms":
			out = append(out, WithTTL(millisOf(value)))
		case "wait_ms":
			out = append(out, WithWait(millisOf(value)))
		case "replicas":
			out = append(out, WithReplicas(int(integer(value))))
		case "replicas_timeout_ms":
			out = append(out, WithReplicasTimeout(millisOf(value)))
		case "note":
			out = append(out, WithNote(str(value)))
		default:
			panic("unknown option " + name)
		}
	}
	return out
}

func requestsOf(v any) []Request {
	list, _ := v.([]any)
	out := []Request{}
	for _, item := range list {
		pair := item.([]any)
		out = append(out, Request{Mode: Mode(str(pair[0])), Path: str(pair[1])})
	}
	return out
}

func pairsOf(requests []Request) [][2]string {
	out := [][2]string{}
	for _, r := range requests {
		out = append(out, [2]string{string(r.Mode), r.Path})
	}
	return out
}

func (r *run) step(i int, s map[string]any) {
	t := r.t
	t.Helper()
	where := fmt.Sprintf("%s step %d (%s)", r.sc.file, i, str(s["do"]))
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(where+": "+format, args...)
	}
	switch str(s["do"]) {
	case "handle":
		key := r.key
		if k := str(s["key"]); k != "" {
			key = k
		}
		locks, err := New(r.client, key, options(s["options"])...)
		if err != nil {
			fail("%v", err)
		}
		r.handles[str(s["name"])] = locks
	case "acquire":
		locks := r.handles[str(s["handle"])]
		call := func() (*Lease, int64, error) {
			lease, err := r.operation(locks, str(s["op"]), s["args"].([]any), options(s["options"]))
			if lease != nil {
				return lease, lease.Fence(), err
			}
			return nil, 0, err
		}
		r.call(where, s, call)
	case "lock":
		lease := r.lease(str(s["lease"]))
		requests := requestsOf(s["requests"])
		opts := options(s["options"])
		r.call(where, s, func() (*Lease, int64, error) {
			fence, err := lease.Lock(bg, requests, opts...)
			return nil, fence, err
		})
	case "await":
		tk := r.tasks[str(s["task"])]
		select {
		case <-tk.done:
		case <-time.After(r.taskTimeout()):
			fail("the task did not finish in %v", r.taskTimeout())
		}
		if tk.outcome != "" {
			r.checkOutcome(where, tk.outcome, s["expect"])
			return
		}
		r.checkResult(where, s["expect"], tk.lease, tk.fence, tk.err)
	case "pending":
		select {
		case <-r.tasks[str(s["task"])].done:
			fail("the task has finished")
		default:
		}
	case "release":
		err := r.lease(str(s["lease"])).Release(bg)
		if err != nil && s["may_fail"] != true {
			fail("release: %v", err)
		}
	case "sleep":
		time.Sleep(millisOf(s["ms"]))
	case "mark":
		r.marks[str(s["name"])] = time.Now()
	case "held":
		lease := r.lease(str(s["lease"]))
		if lease.IsLost() || lease.Err() != nil {
			fail("the lease is lost: %v", lease.Err())
		}
		if want, ok := s["locks"]; ok && fmt.Sprint(pairsOf(lease.Requests())) != fmt.Sprint(pairsOf(requestsOf(want))) {
			fail("the lease lists %v, want %v", pairsOf(lease.Requests()), pairsOf(requestsOf(want)))
		}
	case "lost":
		r.lost(where, s)
	case "loss_wait":
		lease := r.lease(str(s["lease"]))
		tk := &task{done: make(chan struct{})}
		r.tasks[str(s["task"])] = tk
		go func() {
			defer close(tk.done)
			work := lease.Context()
			<-work.Done()
			var lost *LeaseLostError
			if errors.As(context.Cause(work), &lost) {
				tk.outcome = "lost:" + lost.Reason.String()
			} else {
				tk.outcome = "released"
			}
		}()
	case "redis":
		on := str(s["on"])
		if on == "" {
			on = "master"
		}
		args := s["command"].([]any)
		reply, err := r.admin[on].Do(bg, args...).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			fail("%v: %v", args, err)
		}
		if want, ok := s["reply"]; ok && !sameReply(reply, want) {
			fail("%v answered %#v, want %#v", args, reply, want)
		}
	case "stop":
		r.servers[str(s["server"])].stop()
	case "server_locks":
		r.serverLocks(where, s)
	case "inspect":
		r.inspect(where, s)
	case "waiting":
		want := integer(s["count"])
		deadline := time.Now().Add(r.taskTimeout())
		for {
			n, err := r.admin["master"].Do(bg, "PATHLOCK.WAITERS", r.key).Slice()
			if err == nil && int64(len(n)) >= want {
				break
			}
			if time.Now().After(deadline) {
				fail("fewer than %d waiters after %v (%v)", want, r.taskTimeout(), err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	case "calls":
		info, err := r.admin["master"].Info(bg, "commandstats").Result()
		if err != nil {
			fail("%v", err)
		}
		got := int64(0)
		prefix := "cmdstat_" + strings.ToLower(str(s["command"])) + ":calls="
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(line)), prefix); ok {
				got, _ = strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			}
		}
		if got != integer(s["count"]) {
			fail("%s ran %d times, want %d", str(s["command"]), got, integer(s["count"]))
		}
	default:
		fail("unknown step")
	}
}

// call runs an acquire or a lock, now or as a task, and checks its outcome.
func (r *run) call(where string, s map[string]any, call func() (*Lease, int64, error)) {
	as := str(s["as"])
	if name := str(s["task"]); name != "" {
		tk := &task{done: make(chan struct{})}
		r.tasks[name] = tk
		go func() {
			defer close(tk.done)
			tk.lease, tk.fence, tk.err = call()
			if tk.lease != nil {
				r.setLease(as, tk.lease)
			}
		}()
		return
	}
	lease, fence, err := call()
	if lease != nil {
		if as != "" {
			r.setLease(as, lease)
		} else {
			defer lease.Release(bg)
		}
	}
	r.checkResult(where, s["expect"], lease, fence, err)
}

func (r *run) operation(locks *Locks, op string, args []any, opts []Option) (*Lease, error) {
	arg := func(i int) string { return str(args[i]) }
	switch op {
	case "upload":
		return locks.Upload(bg, arg(0), opts...)
	case "create":
		return locks.Create(bg, arg(0), opts...)
	case "read":
		return locks.Read(bg, arg(0), opts...)
	case "delete":
		return locks.Delete(bg, arg(0), opts...)
	case "rename":
		return locks.Rename(bg, arg(0), arg(1), opts...)
	case "move":
		return locks.Move(bg, arg(0), arg(1), opts...)
	case "copy":
		return locks.Copy(bg, arg(0), arg(1), opts...)
	case "purge":
		paths := []string{}
		for i := range args {
			paths = append(paths, arg(i))
		}
		return locks.Purge(bg, paths, opts...)
	case "lock":
		return locks.Lock(bg, requestsOf(args), opts...)
	}
	panic("unknown operation " + op)
}

// checkResult checks a call's outcome against an expectation: granted (with its fields) or an
// error of a kind.
func (r *run) checkResult(where string, expect any, lease *Lease, fence int64, err error) {
	t := r.t
	t.Helper()
	want, _ := expect.(map[string]any)
	if kind, ok := want["error"]; ok {
		if err == nil {
			t.Fatalf("%s: granted, want a %s error", where, kind)
		}
		r.checkError(where, str(kind), want, err)
		return
	}
	if err != nil {
		t.Fatalf("%s: %v, want a grant", where, err)
	}
	if locks, ok := want["locks"]; ok && fmt.Sprint(pairsOf(lease.Requests())) != fmt.Sprint(pairsOf(requestsOf(locks))) {
		t.Fatalf("%s: the lease lists %v, want %v", where, pairsOf(lease.Requests()), pairsOf(requestsOf(locks)))
	}
	if ttl, ok := want["ttl_ms"]; ok && millis(lease.TTL()) != integer(ttl) {
		t.Fatalf("%s: TTL %d ms, want %d", where, millis(lease.TTL()), integer(ttl))
	}
	if note, ok := want["note"]; ok && lease.Note() != str(note) {
		t.Fatalf("%s: note %q, want %#v", where, lease.Note(), note)
	}
	if above, ok := want["fence_above"]; ok {
		if other := r.lease(str(above)).Fence(); fence <= other {
			t.Fatalf("%s: fence %d, not above %s's %d", where, fence, above, other)
		}
	}
}

func (r *run) checkError(where, kind string, want map[string]any, err error) {
	t := r.t
	t.Helper()
	switch kind {
	case "invalid":
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: %v, want ErrInvalid", where, err)
		}
		for _, piece := range want["contains"].([]any) {
			if !strings.Contains(err.Error(), str(piece)) {
				t.Fatalf("%s: %q does not say %q", where, err, piece)
			}
		}
	case "busy":
		var busy *BusyError
		if !errors.As(err, &busy) || !errors.Is(err, ErrBusy) {
			t.Fatalf("%s: %v, want busy", where, err)
		}
		if blockers, ok := want["blockers"]; ok {
			r.checkHeld(where, busy.Blockers, blockers)
		}
	case "lost":
		var lost *LeaseLostError
		if !errors.As(err, &lost) || !errors.Is(err, ErrLeaseLost) || lost.Reason.String() != str(want["reason"]) {
			t.Fatalf("%s: %v, want lost %v", where, err, want["reason"])
		}
	case "not_replicated":
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("%s: %v, want not replicated", where, err)
		}
	case "wrong_type":
		if !errors.Is(err, ErrWrongType) {
			t.Fatalf("%s: %v, want wrong type", where, err)
		}
	default:
		t.Fatalf("%s: unknown error kind %q", where, kind)
	}
	if message, ok := want["message"]; ok && !messageMatches(str(message), err.Error()) {
		t.Fatalf("%s: message\n%s\nwant\n%s", where, err.Error(), message)
	}
}

// messageMatches compares a message with the contract's, where {n} stands for digits.
func messageMatches(want, got string) bool {
	pieces := strings.Split(want, "{n}")
	for i, p := range pieces {
		pieces[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`^` + strings.Join(pieces, `\d+`) + `$`).MatchString(got)
}

// checkHeld compares locks or blockers with the expected entries, in order, each on the
// fields it gives.
func (r *run) checkHeld(where string, got []HeldLock, want any) {
	t := r.t
	t.Helper()
	entries, _ := want.([]any)
	if len(got) != len(entries) {
		t.Fatalf("%s: %d entries %v, want %d %v", where, len(got), got, len(entries), entries)
	}
	for i, e := range entries {
		w := e.(map[string]any)
		g := got[i]
		for field, value := range w {
			ok := true
			switch field {
			case "path":
				ok = g.Path == str(value)
			case "mode":
				ok = string(g.Mode) == str(value)
			case "token":
				ok = g.Token == str(value)
			case "fence":
				ok = g.Fence == integer(value)
			case "note":
				ok = g.Note == str(value)
			case "ttl_ms_at_most":
				ok = g.TTL <= time.Duration(integer(value))*time.Millisecond && g.TTL > 0
			default:
				t.Fatalf("%s: unknown field %q", where, field)
			}
			if !ok {
				t.Fatalf("%s: entry %d %+v, want %s %v", where, i, g, field, value)
			}
		}
	}
}

func (r *run) checkOutcome(where, outcome string, expect any) {
	want, _ := expect.(map[string]any)
	wanted := "released"
	if reason, ok := want["lost"]; ok {
		wanted = "lost:" + str(reason)
	}
	if outcome != wanted {
		r.t.Fatalf("%s: the loss wait ended %s, want %s", where, outcome, wanted)
	}
}

// lost waits for the loss with Go's own wait, the lease's context, and checks it.
func (r *run) lost(where string, s map[string]any) {
	t := r.t
	t.Helper()
	lease := r.lease(str(s["lease"]))
	since := time.Now()
	if mark := str(s["since"]); mark != "" {
		since = r.marks[mark]
	}
	limit := r.taskTimeout()
	if within, ok := s["within_ms"]; ok {
		limit = millisOf(within) + r.slack()
	}
	select {
	case <-lease.Context().Done():
	case <-time.After(time.Until(since.Add(limit))):
		t.Fatalf("%s: not lost within %v", where, limit)
	}
	took := time.Since(since)
	if took > limit {
		t.Fatalf("%s: lost after %v, more than %v", where, took, limit)
	}
	if least, ok := s["at_least_ms"]; ok && took < millisOf(least) {
		t.Fatalf("%s: lost after %v, sooner than %v", where, took, millisOf(least))
	}
	var lost *LeaseLostError
	if !lease.IsLost() || !errors.As(lease.Err(), &lost) || !errors.As(context.Cause(lease.Context()), &lost) ||
		lost.Reason.String() != str(s["reason"]) {
		t.Fatalf("%s: %v (cause %v), want lost %v", where, lease.Err(), context.Cause(lease.Context()), s["reason"])
	}
	if message, ok := s["message"]; ok && lease.Err().Error() != str(message) {
		t.Fatalf("%s: message\n%s\nwant\n%s", where, lease.Err(), message)
	}
}

func (r *run) serverLocks(where string, s map[string]any) {
	t := r.t
	t.Helper()
	key := r.key
	if k := str(s["key"]); k != "" {
		key = k
	}
	on := str(s["on"])
	if on == "" {
		on = "master"
	}
	got := held(t, r.admin[on], key)
	want := []string{}
	for _, e := range s["locks"].([]any) {
		triple := e.([]any)
		want = append(want, str(triple[0])+" "+str(triple[1])+" "+str(triple[2]))
	}
	sort.Strings(want)
	if !sameLines(got, want) {
		t.Fatalf("%s: %s holds %v, want %v", where, key, got, want)
	}
}

func (r *run) inspect(where string, s map[string]any) {
	t := r.t
	t.Helper()
	locks := r.handles[str(s["handle"])]
	var (
		held    []HeldLock
		waiters []Waiter
		err     error
	)
	switch str(s["call"]) {
	case "locks":
		held, err = locks.Locks(bg, str(s["path"]), str(s["token"]))
	case "check":
		held, err = locks.Check(bg, requestsOf(s["requests"]), str(s["token"]))
	case "waiters":
		waiters, err = locks.Waiters(bg, str(s["path"]))
	default:
		t.Fatalf("%s: unknown call %v", where, s["call"])
	}
	if want, ok := s["expect"].(map[string]any); ok {
		if err == nil {
			t.Fatalf("%s: answered, want a %v error", where, want["error"])
		}
		r.checkError(where, str(want["error"]), want, err)
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if str(s["call"]) != "waiters" {
		r.checkHeld(where, held, s["expect"])
		return
	}
	entries, _ := s["expect"].([]any)
	if len(waiters) != len(entries) {
		t.Fatalf("%s: waiters %+v, want %v", where, waiters, entries)
	}
	for i, e := range entries {
		for field, value := range e.(map[string]any) {
			w := waiters[i]
			ok := true
			switch field {
			case "token":
				ok = w.Token == str(value)
			case "locks":
				ok = fmt.Sprint(pairsOf(w.Requests)) == fmt.Sprint(pairsOf(requestsOf(value)))
			case "note":
				ok = w.Note == str(value)
			default:
				t.Fatalf("%s: unknown field %q", where, field)
			}
			if !ok {
				t.Fatalf("%s: waiter %d %+v, want %s %v", where, i, w, field, value)
			}
		}
	}
}

// sameReply compares a reply with the contract's: an integer, a string, null, or a list.
func sameReply(got, want any) bool {
	switch w := want.(type) {
	case nil:
		return got == nil
	case json.Number:
		n, ok := replyInt(got)
		return ok && n == integer(w)
	case string:
		s, ok := replyText(got)
		return ok && s == w
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !sameReply(g[i], w[i]) {
				return false
			}
		}
		return true
	}
	return false
}
