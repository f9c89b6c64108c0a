package listener_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/listener"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// TestStatusCodes covers every answer of the default (runtime-id header)
// mode over a real HTTP server, and the requests-by-code metric.
func TestStatusCodes(t *testing.T) {
	s := start(t)
	path := contract.EventPath(testManager)
	id := hdr(contract.HeaderRuntimeID, "runtime-a")
	cases := []struct {
		name   string
		method string
		path   string
		hdr    http.Header
		body   io.Reader
		want   int
	}{
		{"valid event", http.MethodPost, path, id, body(validBody), http.StatusOK},
		{"kyma capitalised keys", http.MethodPost, path, id, body(`{"watched":{"Namespace":"ns","Name":"n"},"watchedGvk":{"Group":"","Version":"v1","Kind":"ConfigMap"}}`), http.StatusOK},
		{"cluster-scoped object, core group", http.MethodPost, path, id, body(`{"watched":{"name":"n"},"watchedGvk":{"version":"v1","kind":"Namespace"}}`), http.StatusOK},
		{"GET", http.MethodGet, path, id, nil, http.StatusMethodNotAllowed},
		{"PUT", http.MethodPut, path, id, body(validBody), http.StatusMethodNotAllowed},
		{"DELETE", http.MethodDelete, path, id, nil, http.StatusMethodNotAllowed},
		{"other manager", http.MethodPost, contract.EventPath("other-manager"), id, body(validBody), http.StatusNotFound},
		{"invalid manager", http.MethodPost, "/v2/Test_Manager/event", id, body(validBody), http.StatusNotFound},
		{"nested manager path", http.MethodPost, "/v2/a/test-manager/event", id, body(validBody), http.StatusNotFound},
		{"trailing slash", http.MethodPost, path + "/", id, body(validBody), http.StatusNotFound},
		{"v1 path", http.MethodPost, "/v1/" + testManager + "/event", id, body(validBody), http.StatusNotFound},
		{"root", http.MethodGet, "/", nil, nil, http.StatusNotFound},
		{"no runtime-id header", http.MethodPost, path, nil, body(validBody), http.StatusUnauthorized},
		{"empty runtime-id header", http.MethodPost, path, hdr(contract.HeaderRuntimeID, ""), body(validBody), http.StatusUnauthorized},
		{"invalid runtime-id header", http.MethodPost, path, hdr(contract.HeaderRuntimeID, "a/b"), body(validBody), http.StatusUnauthorized},
		{"overlong runtime-id header", http.MethodPost, path, hdr(contract.HeaderRuntimeID, strings.Repeat("a", 254)), body(validBody), http.StatusUnauthorized},
		{"two runtime-id headers", http.MethodPost, path, hdr(contract.HeaderRuntimeID, "runtime-a", contract.HeaderRuntimeID, "runtime-b"), body(validBody), http.StatusUnauthorized},
		{"body over 16 KiB", http.MethodPost, path, id, strings.NewReader(string(bigBody(contract.MaxEventBodyBytes))), http.StatusRequestEntityTooLarge},
		{"chunked body over 16 KiB", http.MethodPost, path, id, unsized{strings.NewReader(string(bigBody(contract.MaxEventBodyBytes)))}, http.StatusRequestEntityTooLarge},
		{"body of exactly 16 KiB", http.MethodPost, path, id, unsized{strings.NewReader(string(bigBody(contract.MaxEventBodyBytes - len(bigBody(0)))))}, http.StatusOK},
		{"malformed JSON", http.MethodPost, path, id, body(`{"watched":`), http.StatusBadRequest},
		{"not JSON", http.MethodPost, path, id, body(`hello`), http.StatusBadRequest},
		{"empty body", http.MethodPost, path, id, nil, http.StatusBadRequest},
		{"JSON null", http.MethodPost, path, id, body(`null`), http.StatusBadRequest},
		{"JSON array", http.MethodPost, path, id, body(`[]`), http.StatusBadRequest},
		{"trailing data", http.MethodPost, path, id, body(validBody + `{}`), http.StatusBadRequest},
		{"wrong type", http.MethodPost, path, id, body(`{"watched":{"name":1},"watchedGvk":{"version":"v1","kind":"K"}}`), http.StatusBadRequest},
		{"missing name", http.MethodPost, path, id, body(`{"watched":{"namespace":"ns"},"watchedGvk":{"version":"v1","kind":"K"}}`), http.StatusBadRequest},
		{"missing watched", http.MethodPost, path, id, body(`{"watchedGvk":{"version":"v1","kind":"K"}}`), http.StatusBadRequest},
		{"missing version", http.MethodPost, path, id, body(`{"watched":{"name":"n"},"watchedGvk":{"group":"g","kind":"K"}}`), http.StatusBadRequest},
		{"missing kind", http.MethodPost, path, id, body(`{"watched":{"name":"n"},"watchedGvk":{"group":"g","version":"v1"}}`), http.StatusBadRequest},
		{"missing gvk", http.MethodPost, path, id, body(`{"watched":{"name":"n"}}`), http.StatusBadRequest},
	}
	want := map[int]float64{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, text := s.do(t, tc.method, tc.path, tc.body, tc.hdr)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d (%q), want %d", resp.StatusCode, text, tc.want)
			}
			want[tc.want]++
			switch tc.want {
			case http.StatusOK:
				if _, ok := listener.EventFrom(nextEvent(t, s.l.Events()).Object); !ok {
					t.Fatal("event object is not a listener event")
				}
			case http.StatusMethodNotAllowed:
				if got := resp.Header.Get("Allow"); got != http.MethodPost {
					t.Errorf("Allow %q, want POST", got)
				}
			}
			noEvent(t, s.l.Events())
		})
	}
	for code, n := range want {
		if got := metricValue(t, s.reg, listener.MetricRequests, map[string]string{"code": strconv.Itoa(code)}); got != n {
			t.Errorf("%s{code=%d} = %v, want %v", listener.MetricRequests, code, got, n)
		}
	}
	if got := metricValue(t, s.reg, listener.MetricEventsDelivered, nil); got != want[http.StatusOK] {
		t.Errorf("%s = %v, want %v", listener.MetricEventsDelivered, got, want[http.StatusOK])
	}
}

