package untrusted_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/seed-c8be168e/runtime-watcher/module-sync/untrusted"
)

func TestCut(t *testing.T) {
	if got := untrusted.Cut("short"); got != "short" {
		t.Errorf("short text changed: %q", got)
	}
	long := strings.Repeat("ä", untrusted.MaxBytes) // 2 bytes each
	got := untrusted.Cut(long)
	if len(got) > untrusted.MaxBytes+len("…") || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Errorf("cut to %d bytes, valid UTF-8 %v, suffix %q", len(got), utf8.ValidString(got), got[len(got)-4:])
	}
}

func FuzzCut(f *testing.F) {
	f.Add("x")
	f.Add(strings.Repeat("€", 700))
	f.Fuzz(func(t *testing.T, s string) {
		got := untrusted.Cut(s)
		if len(got) > untrusted.MaxBytes+len("…") {
			t.Errorf("%d bytes", len(got))
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Error("valid UTF-8 became invalid")
		}
	})
}
