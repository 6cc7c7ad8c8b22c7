package pathlock

import (
	"fmt"
	"time"
)

// The handle's defaults, as in every client of the contract (docs/clients.md).
const (
	DefaultTTL             = 30 * time.Second
	DefaultReplicasTimeout = time.Second
)

// An Option sets one setting of a handle ([New]) or of one call (an operation, [Lease.Lock]),
// which overrides the handle's. Options that cannot be right (a TTL under a millisecond, a
// negative wait) make the call that takes them fail with [ErrInvalid] before anything is sent.
type Option func(*settings)

// settings are the handle's defaults with a call's options applied.
type settings struct {
	ttl             time.Duration
	wait            time.Duration
	replicas        int
	replicasTimeout time.Duration
	note            *string
	// invalid is the first option that could not be right, reported by the call that took it.
	invalid error
}

func defaults() settings {
	return settings{ttl: DefaultTTL, replicasTimeout: DefaultReplicasTimeout}
}

// with applies options to a copy of s, and checks the result.
func (s settings) with(options []Option) (settings, error) {
	for _, option := range options {
		if option != nil {
			option(&s)
		}
	}
	if s.invalid != nil {
		return s, s.invalid
	}
	return s, nil
}

func (s *settings) refuse(format string, args ...any) {
	if s.invalid == nil {
		s.invalid = fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
}

// WithTTL sets how long the locks live without a renewal; the watchdog renews them every third
// of it. A fraction of a millisecond is rounded up to the next whole one; under 1 ms is refused.
// Default: 30 s.
func WithTTL(ttl time.Duration) Option {
	return func(s *settings) {
		if ttl < time.Millisecond {
			s.refuse("ttl must be at least 1 millisecond, not %v", ttl)
			return
		}
		s.ttl = ttl
	}
}

// WithWait sets how long an acquire waits on the server for busy locks, first come first
// served, before it fails with [BusyError]; 0 fails at once. A fraction of a millisecond is
// rounded up. Default: 0.
func WithWait(wait time.Duration) Option {
	return func(s *settings) {
		if wait < 0 {
			s.refuse("wait must be 0 milliseconds or more, not %v", wait)
			return
		}
		s.wait = wait
	}
}

// WithReplicas sets how many replicas must acknowledge a grant (WAIT) before it is handed out;
// with fewer, the grant is released and the call fails with [ErrNotReplicated]. Default: 0.
func WithReplicas(replicas int) Option {
	return func(s *settings) {
		if replicas < 0 {
			s.refuse("replicas must be 0 replicas or more, not %d", replicas)
			return
		}
		s.replicas = replicas
	}
}

// WithReplicasTimeout sets how long to wait for the replicas of [WithReplicas]; at least 1 ms
// (WAIT with 0 would block forever), a fraction of one rounded up. Default: 1 s.
func WithReplicasTimeout(timeout time.Duration) Option {
	return func(s *settings) {
		if timeout < time.Millisecond {
			s.refuse("replicas timeout must be at least 1 millisecond, not %v", timeout)
			return
		}
		s.replicasTimeout = timeout
	}
}

// WithNote sets the note kept with the locks and shown to whoever they block ("alice: move /A/C
// into /B"). A call's note replaces the handle's, which replaces the operation's own ("move /A/C
// -> /B"); an empty note sends none.
func WithNote(note string) Option {
	return func(s *settings) {
		s.note = &note
	}
}

// millis is d in whole milliseconds, a fraction of one rounded up (the contract's durations:
// every client rounds the same way, so 1.5 ms is 2 ms everywhere).
func millis(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return int64(ms)
}

// period is the time between renewals: a third of the TTL, so that two may fail before the
// lease ends.
func (s settings) period() time.Duration {
	return max(s.ttl/3, time.Millisecond)
}
