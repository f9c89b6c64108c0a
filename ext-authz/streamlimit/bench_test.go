package streamlimit_test

import (
	"context"
	"os"
	"runtime"
	"testing"

	"google.golang.org/grpc/tap"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/streamlimit"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
)

// BenchmarkTapPerStream is what a stream's slot costs: Tap (as ext-authz
// wires it, inside WithTimeout, with a client deadline shorter than the
// check timeout, as Envoy sends) on a context with a deadline like
// grpc-go's stream context, then the stream's end, with ext-authz's
// default of 256 slots (so slots are taken back as they are in use).
// cpu-ns/op is the process's CPU per stream, including any goroutine
// started to give a slot back, which ns/op would not see; "context-only"
// is the stream context alone (what every gRPC server pays), the
// difference is the tap's.
func BenchmarkTapPerStream(b *testing.B) {
	b.Run("context-only", func(b *testing.B) { benchTap(b, false) })
	b.Run("tap", func(b *testing.B) { benchTap(b, true) })
}

func benchTap(b *testing.B, withTap bool) {
	l, err := streamlimit.New(256, nil)
	if err != nil {
		b.Fatal(err)
	}
	handle := streamlimit.WithTimeout(2e9, l.Tap)
	info := &tap.Info{FullMethodName: "/envoy.service.auth.v3.Authorization/Check"}
	b.ReportAllocs()
	cpu0, err := loadgen.ProcessCPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 5e8)
		if withTap {
			if _, err := handle(ctx, info); err != nil {
				b.Fatal(err)
			}
		}
		cancel()
	}
	for l.InFlight() != 0 { // every slot given back
		runtime.Gosched()
	}
	cpu1, _ := loadgen.ProcessCPU(os.Getpid())
	b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
}
