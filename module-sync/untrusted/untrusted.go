// Package untrusted bounds text that a runtime (SKR) chose — names of its
// objects, messages of its API server and admission webhooks — before
// module-sync puts it in logs, events, conditions or item messages
// (docs/security.md): an SKR owner must not be able to fill the KCP's
// objects or logs.
package untrusted

import "unicode/utf8"

// MaxBytes bounds one piece of runtime-chosen text.
const MaxBytes = 1024

// Cut returns s cut to at most MaxBytes bytes (on a rune boundary), marked
// with "…" when it was cut.
func Cut(s string) string {
	if len(s) <= MaxBytes {
		return s
	}
	end := MaxBytes
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "…"
}
