package skrclient

import "github.com/seed-c8be168e/runtime-watcher/api/contract"

// MaxText is the most of a text a runtime controls (an SKR API server's
// error message, which the SKR's own admission webhooks write; a name read
// from the SKR) that a KCP component puts into a log line, an Event or a
// condition message: contract.MaxText, the one bound of every text from
// outside.
const MaxText = contract.MaxText

// Bounded is s cut to at most MaxText bytes, at a rune boundary, marked
// as cut (contract.Bounded).
func Bounded(s string) string { return contract.Bounded(s) }

// BoundedError is err whose message is cut by Bounded; errors.Is and
// errors.As still see err. Nil for nil.
func BoundedError(err error) error {
	if err == nil {
		return nil
	}
	return boundedError{err}
}

type boundedError struct{ err error }

func (e boundedError) Error() string { return Bounded(e.err.Error()) }
func (e boundedError) Unwrap() error { return e.err }
