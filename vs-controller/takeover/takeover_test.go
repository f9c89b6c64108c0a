package takeover

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

func TestURLReady(t *testing.T) {
	ours, err := pki.NewCA("runtime CA")
	if err != nil {
		t.Fatal(err)
	}
	lm, err := pki.NewCA("klm-watcher-selfsigned-ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ours.Issue(pki.LeafOptions{CommonName: "skr-webhook", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := leaf.TLS()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	ca, otherCA := ours.PEM, lm.PEM
	other := httptest.NewServer(http.NotFoundHandler())
	other.Close()

	ctx := context.Background()
	if ok, err := URLReady(srv.URL)(ctx, nil, client.ObjectKey{}, &certificates.TLS{CA: ca}); !ok || err != nil {
		t.Errorf("serving with a certificate of the runtime CA: ready %t, %v", ok, err)
	}
	if ok, err := URLReady(srv.URL)(ctx, nil, client.ObjectKey{}, &certificates.TLS{CA: otherCA}); ok || err != nil {
		t.Errorf("serving with a certificate of another CA (LM's webhook): ready %t, %v; want not ready", ok, err)
	}
	if ok, err := URLReady("https://"+other.Listener.Addr().String())(ctx, nil, client.ObjectKey{}, &certificates.TLS{CA: ca}); ok || err != nil {
		t.Errorf("nothing listening: ready %t, %v", ok, err)
	}
	if _, err := URLReady(srv.URL)(ctx, nil, client.ObjectKey{}, &certificates.TLS{CA: []byte("garbage")}); err == nil {
		t.Error("a runtime CA without a certificate must be an error")
	}
}

func TestDeploymentReady(t *testing.T) {
	key := client.ObjectKey{Namespace: "kyma-system", Name: bundle.TakeoverName}
	for _, c := range []struct {
		name  string
		ready int32
		want  bool
	}{{"no ready replica", 0, false}, {"one ready replica", 1, true}} {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		d.Status.ReadyReplicas = c.ready
		skr := fakecluster.New(t, bundle.Scheme(), fakecluster.WithObjects(d))
		if ok, err := DeploymentReady(context.Background(), skr, key, nil); ok != c.want || err != nil {
			t.Errorf("%s: ready %t, %v", c.name, ok, err)
		}
	}
	skr := fakecluster.New(t, bundle.Scheme())
	if ok, err := DeploymentReady(context.Background(), skr, key, nil); ok || err != nil {
		t.Errorf("no Deployment: ready %t, %v", ok, err)
	}
}

func TestLMCertificatesGauge(t *testing.T) {
	var c lmCertificates
	a := lmCertificate{runtimeID: "runtime-a", kyma: "a", issuer: "CN=klm"}
	c.set("kcp-system/a", a)
	c.set("kcp-system/b", lmCertificate{runtimeID: "runtime-b", kyma: "b", issuer: "CN=klm"})
	c.set("kcp-system/a", a)
	if n := testutil.ToFloat64(vsmetrics.RuntimesOnLMCertificate); n != 2 {
		t.Errorf("%v runtimes on LM's certificate, want 2", n)
	}
	if n := testutil.CollectAndCount(vsmetrics.RuntimeOnLMCertificate); n != 2 {
		t.Errorf("%d series of the per-runtime gauge, want 2", n)
	}
	if v := testutil.ToFloat64(vsmetrics.RuntimeOnLMCertificate.WithLabelValues("runtime-a", "a")); v != 1 {
		t.Errorf("runtime-a: %v, want 1", v)
	}
	// A changed runtime ID replaces the series.
	c.set("kcp-system/b", lmCertificate{runtimeID: "runtime-b2", kyma: "b", issuer: "CN=klm"})
	c.forget("kcp-system/a")
	c.forget("kcp-system/unknown")
	if n := testutil.ToFloat64(vsmetrics.RuntimesOnLMCertificate); n != 1 {
		t.Errorf("%v runtimes on LM's certificate, want 1", n)
	}
	want := `
# HELP runtime_watcher_vs_controller_runtime_on_lm_certificate 1 for each runtime whose SKR still holds Lifecycle Manager's skr-webhook-tls Secret (an LM-issued client certificate), as last seen; no series once taken over.
# TYPE runtime_watcher_vs_controller_runtime_on_lm_certificate gauge
runtime_watcher_vs_controller_runtime_on_lm_certificate{kyma="b",runtime="runtime-b2"} 1
`
	if err := testutil.CollectAndCompare(vsmetrics.RuntimeOnLMCertificate, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	c.forget("kcp-system/b")
	if n := testutil.CollectAndCount(vsmetrics.RuntimeOnLMCertificate); n != 0 {
		t.Errorf("%d series of the per-runtime gauge after the take-over, want 0", n)
	}
}
