package trust

import (
	"crypto/x509"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// TestSignedByMemo: the remembered answers are SignedBy's, per CA and
// per parse of the Secret; a new resourceVersion forgets them.
func TestSignedByMemo(t *testing.T) {
	ca1, err := pki.NewCA("ca-1")
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := pki.NewCA("ca-2")
	if err != nil {
		t.Fatal(err)
	}
	l1, err := ca1.Issue(pki.LeafOptions{CommonName: "runtime-1"})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := ca2.Issue(pki.LeafOptions{CommonName: "runtime-1"})
	if err != nil {
		t.Fatal(err)
	}
	k := &Keeper{}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "runtime-1-webhook-tls", ResourceVersion: "1"},
		Data: map[string][]byte{corev1.TLSCertKey: l1.CertPEM}}
	leaf := k.leaf(secret)
	for range 2 { // computed, then remembered
		if got := k.signedBy(leaf, []*x509.Certificate{ca2.Cert, ca1.Cert}); got != 1 {
			t.Fatalf("leaf of CA 1 against [CA 2, CA 1]: %d, want 1", got)
		}
		if got := k.signedBy(leaf, []*x509.Certificate{ca2.Cert}); got != -1 {
			t.Fatalf("leaf of CA 1 against [CA 2]: %d, want -1", got)
		}
	}
	secret.ResourceVersion, secret.Data[corev1.TLSCertKey] = "2", l2.CertPEM
	renewed := k.leaf(secret)
	if _, ok := k.signers.Load(leaf); ok {
		t.Error("the answers for the certificate before are still remembered")
	}
	if got := k.signedBy(renewed, []*x509.Certificate{ca1.Cert, ca2.Cert}); got != 1 {
		t.Fatalf("renewed leaf of CA 2 against [CA 1, CA 2]: %d, want 1", got)
	}
}
