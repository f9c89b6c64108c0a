package framelimit_test

import (
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/framelimit"
)

// FuzzParser feeds any byte stream, whole and in chunks of every size from
// split: the parser never panics (so never indexes beyond what it got), and
// how the bytes are cut never changes its verdict or its tallies.
func FuzzParser(f *testing.F) {
	f.Add([]byte(framelimit.ClientPreface), uint8(1))
	f.Add(append([]byte(framelimit.ClientPreface), frame(0, 0, 1, 1)...), uint8(3))
	f.Add(append(append([]byte(framelimit.ClientPreface), frame(1, 5, 1, 20)...), frame(0, 1, 1, 100)...), uint8(7))
	f.Add(append([]byte(framelimit.ClientPreface), frame(0, 8, 1, 16384)...), uint8(9))
	f.Add(append([]byte(framelimit.ClientPreface), frame(3, 0, 1, 4)...), uint8(0))
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		var whole, chunked framelimit.Parser
		whole.Feed(in)
		k := int(split)%64 + 1
		for i := 0; i < len(in); i += k {
			chunked.Feed(in[i:min(i+k, len(in))])
		}
		if whole.Reason() != chunked.Reason() || whole.Streams() != chunked.Streams() {
			t.Fatalf("whole: %q %d streams; in chunks of %d: %q %d", whole.Reason(), whole.Streams(), k, chunked.Reason(), chunked.Streams())
		}
		if whole.Streams() > framelimit.MaxOpenStreams {
			t.Fatalf("%d tallies", whole.Streams())
		}
	})
}
