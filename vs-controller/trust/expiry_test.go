package trust_test

import (
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

func TestExpiryIsTheEarlierOfLeafAndCA(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCAValid("short-lived CA", now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// As cert-manager issues: a 90-day leaf from a CA that ends tomorrow.
	outliving, err := ca.Issue(pki.LeafOptions{CommonName: "r1", NotBefore: now.Add(-time.Minute), NotAfter: now.Add(90 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got := trust.Expiry(outliving.Cert, ca.Cert); !got.Equal(ca.Cert.NotAfter) {
		t.Errorf("leaf outliving its CA: expiry %s, want the CA's %s", got, ca.Cert.NotAfter)
	}
	if got := trust.Expiry(outliving.Cert, nil); !got.Equal(outliving.Cert.NotAfter) {
		t.Errorf("CA unknown: expiry %s, want the leaf's %s", got, outliving.Cert.NotAfter)
	}
	within, err := ca.Issue(pki.LeafOptions{CommonName: "r2", NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got := trust.Expiry(within.Cert, ca.Cert); !got.Equal(within.Cert.NotAfter) {
		t.Errorf("leaf within its CA: expiry %s, want the leaf's %s", got, within.Cert.NotAfter)
	}
}
