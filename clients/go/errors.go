package pathlock

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The errors a call can be tested for with errors.Is. Each but ErrReleased and ErrInvalid comes
// as a typed error that errors.As reads: [*BusyError], [*LeaseLostError], [*NotReplicatedError],
// [*WrongTypeError].
var (
	// ErrBusy: the locks are held by someone else, an earlier waiter goes first, or the wait ran
	// out. The [*BusyError] says who is in the way.
	ErrBusy = errors.New("pathlock: busy")
	// ErrLeaseLost: the lease is gone; work under it must stop and its fence must not be used
	// again. The [*LeaseLostError] says why.
	ErrLeaseLost = errors.New("pathlock: lease lost")
	// ErrReleased is the cause of a released lease's context ([Lease.Context]), and what
	// [Lease.Lock] answers once the lease is released: not a loss.
	ErrReleased = errors.New("pathlock: lease released")
	// ErrNotReplicated: fewer replicas than asked for acknowledged the grant in time; it was
	// released.
	ErrNotReplicated = errors.New("pathlock: not replicated")
	// ErrWrongType: the key holds another type of value than a pathlock project.
	ErrWrongType = errors.New("pathlock: wrong type")
	// ErrInvalid: a request that cannot be right, refused before anything is sent (an empty
	// path, the project root given to an operation helper, a TTL under 1 ms, ...), or by the
	// server's limits (a path too long or too deep, a TTL above pathlock.max-ttl, ...), whose
	// error errors.As then finds inside.
	ErrInvalid = errors.New("pathlock: invalid argument")
)

// BusyError is returned when an operation's locks are busy. Blockers are the live locks in the
// way, as PATHLOCK.CHECK saw them just after the refusal, with their notes. They are empty when
// only an earlier waiting request was in the way, or the holders let go in between: the message
// then says so, and trying again may succeed. They are empty too when the CHECK itself failed:
// then CheckErr is its error and the message says that the locks in the way could not be read.
type BusyError struct {
	Key      string
	Requests []Request
	Blockers []HeldLock
	// CheckErr is the error of the PATHLOCK.CHECK that was to name the blockers (a connection
	// error, a NOPERM of an ACL user without +pathlock.check, a closed client), nil when it
	// answered. Unwrap returns it, so that errors.Is and errors.As find it (redis.ErrClosed, a
	// redis.Error) while errors.Is(err, ErrBusy) still holds: the acquire was refused either way.
	CheckErr error
}

// Error is the contract's text (clients/contract/contract.json), the same in every client:
// "busy: WRITE /A/C/D/new.txt in "proj:42": WRITE /A/C held by <token> (alice: move /A/C into
// /B) for 59731 ms more".
func (e *BusyError) Error() string {
	wanted := make([]string, len(e.Requests))
	for i, r := range e.Requests {
		wanted[i] = r.String()
	}
	head := "busy: " + strings.Join(wanted, ", ") + " in \"" + escapeKey(e.Key) + "\": "
	if len(e.Blockers) == 0 && e.CheckErr != nil {
		// Never "nothing holds these paths": the client does not know who does.
		return head + "the locks in the way could not be read (" + e.CheckErr.Error() + "); try again"
	}
	if len(e.Blockers) == 0 {
		return head + "nothing holds these paths now: the holders let go in between, or an " +
			"earlier waiting request goes first; try again"
	}
	held := make([]string, len(e.Blockers))
	for i, b := range e.Blockers {
		held[i] = b.String()
	}
	return head + strings.Join(held, "; ")
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Unwrap answers CheckErr: nil when the blockers could be read.
func (e *BusyError) Unwrap() error { return e.CheckErr }

// LostReason tells why a lease was lost.
type LostReason int

const (
	// Gone: a renewal answered 0, or fewer locks than the lease held: its locks expired, were
	// released with its token, or the key was deleted.
	Gone LostReason = iota + 1
	// Expired: no renewal succeeded before its deadline, counted on the client's own clock (the
	// server was paused, stopped or out of reach), or none can: a renewal answered
	// redis.ErrClosed, since the application closed its client, and the loss is reported then.
	Expired
	// Replaced: the key now holds another type of value, and the locks went with the old one.
	Replaced
)

// String is the reason's name: "gone", "expired" or "replaced", as in the other clients.
func (r LostReason) String() string {
	switch r {
	case Gone:
		return "gone"
	case Expired:
		return "expired"
	case Replaced:
		return "replaced"
	}
	return fmt.Sprintf("LostReason(%d)", int(r))
}

func (r LostReason) explained() string {
	switch r {
	case Gone:
		return "a renewal answered 0, or fewer locks than the lease held: its locks expired, " +
			"were released with its token, or the key was deleted"
	case Expired:
		return "no renewal succeeded before its deadline, counted on the client's own clock"
	case Replaced:
		return "the key now holds another type of value, and the locks went with the old one"
	}
	return r.String()
}

// LeaseLostError says which lease was lost and why; errors.Is(err, ErrLeaseLost) is true.
type LeaseLostError struct {
	Key    string
	Token  string
	Reason LostReason
}

// Error is the contract's text: "lease <token> on "proj:42" is lost: <what the reason means>".
func (e *LeaseLostError) Error() string {
	return "lease " + e.Token + " on \"" + escapeKey(e.Key) + "\" is lost: " + e.Reason.explained()
}

// Is makes errors.Is(err, ErrLeaseLost) true.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// NotReplicatedError is returned when fewer replicas than asked for acknowledged a grant in
// time; the grant was released. errors.Is(err, ErrNotReplicated) is true.
type NotReplicatedError struct {
	Acknowledged int
	Wanted       int
}

func (e *NotReplicatedError) Error() string {
	return fmt.Sprintf("grant acknowledged by %d of the %d replicas asked for; released", e.Acknowledged, e.Wanted)
}

// Is makes errors.Is(err, ErrNotReplicated) true.
func (e *NotReplicatedError) Is(target error) bool { return target == ErrNotReplicated }

// WrongTypeError is returned when the key holds another type of value than a pathlock project
// (the server's WRONGTYPE, which Unwrap returns). errors.Is(err, ErrWrongType) is true.
type WrongTypeError struct {
	Key string
	Err error
}

// Error is the contract's text, which names the key.
func (e *WrongTypeError) Error() string {
	return "key \"" + escapeKey(e.Key) + "\" is not a pathlock project: it holds another type of value (check the key name)"
}

// Is makes errors.Is(err, ErrWrongType) true.
func (e *WrongTypeError) Is(target error) bool { return target == ErrWrongType }

// Unwrap answers the server's error.
func (e *WrongTypeError) Unwrap() error { return e.Err }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// escapeKey writes a key as the contract's messages show it: '"' and a backslash escaped by a
// backslash,
// and any other byte under 0x20, 0x7f, or not UTF-8, as \xHH, so that a key's bytes cannot
// forge or garble a message.
func escapeKey(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); {
		r, size := utf8.DecodeRuneInString(key[i:])
		switch {
		case r == utf8.RuneError && size <= 1, r < 0x20, r == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", key[i])
			i++
			continue
		case r == '"' || r == '\\':
			b.WriteByte('\\')
		}
		b.WriteString(key[i : i+size])
		i += size
	}
	return b.String()
}
