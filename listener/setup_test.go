package listener_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/seed-c8be168e/runtime-watcher/listener"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

const testManager = "test-manager"

// testServer is a Listener serving on 127.0.0.1 with its real Start.
type testServer struct {
	l      *listener.Listener
	base   string
	reg    *prometheus.Registry
	client *http.Client
	cancel context.CancelFunc
	done   chan error
}

// start runs a Listener for testManager on a fresh loopback port with its
// own metrics registry; the test's cleanup stops it and checks that Start
// returned nil.
func start(t *testing.T, opts ...listener.Option) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	base := []listener.Option{listener.WithNetListener(ln), listener.WithRegisterer(reg), listener.WithLogger(logr.Discard())}
	l, err := listener.New("", testManager, append(base, opts...)...)
	if err != nil {
		_ = ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{
		l: l, base: "http://" + ln.Addr().String(), reg: reg, cancel: cancel, done: make(chan error, 1),
		client: &http.Client{Timeout: 10 * time.Second},
	}
	go func() { s.done <- l.Start(ctx) }()
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	return s
}

// stop cancels Start's context and returns what Start returned.
func (s *testServer) stop() error {
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err // keep it for a second stop
		return err
	case <-time.After(20 * time.Second):
		return fmt.Errorf("Start did not return after its context was cancelled")
	}
}

// do sends a request and returns the response with its body read.
func (s *testServer) do(t *testing.T, method, path string, body io.Reader, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// nextEvent returns the next event on the channel, failing after a while.
func nextEvent(t *testing.T, ch <-chan event.GenericEvent) event.GenericEvent {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event on the channel")
	}
	return event.GenericEvent{}
}

// noEvent fails when an event is waiting on the channel. Events are put on
// the channel before the handler answers, so after a response there is
// nothing in flight to wait for.
func noEvent(t *testing.T, ch <-chan event.GenericEvent) {
	t.Helper()
	select {
	case e := <-ch:
		t.Fatalf("unexpected event %v", e.Object)
	default:
	}
}

// metricValue returns the value of the counter or gauge name with the given
// labels (besides manager) from reg, or -1 when there is no such series.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				}
			}
		}
	}
	return -1
}

func matches(m *dto.Metric, labels map[string]string) bool {
	got := map[string]string{}
	for _, lp := range m.GetLabel() {
		got[lp.GetName()] = lp.GetValue()
	}
	if got["manager"] != testManager {
		return false
	}
	for k, v := range labels {
		if got[k] != v {
			return false
		}
	}
	return true
}

const validBody = `{"watched":{"namespace":"kcp-system","name":"kyma-sample"},"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}`

func body(s string) io.Reader { return strings.NewReader(s) }

// unsized hides the length of a body so the client sends it chunked.
type unsized struct{ io.Reader }

func bigBody(n int) []byte {
	// valid JSON far over the limit: an ignored field padded with spaces.
	return []byte(`{"pad":"` + strings.Repeat("x", n) + `",` + validBody[1:])
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// envoyXFCC builds the x-forwarded-client-cert element Envoy sets for a
// client certificate with forwardClientCertDetails SANITIZE_SET and
// setCurrentClientCertDetails {subject, cert, dns}: Hash is the hex SHA-256
// of the DER, Cert the URL-encoded PEM (space as %20, newline as %0A, '+',
// '/' and '=' percent-encoded), Subject the RFC 2253 subject, one DNS pair
// per DNS SAN. Only Cert and Subject are quoted.
func envoyXFCC(leaf *pki.Leaf) string {
	sum := sha256.Sum256(leaf.Cert.Raw)
	cert := strings.ReplaceAll(url.QueryEscape(string(leaf.CertPEM)), "+", "%20")
	var b bytes.Buffer
	fmt.Fprintf(&b, `Hash=%x;Cert="%s";Subject="%s"`, sum, cert, leaf.Cert.Subject.String())
	for _, d := range leaf.Cert.DNSNames {
		b.WriteString(";DNS=" + d)
	}
	return b.String()
}
