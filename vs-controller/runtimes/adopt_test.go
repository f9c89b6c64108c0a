package runtimes

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
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
	if ok, err := URLReady(srv.URL)(ctx, nil, client.ObjectKey{}, &bundle.TLS{CA: ca}); !ok || err != nil {
		t.Errorf("serving with a certificate of the runtime CA: ready %t, %v", ok, err)
	}
	if ok, err := URLReady(srv.URL)(ctx, nil, client.ObjectKey{}, &bundle.TLS{CA: otherCA}); ok || err != nil {
		t.Errorf("serving with a certificate of another CA (LM's webhook): ready %t, %v; want not ready", ok, err)
	}
	if ok, err := URLReady("https://"+other.Listener.Addr().String())(ctx, nil, client.ObjectKey{}, &bundle.TLS{CA: ca}); ok || err != nil {
		t.Errorf("nothing listening: ready %t, %v", ok, err)
	}
	if _, err := URLReady(srv.URL)(ctx, nil, client.ObjectKey{}, &bundle.TLS{CA: []byte("garbage")}); err == nil {
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
		skr := fake.NewClientBuilder().WithScheme(bundle.Scheme()).WithObjects(d).Build()
		if ok, err := DeploymentReady(context.Background(), skr, key, nil); ok != c.want || err != nil {
			t.Errorf("%s: ready %t, %v", c.name, ok, err)
		}
	}
	skr := fake.NewClientBuilder().WithScheme(bundle.Scheme()).Build()
	if ok, err := DeploymentReady(context.Background(), skr, key, nil); ok || err != nil {
		t.Errorf("no Deployment: ready %t, %v", ok, err)
	}
}

func TestLMCertificatesGauge(t *testing.T) {
	var c lmCertificates
	c.set("kcp-system/a", "CN=klm")
	c.set("kcp-system/b", "CN=klm")
	c.set("kcp-system/a", "CN=klm")
	if n := len(c.m); n != 2 {
		t.Errorf("%d runtimes on LM's certificate, want 2", n)
	}
	c.forget("kcp-system/a")
	c.forget("kcp-system/unknown")
	if n := len(c.m); n != 1 {
		t.Errorf("%d runtimes on LM's certificate, want 1", n)
	}
}
