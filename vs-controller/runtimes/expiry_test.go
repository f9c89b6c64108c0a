package runtimes

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// TestExpiringSoonIsLoggedAndReported: a runtime certificate that expires
// within trust.ExpiringSoon gets a log line and a Warning Event
// CertificateExpiringSoon on its Kyma at every pass; one that does not gets
// neither.
func TestExpiringSoonIsLoggedAndReported(t *testing.T) {
	ca, err := pki.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	ctx := log.IntoContext(context.Background(), funcr.New(func(prefix, args string) {
		lines = append(lines, args)
	}, funcr.Options{}))
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Recorder: rec}
	kyma := NewKyma()
	kyma.SetNamespace("kcp-system")
	kyma.SetName("kyma-a")
	events := func() []string {
		var out []string
		for {
			select {
			case e := <-rec.Events:
				out = append(out, e)
			default:
				return out
			}
		}
	}

	for _, tc := range []struct {
		left time.Duration
		soon bool
	}{{trust.ExpiringSoon - time.Hour, true}, {time.Hour, true}, {trust.ExpiringSoon + time.Hour, false}, {60 * 24 * time.Hour, false}} {
		lines = nil
		leaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-a", NotAfter: time.Now().Add(tc.left)})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := r.trustFor(ctx, kyma, "runtime-a", &certificates.TLS{CA: ca.PEM, Cert: leaf.CertPEM}); !ok {
			t.Fatalf("%s left: no trust without a trust keeper", tc.left)
		}
		evs := events()
		if !tc.soon {
			if len(evs) != 0 || len(lines) != 0 {
				t.Errorf("%s left: events %q, log %q; want none", tc.left, evs, lines)
			}
			continue
		}
		want := "Warning " + ReasonExpiringSoon + " runtime certificate expires at " + leaf.Cert.NotAfter.UTC().Format(time.RFC3339)
		if len(evs) != 1 || evs[0] != want {
			t.Errorf("%s left: events %q, want [%q]", tc.left, evs, want)
		}
		if len(lines) != 1 || !strings.Contains(lines[0], `"msg"="runtime certificate expires soon"`) ||
			!strings.Contains(lines[0], `"runtime"="runtime-a"`) || !strings.Contains(lines[0], `"notAfter"=`) {
			t.Errorf("%s left: log %q, want one line \"runtime certificate expires soon\" with the runtime and notAfter", tc.left, lines)
		}
	}
}
