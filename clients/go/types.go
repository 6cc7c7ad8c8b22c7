package pathlock

import (
	"fmt"
	"strconv"
	"time"
)

// Mode is the mode of one lock: Read is shared, Write is exclusive. Either covers the path's
// whole subtree.
type Mode string

const (
	Read  Mode = "READ"
	Write Mode = "WRITE"
)

// Request is one lock an operation asks for: a mode on a path. [Locks.Lock] takes any of them;
// the project root is written out as "/".
type Request struct {
	Mode Mode
	Path string
}

func (r Request) String() string {
	return string(r.Mode) + " " + r.Path
}

// HeldLock is a live lock as PATHLOCK.LOCKS and PATHLOCK.CHECK report it: who holds what, for
// how long, and why. Note is what its holder said it is doing ("move /A/C -> /B" by default),
// or "" when it gave no note.
type HeldLock struct {
	Path  string
	Mode  Mode
	Token string
	TTL   time.Duration
	Fence int64
	Note  string
}

// String is the contract's text of a blocker: "WRITE /A/C held by <token> (its note) for 59731
// ms more".
func (h HeldLock) String() string {
	s := fmt.Sprintf("%s %s held by %s", h.Mode, h.Path, h.Token)
	if h.Note != "" {
		s += " (" + h.Note + ")"
	}
	return s + fmt.Sprintf(" for %d ms more", h.TTL.Milliseconds())
}

// Waiter is a request queued by a waiting acquire, as PATHLOCK.WAITERS reports it.
type Waiter struct {
	Token    string
	Requests []Request
	Waited   time.Duration
	Left     time.Duration
	Note     string
}

// The replies are parsed from what go-redis's Do hands back, under RESP2 or RESP3: arrays as
// []any, bulk strings as string, integers as int64, a null as nil.

func replyText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

func replyInt(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

func protocolError(what string, reply any) error {
	return fmt.Errorf("pathlock: unexpected reply to %s: %#v", what, reply)
}

// parseHeld reads LOCKS' and CHECK's entries [path, mode, token, ttl-ms, fence, note].
func parseHeld(what string, reply any) ([]HeldLock, error) {
	entries, ok := reply.([]any)
	if !ok && reply != nil {
		return nil, protocolError(what, reply)
	}
	held := make([]HeldLock, 0, len(entries))
	for _, entry := range entries {
		fields, ok := entry.([]any)
		if !ok || len(fields) < 6 {
			return nil, protocolError(what, reply)
		}
		path, ok1 := replyText(fields[0])
		mode, ok2 := replyText(fields[1])
		token, ok3 := replyText(fields[2])
		ttl, ok4 := replyInt(fields[3])
		fence, ok5 := replyInt(fields[4])
		if !(ok1 && ok2 && ok3 && ok4 && ok5) {
			return nil, protocolError(what, reply)
		}
		note, _ := replyText(fields[5])
		held = append(held, HeldLock{
			Path: path, Mode: Mode(mode), Token: token,
			TTL: time.Duration(ttl) * time.Millisecond, Fence: fence, Note: note,
		})
	}
	return held, nil
}

// parseWaiters reads WAITERS' entries [token, [mode, path, ...], waited-ms, left-ms, note].
func parseWaiters(reply any) ([]Waiter, error) {
	entries, ok := reply.([]any)
	if !ok && reply != nil {
		return nil, protocolError("PATHLOCK.WAITERS", reply)
	}
	waiters := make([]Waiter, 0, len(entries))
	for _, entry := range entries {
		fields, ok := entry.([]any)
		if !ok || len(fields) < 5 {
			return nil, protocolError("PATHLOCK.WAITERS", reply)
		}
		token, ok1 := replyText(fields[0])
		pairs, ok2 := fields[1].([]any)
		waited, ok3 := replyInt(fields[2])
		left, ok4 := replyInt(fields[3])
		if !(ok1 && ok2 && ok3 && ok4) || len(pairs)%2 != 0 {
			return nil, protocolError("PATHLOCK.WAITERS", reply)
		}
		requests := make([]Request, 0, len(pairs)/2)
		for i := 0; i < len(pairs); i += 2 {
			mode, okMode := replyText(pairs[i])
			path, okPath := replyText(pairs[i+1])
			if !okMode || !okPath {
				return nil, protocolError("PATHLOCK.WAITERS", reply)
			}
			requests = append(requests, Request{Mode: Mode(mode), Path: path})
		}
		note, _ := replyText(fields[4])
		waiters = append(waiters, Waiter{
			Token: token, Requests: requests,
			Waited: time.Duration(waited) * time.Millisecond,
			Left:   time.Duration(left) * time.Millisecond, Note: note,
		})
	}
	return waiters, nil
}

// parseGrant reads ACQUIRE's [token, fence], which must carry the token asked for.
func parseGrant(reply any, token string) (int64, error) {
	fields, ok := reply.([]any)
	if ok && len(fields) == 2 {
		granted, okToken := replyText(fields[0])
		fence, okFence := replyInt(fields[1])
		if okToken && okFence && granted == token {
			return fence, nil
		}
	}
	return 0, protocolError("PATHLOCK.ACQUIRE", reply)
}
