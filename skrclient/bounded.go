package skrclient

import "unicode/utf8"

// MaxText is the most of a text a runtime controls (an SKR API server's
// error message, which the SKR's own admission webhooks write; a name read
// from the SKR) that a KCP component puts into a log line, an Event or a
// condition message.
const MaxText = 1024

// cutMark ends a text cut by Bounded.
const cutMark = "…(cut)"

// Bounded is s cut to at most MaxText bytes, at a rune boundary, marked
// as cut.
func Bounded(s string) string {
	if len(s) <= MaxText {
		return s
	}
	n := MaxText - len(cutMark)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + cutMark
}

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
