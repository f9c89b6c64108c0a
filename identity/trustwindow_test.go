package identity_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// TestVerifyLifecycleManagerCertificate: during a take-over from Lifecycle
// Manager (docs/migrating-from-lifecycle-manager.md) the roots hold our CA
// and LM's; a client certificate LM issued (the fixture of runtime-1) is
// accepted and SAN-pinned like ours, and refused once LM's CA is removed.
func TestVerifyLifecycleManagerCertificate(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "test", "fixtures", "lifecycle-manager", "pki", "secret-runtime-1-webhook-tls-rendered.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var s corev1.Secret
	if err := yaml.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(s.Data["tls.crt"])
	if b == nil {
		t.Fatal("fixture: no tls.crt")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	lmLeaf := &pki.Leaf{Cert: cert, CertPEM: s.Data["tls.crt"]}
	ours, err := pki.NewCA("runtime-watcher CA")
	if err != nil {
		t.Fatal(err)
	}
	window := ours.Pool()
	if !window.AppendCertsFromPEM(s.Data["ca.crt"]) {
		t.Fatal("fixture: no ca.crt")
	}
	verify := func(roots *x509.CertPool, domain string) error {
		v := &identity.Verifier{
			Lookup: mapLookup{runtimes: map[string]identity.Runtime{"runtime-1": {SKRDomain: domain}}},
			Roots:  roots,
		}
		_, err := v.Verify(context.Background(), gatewayXFCC(lmLeaf), "")
		return err
	}
	denied := func(err error, reason contract.DenyReason) bool {
		var d *identity.Denial
		return errors.As(err, &d) && d.Reason == reason
	}

	if err := verify(window, "c-7f3a9b2.kyma.ondemand.com"); err != nil {
		t.Errorf("window open, LM's certificate of runtime-1 for its own domain: %v", err)
	}
	var d *identity.Denial
	if err := verify(window, "other.kyma.ondemand.com"); !errors.As(err, &d) || d.Reason == contract.ReasonInvalidCertificate {
		t.Errorf("window open, LM's certificate for another runtime's domain: %v; want a pinning denial", err)
	}
	if err := verify(ours.Pool(), "c-7f3a9b2.kyma.ondemand.com"); !denied(err, contract.ReasonInvalidCertificate) {
		t.Errorf("window closed: %v; want invalid-certificate", err)
	}
}
