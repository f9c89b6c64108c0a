package trust

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// TestUnknownStateHoldIsBounded: a runtime whose SKR state is unknown (an
// unreachable runtime, never pushed since the restart) keeps every CA of
// the runtime bundle in use — so a retired CA stays — for at most
// UnknownHold, with the metric and one Warning Event on its Kyma while it
// does (issue 33: it kept them for as long as the runtime stayed unknown).
func TestUnknownStateHoldIsBounded(t *testing.T) {
	ctx := context.Background()
	c := keeperClient(t)
	kyma := &unstructured.Unstructured{}
	kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	kyma.SetNamespace(keeperNS)
	kyma.SetName("gone-runtime")
	kyma.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: "gone.example.com"})
	if err := c.Create(ctx, kyma); err != nil {
		t.Fatal(err)
	}
	var cas []*x509.Certificate
	for _, n := range []string{"old", "current"} {
		ca, err := pki.NewCAValid(n, time.Now().Add(-time.Hour), time.Now().AddDate(1, 0, 0))
		if err != nil {
			t.Fatal(err)
		}
		cas = append(cas, ca.Cert)
	}
	now := time.Now()
	rec := events.NewFakeRecorder(10)
	k := &Keeper{Cache: c, KymaNamespace: keeperNS, UnknownHold: time.Hour, Now: func() time.Time { return now }, Recorder: rec}
	inUse := func() []bool {
		t.Helper()
		used, err := k.runtimeCAsInUse(ctx, cas)
		if err != nil {
			t.Fatal(err)
		}
		return used
	}
	for range 2 {
		if got := inUse(); !got[0] || !got[1] {
			t.Fatalf("within the hold: %v, want every CA in use", got)
		}
		now = now.Add(30 * time.Minute)
	}
	if v := testutil.ToFloat64(vsmetrics.TrustRuntimesStateUnknown); v != 1 {
		t.Errorf("trust_runtimes_state_unknown %v, want 1", v)
	}
	if len(rec.Events) != 1 {
		t.Fatalf("%d Events, want one", len(rec.Events))
	}
	if e := <-rec.Events; !strings.Contains(e, ReasonTrustStateUnknown) || !strings.Contains(e, "at most until") {
		t.Errorf("Event %q", e)
	}
	// Past the hold: the unknown runtime keeps no CA its state does not name.
	if got := inUse(); got[0] || got[1] {
		t.Errorf("past the hold: %v, want no CA kept for the unknown runtime", got)
	}
	if v := testutil.ToFloat64(vsmetrics.TrustRuntimesStateUnknown); v != 0 {
		t.Errorf("trust_runtimes_state_unknown %v past the hold, want 0", v)
	}
	if len(rec.Events) != 0 {
		t.Errorf("another Event past the hold: %v", <-rec.Events)
	}
}
