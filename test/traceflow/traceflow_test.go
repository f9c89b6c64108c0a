package traceflow_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/go-logr/logr/testr"
	"github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/listener"
	"github.com/seed-c8be168e/runtime-watcher/skr-webhook/admission"
	"github.com/seed-c8be168e/runtime-watcher/skr-webhook/delivery"
	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

type lookup map[string]identity.Runtime

func (l lookup) LookupRuntime(_ context.Context, id string) (identity.Runtime, bool, error) {
	rt, ok := l[id]
	return rt, ok, nil
}

type staticCert struct{ c tls.Certificate }

func (s staticCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &s.c, nil }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	return l
}

// TestOneWriteToOperator: an admission review of one SKR write becomes an
// event whose send span, ext-authz's Check span, the listener's span and the
// operator's span share one trace, each the child of the one before (Envoy
// forwards the traceparent).
func TestOneWriteToOperator(t *testing.T) {
	// Envoy from bin/ (make envoy-assets): not part of make test-unit.
	testenv.SkipIfShort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))

	ca, err := pki.NewCA("traceflow-ca")
	must(t, err)
	gwLeaf, err := ca.Issue(pki.LeafOptions{CommonName: "gateway", DNSNames: []string{"localhost"}})
	must(t, err)
	skrLeaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com"}})
	must(t, err)

	// ext-authz, traced.
	authzLn := listen(t)
	gs := grpc.NewServer()
	authv3.RegisterAuthorizationServer(gs, server.New(&identity.Verifier{Lookup: lookup{"runtime-1": {ID: "runtime-1", SKRDomain: "skr1.example.com"}}},
		func() bool { return true }, nil, server.Config{Tracer: tp.Tracer("ext-authz")}))
	go func() { _ = gs.Serve(authzLn) }()
	defer gs.Stop()

	// The operator's listener, traced.
	lisLn := listen(t)
	lis, err := listener.New(lisLn.Addr().String(), "lifecycle-manager", listener.WithNetListener(lisLn),
		listener.WithTracerProvider(tp), listener.WithRegisterer(prometheus.NewRegistry()), listener.WithLogger(testr.New(t)))
	must(t, err)
	go func() { _ = lis.Start(ctx) }()

	// The gateway: Envoy with the listener, route and clusters istiod
	// generates for the kcp-gateway: ext_authz, then the manager's path to
	// the listener.
	_, gwPort := envoy.StartEdge(t, envoy.NewEdge(authzLn.Addr().String(), lisLn.Addr().String(), gwLeaf, ca))

	// The skr-webhook: admission handler, dispatcher, traced mTLS sender (TLS 1.3 only).
	dir := t.TempDir()
	caFile, _, _, err := skrLeaf.WriteFiles(dir, ca)
	must(t, err)
	skrTLS, err := skrLeaf.TLS()
	must(t, err)
	kcp, err := delivery.NewClient(delivery.ClientConfig{CAFile: caFile, Certs: staticCert{skrTLS}, MinTLSVersion: tls.VersionTLS13}, testr.New(t))
	must(t, err)
	sender, err := delivery.NewHTTPSender("localhost:"+strconv.Itoa(gwPort), kcp.HTTP)
	must(t, err)
	sender.WithTracer(tp.Tracer("skr-webhook"))
	d := delivery.New(delivery.Config{ObjectInterval: -1}, sender, testr.New(t))
	d.Start()
	defer func() { _ = d.Shutdown(context.Background()) }()
	webhook := admission.NewHandler(d, testr.New(t), nil)

	// One SKR write: the API server's admission review of a Kyma's spec change.
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"42",
	  "kind":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"},
	  "operation":"UPDATE","namespace":"kyma-system","name":"default",
	  "oldObject":{"metadata":{"name":"default","namespace":"kyma-system"},"spec":{"channel":"regular"}},
	  "object":{"metadata":{"name":"default","namespace":"kyma-system"},"spec":{"channel":"fast"}}}}`
	w := httptest.NewRecorder()
	webhook.ServeHTTP(w, httptest.NewRequest(http.MethodPost, contract.ValidatePath("lifecycle-manager"), strings.NewReader(review)))
	if w.Code != http.StatusOK {
		t.Fatalf("admission answered %d: %s", w.Code, w.Body)
	}

	// The operator receives the event and continues its trace.
	// (The dispatcher's startup resync comes first.)
	var ev listener.Event
	for ev.Watched.Name == "" {
		select {
		case ge := <-lis.Events():
			var ok bool
			if ev, ok = listener.EventFrom(ge.Object); !ok {
				t.Fatalf("not an event object: %v", ge.Object)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no event within 30s")
		}
	}
	if ev.RuntimeID != "runtime-1" || ev.Watched.Name != "default" {
		t.Fatalf("event %+v", ev)
	}
	_, reconcile := tp.Tracer("operator").Start(listener.ContextWithEvent(ctx, ev), "operator reconcile")
	reconcile.End()

	// The SKR's trace ends at the sender: the KCP starts its own traces,
	// linked to the sender's span (issue 33: a traceparent from a runtime
	// is a link, never a parent). The send span ends once the answer is back
	// at the sender, which may be after the operator got the event.
	// The event's spans: the listener's (the event's span context), the
	// sender's (its link), the Check linked to the same sender span.
	if !ev.Link.IsValid() || !ev.SpanContext.IsValid() {
		t.Fatalf("event span context %v, link %v: want both", ev.SpanContext, ev.Link)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	gomega.NewWithT(t).Eventually(func() []string {
		for _, s := range rec.Ended() {
			linked := len(s.Links()) == 1 && s.Links()[0].SpanContext.SpanID() == ev.Link.SpanID()
			switch {
			case s.SpanContext().SpanID() == ev.Link.SpanID(), s.SpanContext().SpanID() == ev.SpanContext.SpanID(),
				s.Name() == "ext-authz Check" && linked, s.Name() == "operator reconcile":
				byName[s.Name()] = s
			}
		}
		return keys(byName)
	}).WithTimeout(10 * time.Second).Should(gomega.ConsistOf("skr-webhook send event", "ext-authz Check", "listener receive event", "operator reconcile"))
	send, check, receive, op := byName["skr-webhook send event"], byName["ext-authz Check"], byName["listener receive event"], byName["operator reconcile"]
	for _, step := range []struct {
		name string
		span sdktrace.ReadOnlySpan
	}{{"ext-authz Check", check}, {"listener receive", receive}} {
		if step.span.SpanContext().TraceID() == send.SpanContext().TraceID() || step.span.Parent().IsValid() {
			t.Errorf("%s: span %v parent %v, want the root of a new trace", step.name, step.span.SpanContext(), step.span.Parent())
		}
		if l := step.span.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != send.SpanContext().SpanID() ||
			l[0].SpanContext.TraceID() != send.SpanContext().TraceID() {
			t.Errorf("%s: links %v, want the sender's span %v", step.name, l, send.SpanContext())
		}
	}
	if op.SpanContext().TraceID() != receive.SpanContext().TraceID() || op.Parent().SpanID() != receive.SpanContext().SpanID() {
		t.Errorf("operator reconcile: span %v parent %v, want a child of the listener's span %v", op.SpanContext(), op.Parent(), receive.SpanContext())
	}
	if ev.SpanContext.SpanID() != receive.SpanContext().SpanID() {
		t.Errorf("event span context %v, want the listener's span %v", ev.SpanContext, receive.SpanContext())
	}
	if ev.Link.SpanID() != send.SpanContext().SpanID() || len(listener.Links(ev)) != 1 {
		t.Errorf("event link %v, want the sender's span %v", ev.Link, send.SpanContext())
	}
}

func keys(m map[string]sdktrace.ReadOnlySpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
