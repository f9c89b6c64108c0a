package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
)

// BenchmarkWriteToOperator brings up the local system (from a warm build
// cache: binaries and API servers already built), reports how long it took
// until the first event reached the operator, then makes 1,000 spec changes,
// one at a time, and reports the latency from the start of each SKR write to
// the operator receiving its event. The changes rotate over 200 watched
// objects: the skr-webhook delivers one object at most once per
// --object-interval (1 s) to coalesce bursts, and this measures the path,
// not that throttle.
func BenchmarkWriteToOperator(b *testing.B) {
	for range b.N {
		benchWriteToOperator(b, 1000)
	}
}

func benchWriteToOperator(b *testing.B, changes int) {
	ctx := context.Background()
	began := time.Now()
	env, err := e2e.StartLocal(ctx, zap.New(zap.WriteTo(nopWriter{})))
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			b.Error(err)
		}
	}()
	n := sample(env.Names())
	if err := env.SKR().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.SKRNamespace}}); client.IgnoreAlreadyExists(err) != nil {
		b.Fatal(err)
	}
	const objects = 200
	kymas := make([]*unstructured.Unstructured, objects)
	for i := range kymas {
		kymas[i] = n.watchedKyma(fmt.Sprintf("bench-%d", i))
		if err := env.SKR().Create(ctx, kymas[i]); err != nil {
			b.Fatal(err)
		}
		if _, err := nextEvent(env.Events(), kymas[i].GetName(), 30*time.Second); err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			b.ReportMetric(time.Since(began).Seconds(), "s-to-first-event")
		}
	}

	latencies := make([]time.Duration, 0, changes)
	for i := range changes {
		kyma := kymas[i%objects]
		start := time.Now()
		patch := []byte(fmt.Sprintf(`{"spec":{"data":"%d"}}`, i))
		if err := env.SKR().Patch(ctx, kyma, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			b.Fatal(err)
		}
		ev, err := nextEvent(env.Events(), kyma.GetName(), 10*time.Second)
		if err != nil {
			b.Fatalf("change %d: %v", i, err)
		}
		latencies = append(latencies, ev.Time.Sub(start))
	}
	sum := loadgen.Summarize(latencies, 0)
	b.ReportMetric(loadgen.Millis(sum.P50), "p50-ms")
	b.ReportMetric(loadgen.Millis(sum.P99), "p99-ms")
	b.ReportMetric(loadgen.Millis(sum.Max), "max-ms")
	b.Logf("%d changes: p50 %s, p99 %s, max %s", changes, sum.P50, sum.P99, sum.Max)
}

// nextEvent waits for the operator's next event about the named object.
func nextEvent(ch <-chan e2e.Event, name string, timeout time.Duration) (e2e.Event, error) {
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-ch:
			if ev.Name == name {
				return ev, nil
			}
		case <-deadline:
			return e2e.Event{}, fmt.Errorf("no event for %s within %s", name, timeout)
		}
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