// TestEventContent checks the object of an accepted event: Kyma listener v2
// content keys with plain values, the runtime ID from the header only.
func TestEventContent(t *testing.T) {
	s := start(t)
	resp, _ := s.do(t, http.MethodPost, s.l.Path(), body(validBody), hdr(contract.HeaderRuntimeID, "runtime-a"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	u, ok := nextEvent(t, s.l.Events()).Object.(*unstructured.Unstructured)
	if !ok {
		t.Fatal("object is not *unstructured.Unstructured")
	}
	want := map[string]any{
		"watched":     map[string]any{"namespace": "kcp-system", "name": "kyma-sample"},
		"watched-gvk": map[string]any{"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"},
		"runtime-id":  "runtime-a",
	}
	if !reflect.DeepEqual(u.Object, want) {
		t.Fatalf("content %v, want %v", u.Object, want)
	}
	// Kyma's consumers read the runtime ID like this.
	if id, _ := u.Object["runtime-id"].(string); id != "runtime-a" {
		t.Fatalf("runtime-id %q", id)
	}
	// The object must deep-copy (controller-runtime may copy it).
	if c := u.DeepCopy(); !reflect.DeepEqual(c.Object, want) {
		t.Fatalf("deep copy %v", c.Object)
	}
	ev, ok := listener.EventFrom(u)
	if !ok || ev.RuntimeID != "runtime-a" || ev.Watched.String() != "kcp-system/kyma-sample" ||
		ev.WatchedGVK.String() != "operator.kyma-project.io/v1beta2, Kind=Kyma" {
		t.Fatalf("EventFrom = %+v, %v", ev, ok)
	}
}

// TestBufferFull: a full buffer answers 503 with Retry-After at once (no
// wait) or after the bounded wait, and accepts again once drained.
func TestBufferFull(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait time.Duration
	}{{"no wait", 0}, {"bounded wait", 20 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, listener.WithBufferSize(1), listener.WithEnqueueTimeout(tc.wait), listener.WithRetryAfter(2*time.Second))
			id := hdr(contract.HeaderRuntimeID, "runtime-a")
			if resp, _ := s.do(t, http.MethodPost, s.l.Path(), body(validBody), id); resp.StatusCode != http.StatusOK {
				t.Fatalf("first: %d", resp.StatusCode)
			}
			if d := metricValue(t, s.reg, listener.MetricBufferDepth, nil); d != 1 {
				t.Errorf("buffer depth %v, want 1", d)
			}
			resp, _ := s.do(t, http.MethodPost, s.l.Path(), body(validBody), id)
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" {
				t.Fatalf("full: %d Retry-After %q, want 503 and 2", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			nextEvent(t, s.l.Events())
			if d := metricValue(t, s.reg, listener.MetricBufferDepth, nil); d != 0 {
				t.Errorf("buffer depth %v, want 0", d)
			}
			if resp, _ := s.do(t, http.MethodPost, s.l.Path(), body(validBody), id); resp.StatusCode != http.StatusOK {
				t.Fatalf("after drain: %d", resp.StatusCode)
			}
			if got := metricValue(t, s.reg, listener.MetricRequests, map[string]string{"code": "503"}); got != 1 {
				t.Errorf("503 count %v", got)
			}
		})
	}
}

