package contract

import "unicode/utf8"

// MaxText is the most of a text from outside (a runtime's API server
// message, a name read from an SKR, a request path a client chose) that a
// KCP component puts into a log line, an Event or a condition message.
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
