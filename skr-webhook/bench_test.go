package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/skr-webhook/admission"
	"github.com/seed-c8be168e/runtime-watcher/test/kcpstub"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// BenchmarkAdmissionLatency measures the real HTTPS admission endpoint over
// loopback (TLS, HTTP/2, the whole wired app with its delivery) while the
// KCP is healthy, refusing connections and blackholed. Every request is an
// UPDATE with a spec change of one of 5,000 objects, so each one emits an
// event. Goal: loadgen.WebhookAdmissionP99 in all three.
func BenchmarkAdmissionLatency(b *testing.B) {
	for _, mode := range []struct {
		name string
		m    kcpstub.Mode
	}{{"healthy", kcpstub.Serving}, {"refusing", kcpstub.Refusing}, {"blackholed", kcpstub.Blackholed}} {
		b.Run(mode.name, func(b *testing.B) {
			env := startBenchApp(b, mode.m)
			bodies := make([][]byte, 5000)
			for i := range bodies {
				bodies[i] = updateReview(i)
			}
			// A fixed number of requests per iteration, so `-benchtime 1x`
			// (make bench) still yields percentiles.
			const perIteration = 2000
			b.ResetTimer()
			began := time.Now()
			lat, err := loadgen.Closed(b.N*perIteration, 1, func(i int) error {
				return post(env.client, env.url, bodies[i%len(bodies)])
			})
			elapsed := time.Since(began)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			s := loadgen.Summarize(lat, elapsed)
			b.ReportMetric(loadgen.Millis(s.P50), "p50-ms")
			b.ReportMetric(loadgen.Millis(s.P99), "p99-ms")
			b.ReportMetric(loadgen.Millis(s.Max), "max-ms")
			b.ReportMetric(s.RPS, "requests/s")
			g := loadgen.WebhookAdmissionP99
			b.Logf("KCP %s: p99 %.2f ms (goal %s: %s)", mode.name, loadgen.Millis(s.P99), g, g.Verdict(loadgen.Millis(s.P99)))
		})
	}
}

// post posts one review; the answer must be 200.
func post(c *http.Client, url string, body []byte) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return loadgen.Send(c, req)
}

type benchApp struct {
	url    string
	client *http.Client
	app    *app
	stub   *kcpstub.Stub
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// stop shuts the app down (once) and returns run's error.
func (e *benchApp) stop() error {
	e.once.Do(func() {
		e.cancel()
		e.err = <-e.done
	})
	return e.err
}

// startBenchApp runs the wired app in-process against a KCP stub in the
// given mode and returns an HTTPS client trusting its serving certificate.
// extra are further command-line flags.
func startBenchApp(b testing.TB, mode kcpstub.Mode, extra ...string) *benchApp {
	b.Helper()
	ca, err := pki.NewCA("bench-ca")
	if err != nil {
		b.Fatal(err)
	}
	local := []net.IP{net.IPv4(127, 0, 0, 1)}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"localhost"}, IPs: local})
	if err != nil {
		b.Fatal(err)
	}
	kcpLeaf, err := ca.Issue(pki.LeafOptions{CommonName: "kcp", IPs: local})
	if err != nil {
		b.Fatal(err)
	}
	kcpCert, err := kcpLeaf.TLS()
	if err != nil {
		b.Fatal(err)
	}
	stub, err := kcpstub.Start(kcpstub.Options{ClientCAs: ca.Pool(), Certificate: kcpCert, CountOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stub.Close)
	if err := stub.SetMode(mode); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	caFile, certFile, keyFile, err := leaf.WriteFiles(dir, ca)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := parseConfig(append([]string{
		"--kcp-addr", stub.Addr(), "--tls-cert-file", certFile, "--tls-key-file", keyFile, "--ca-file", caFile,
		"--listen-addr", "127.0.0.1:0", "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0",
		"--request-timeout", "1s", "--drain-timeout", "100ms",
	}, extra...), io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	a, err := newApp(cfg, logr.Discard())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	env := &benchApp{app: a, stub: stub, cancel: cancel, done: done}
	b.Cleanup(func() {
		if err := env.stop(); err != nil {
			b.Error(err)
		}
	})
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}}
	b.Cleanup(client.CloseIdleConnections)
	url := "https://" + a.webhookLn.Addr().String() + contract.ValidatePath("lifecycle-manager")
	// Warm up the connection.
	resp, err := client.Post(url, "application/json", bytes.NewReader(updateReview(0)))
	if err != nil {
		b.Fatal(err)
	}
	_ = resp.Body.Close()
	env.url, env.client = url, client
	return env
}

// updateReview is an AdmissionReview of a spec change of Kyma kyma-<i>,
// shaped like the Kyma fixture.
func updateReview(i int) []byte {
	obj := func(channel string) string {
		return fmt.Sprintf(`{"apiVersion":"operator.kyma-project.io/v1beta2","kind":"Kyma","metadata":{"name":"kyma-%d",`+
			`"namespace":"kcp-system","resourceVersion":"%d","labels":{"operator.kyma-project.io/managed-by":"lifecycle-manager"},`+
			`"managedFields":[{"manager":"lifecycle-manager","operation":"Update","fieldsType":"FieldsV1",`+
			`"fieldsV1":{"f:spec":{"f:channel":{},"f:modules":{}}}}]},"spec":{"channel":"%s","modules":[`+
			`{"name":"keda","channel":"regular"},{"name":"serverless","channel":"fast"},{"name":"btp-operator"}]},`+
			`"status":{"state":"Ready"}}`, i, i, channel)
	}
	return []byte(fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"uid-%d",`+
		`"kind":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"},`+
		`"resource":{"group":"operator.kyma-project.io","version":"v1beta2","resource":"kymas"},`+
		`"name":"kyma-%d","namespace":"kcp-system","operation":"UPDATE","userInfo":{"username":"admin"},`+
		`"object":%s,"oldObject":%s,"dryRun":false}}`, i, i, obj("fast"), obj("regular")))
}

// The benchmark's requests really emit events: guard against measuring a
// no-op.
func TestUpdateReviewEmits(t *testing.T) {
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(updateReview(3), &r); err != nil {
		t.Fatal(err)
	}
	ev, outcome, err := admission.Decide(r.Request)
	if err != nil || outcome != admission.OutcomeEmitted || ev.Watched.Name != "kyma-3" {
		t.Fatalf("%v %q %v", ev, outcome, err)
	}
}