// TestWaitingRequestDelivered: a request waiting for room is accepted when
// the consumer takes an event within the enqueue timeout.
func TestWaitingRequestDelivered(t *testing.T) {
	s := start(t, listener.WithBufferSize(1), listener.WithEnqueueTimeout(5*time.Second))
	id := hdr(contract.HeaderRuntimeID, "runtime-a")
	if resp, _ := s.do(t, http.MethodPost, s.l.Path(), body(validBody), id); resp.StatusCode != http.StatusOK {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	got := make(chan int, 1)
	go func() {
		resp, err := s.client.Do(mustRequest(s.base+s.l.Path(), validBody, id))
		if err != nil {
			got <- -1
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	nextEvent(t, s.l.Events())
	if code := <-got; code != http.StatusOK {
		t.Fatalf("second: %d", code)
	}
	nextEvent(t, s.l.Events())
}

func mustRequest(url, b string, h http.Header) *http.Request {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(b))
	if err != nil {
		panic(err)
	}
	req.Header = h.Clone()
	return req
}

// TestGracefulShutdown: cancelling Start's context lets the request in
// flight finish, then Start returns nil and the port is closed.
func TestGracefulShutdown(t *testing.T) {
	inVerify, release := make(chan struct{}), make(chan struct{})
	verify := func(*http.Request) (string, error) {
		close(inVerify)
		<-release
		return "runtime-a", nil
	}
	s := start(t, listener.WithVerifyFunc(verify), listener.WithVerifyTimeout(30*time.Second))
	got := make(chan int, 1)
	go func() {
		resp, err := s.client.Do(mustRequest(s.base+s.l.Path(), validBody, nil))
		if err != nil {
			got <- -1
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	<-inVerify
	stopped := make(chan error, 1)
	go func() { stopped <- s.stop() }()
	close(release)
	if code := <-got; code != http.StatusOK {
		t.Fatalf("in-flight request: %d, want 200", code)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Start: %v", err)
	}
	nextEvent(t, s.l.Events())
	if err := s.l.ReadyCheck(nil); err == nil {
		t.Error("ReadyCheck passes after shutdown")
	}
	if _, err := http.Post(s.base+s.l.Path(), "application/json", body(validBody)); err == nil {
		t.Error("server still answers after shutdown")
	}
}

// TestStartListensOnAddress uses New's address (port 0), Addr and
// ReadyCheck, and refuses a second Start.
func TestStartListensOnAddress(t *testing.T) {
	l, err := listener.New("127.0.0.1:0", testManager, listener.WithRegisterer(nil))
	if err != nil {
		t.Fatal(err)
	}
	if l.Addr() != "" || l.ReadyCheck(nil) == nil {
		t.Fatal("listener claims an address or readiness before Start")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Start(ctx) }()
	g := gomega.NewWithT(t)
	g.Eventually(func() error { return l.ReadyCheck(nil) }, 10*time.Second, 5*time.Millisecond).Should(gomega.Succeed())
	g.Expect(l.Addr()).To(gomega.HavePrefix("127.0.0.1:"))
	req := mustRequest("http://"+l.Addr()+l.Path(), validBody, hdr(contract.HeaderRuntimeID, "runtime-a"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if err := l.Start(ctx); err == nil {
		t.Error("second Start succeeded")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
}

// TestStartFailsOnBusyAddress: Start reports a port it cannot bind.
func TestStartFailsOnBusyAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	l, err := listener.New(busy.Addr().String(), testManager, listener.WithRegisterer(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err == nil {
		t.Fatal("Start succeeded on a busy address")
	}
}

// TestTLS serves TLS from certificate files and from a tls.Config.
func TestTLS(t *testing.T) {
	ca, err := pki.NewCA("listener-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "listener", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	_, certFile, keyFile, err := leaf.WriteFiles(t.TempDir(), ca)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := leaf.TLS()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opt  listener.Option
	}{
		{"files", listener.WithTLSFiles(certFile, keyFile)},
		{"config", listener.WithTLSConfig(&tls.Config{Certificates: []tls.Certificate{kp}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, tc.opt)
			s.base = strings.Replace(s.base, "http://", "https://", 1)
			s.client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}
			resp, text := s.do(t, http.MethodPost, s.l.Path(), body(validBody), hdr(contract.HeaderRuntimeID, "runtime-a"))
			if resp.StatusCode != http.StatusOK || resp.TLS == nil {
				t.Fatalf("status %d (%q), TLS %v", resp.StatusCode, text, resp.TLS != nil)
			}
			nextEvent(t, s.l.Events())
		})
	}
}

// TestNewRejectsBadConfig: constructor and option validation.
func TestNewRejectsBadConfig(t *testing.T) {
	reg := prometheus.NewRegistry()
	cases := []struct {
		name    string
		addr    string
		manager string
		opts    []listener.Option
	}{
		{"invalid manager", ":0", "Bad_Name", nil},
		{"empty manager", ":0", "", nil},
		{"empty address", "", testManager, nil},
		{"zero buffer", ":0", testManager, []listener.Option{listener.WithBufferSize(0)}},
		{"long enqueue wait", ":0", testManager, []listener.Option{listener.WithEnqueueTimeout(time.Minute)}},
		{"TLS config without certificate", ":0", testManager, []listener.Option{listener.WithTLSConfig(&tls.Config{})}},
		{"TLS files and config", ":0", testManager, []listener.Option{listener.WithTLSFiles("a", "b"), listener.WithTLSConfig(&tls.Config{Certificates: []tls.Certificate{{}}})}},
		{"nil verify func", ":0", testManager, []listener.Option{listener.WithVerifyFunc(nil)}},
		{"nil SAN verifier", ":0", testManager, []listener.Option{listener.WithSANPinning(nil)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]listener.Option{listener.WithRegisterer(reg)}, tc.opts...)
			if _, err := listener.New(tc.addr, tc.manager, opts...); err == nil {
				t.Fatal("New succeeded")
			}
		})
	}
	if _, err := listener.New(":0", testManager, listener.WithRegisterer(reg)); err != nil {
		t.Fatal(err)
	}
	if _, err := listener.New(":0", testManager, listener.WithRegisterer(reg)); err == nil {
		t.Fatal("a second listener for the same manager registered its metrics again")
	}
}
