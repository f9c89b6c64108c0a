package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// What the operator prints for the bodies our webhook sends, with the XFCC
// header our gateway sets (Envoy's SANITIZE_SET: Hash, Cert, Subject, DNS),
// as Kyma's listener v1.4.3 decodes them. The e2e spec labelled
// kyma-listener checks the same through the whole edge.
func TestKymaListenerLines(t *testing.T) {
	const manager, runtimeID = "kyma-listener", "runtime-x"
	listen, health := freeAddr(t), freeAddr(t)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, listen, manager, health, pw, false) }()
	t.Cleanup(func() {
		cancel()
		_ = pr.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	lines := bufio.NewScanner(pr)
	waitReady(t, "http://"+health+"/readyz")

	xfcc := `Hash=00;Cert="` + url.QueryEscape(string(selfSigned(t, runtimeID))) + `";Subject="CN=` + runtimeID + `";DNS=skr-x.example.com`
	post := func(body string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+listen+"/v2/"+manager+"/event", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-Client-Cert", xfcc)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	empty := map[string]Value{
		"watched":     {Type: "types.NamespacedName", Value: json.RawMessage(`{"Namespace":"","Name":""}`)},
		"watched-gvk": {Type: "v1.GroupVersionKind", Value: json.RawMessage(`{"group":"","version":"","kind":""}`)},
		"runtime-id":  {Type: "string", Value: json.RawMessage(`"` + runtimeID + `"`)},
	}
	for _, c := range []struct {
		what, body string
		want       map[string]Value
	}{
		{"change", `{"watched":{"namespace":"kyma-system","name":"default"},"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}`, map[string]Value{
			"watched":     {Type: "types.NamespacedName", Value: json.RawMessage(`{"Namespace":"kyma-system","Name":"default"}`)},
			"watched-gvk": {Type: "v1.GroupVersionKind", Value: json.RawMessage(`{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}`)},
			"runtime-id":  {Type: "string", Value: json.RawMessage(`"` + runtimeID + `"`)},
		}},
		// As skr-webhook/delivery's TestSenderBodies has our sender write them.
		{"startup resync", `{"watched":{},"watchedGvk":{},"resync":"startup"}`, empty},
		{"overflow resync", `{"watched":{},"watchedGvk":{},"resync":"overflow"}`, empty},
		{"expired resync", `{"watched":{},"watchedGvk":{},"resync":"expired"}`, empty},
		{"heartbeat", `{"watched":{},"watchedGvk":{},"heartbeat":true}`, empty},
		// The listener's fixtures: ours (as the contract writes them) and Kyma's own.
		{"resync fixture", fixture(t, "delivery/resync-startup.json"), empty},
		{"heartbeat fixture", fixture(t, "delivery/heartbeat.json"), empty},
		{"Kyma's fixture", fixture(t, "kyma/listener-event-small.json"), map[string]Value{
			"watched":     {Type: "types.NamespacedName", Value: json.RawMessage(`{"Namespace":"kcp-system","Name":"watched-resource"}`)},
			"watched-gvk": {Type: "v1.GroupVersionKind", Value: json.RawMessage(`{"group":"operator.kyma-project.io","version":"v1alpha1","kind":"kyma"}`)},
			"runtime-id":  {Type: "string", Value: json.RawMessage(`"` + runtimeID + `"`)},
		}},
	} {
		codes := make(chan int, 1)
		go func() { codes <- post(c.body) }()
		if !lines.Scan() {
			t.Fatalf("%s: no line (%v)", c.what, lines.Err())
		}
		var got Line
		if err := json.Unmarshal(lines.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v in %s", c.what, err, lines.Bytes())
		}
		if code := <-codes; code != http.StatusOK {
			t.Errorf("%s: Kyma's listener answered %d", c.what, code)
		}
		if len(got.Content) != len(c.want) {
			t.Errorf("%s: content %s, want the keys of %v", c.what, lines.Bytes(), c.want)
		}
		for k, w := range c.want {
			if g := got.Content[k]; g.Type != w.Type || string(g.Value) != string(w.Value) {
				t.Errorf("%s: %s = %s %s, want %s %s", c.what, k, g.Type, g.Value, w.Type, w.Value)
			}
		}
	}

	// Over 16 KiB: 413 before anything is decoded; nothing on the channel
	// (the next line would be this body's).
	if code := post(fixture(t, "kyma/listener-event-large.json")); code != http.StatusRequestEntityTooLarge {
		t.Errorf("Kyma's large fixture: %d, want 413", code)
	}
}

// fixture is a file of the listener's testdata (listener/testdata/README.md).
func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "listener", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitReady(t *testing.T, u string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(u)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready: %v", u, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a port, no race to wait out
	}
}

// selfSigned is a PEM certificate with CommonName cn.
func selfSigned(t *testing.T, cn string) []byte { return selfSignedB(t, cn) }

func selfSignedB(t testing.TB, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
