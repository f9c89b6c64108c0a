package trust

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// ReasonInvalidMigrationCA is the Warning Event reason on an unusable
// migration CA Secret (--migration-extra-ca-secret).
const ReasonInvalidMigrationCA = "InvalidMigrationCASecret"

// MigrationAnchorName labels the migration CA Secret in
// runtime_watcher_vs_controller_ca_secret_valid.
const MigrationAnchorName = "migration-extra"

// MigrationCA is the trust window of a migration from Lifecycle Manager
// (docs/migrating-from-lifecycle-manager.md): the CA certificates in a
// foreign CA Secret's ca.crt (LM's klm-watcher), to be trusted for client
// certificates at the gateway beside the runtime CA bundle — and nowhere
// else. Nothing is remembered: the Secret is read on every pass, so
// removing the flag, the Secret or LM's CA from it closes the window at
// the next pass.
//
// It fails closed for the foreign CAs only: a missing Secret, one without
// a usable CA (garbage, not a CA, expired) gives no extra CA, reported by
// a log line, a Warning Event on the Secret and
// runtime_watcher_vs_controller_ca_secret_valid{anchor="migration-extra"} = 0.
// A failed read (an API error) keeps the CAs of the last read.
type MigrationCA struct {
	// Client reads the Secret; it must not be a cache restricted to
	// vs-controller's own Secrets (use an uncached client).
	Client   client.Client
	Secret   types.NamespacedName
	Recorder events.EventRecorder
	Log      logr.Logger
	// Now is time.Now when nil.
	Now func() time.Time

	mu       sync.Mutex
	cas      []*x509.Certificate
	badInput string
}

// Read reads the Secret and returns the CAs to trust; err only for API
// failures (the CAs of the last read are returned with it).
func (e *MigrationCA) Read(ctx context.Context) ([]*x509.Certificate, error) {
	now := time.Now()
	if e.Now != nil {
		now = e.Now()
	}
	s := &corev1.Secret{}
	err := e.Client.Get(ctx, e.Secret, s)
	switch {
	case apierrors.IsNotFound(err):
		return e.bad("the Secret does not exist"), nil
	case err != nil:
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.cas, fmt.Errorf("read migration CA Secret %s: %w", e.Secret, err)
	}
	cas, problem := ParseCAs(s.Data["ca.crt"], now)
	if problem != "" {
		return e.bad("ca.crt: " + problem), nil
	}
	vsmetrics.CASecretValid.WithLabelValues(MigrationAnchorName).Set(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.badInput != "" || len(e.cas) != len(cas) {
		e.Log.Info("migration CA Secret read: its CAs are trusted for client certificates", "secret", e.Secret.String(), "cas", len(cas))
	}
	e.badInput, e.cas = "", cas
	return cas, nil
}

func (e *MigrationCA) bad(problem string) []*x509.Certificate {
	vsmetrics.CASecretValid.WithLabelValues(MigrationAnchorName).Set(0)
	e.mu.Lock()
	repeated := e.badInput == problem
	e.badInput, e.cas = problem, nil
	e.mu.Unlock()
	if repeated {
		return nil
	}
	msg := fmt.Sprintf("migration CA Secret %s is unusable; no extra CA is trusted for client certificates until it is fixed: %s", e.Secret, problem)
	e.Log.Error(errors.New(problem), "migration CA Secret is unusable; no extra CA is trusted for client certificates", "secret", e.Secret.String())
	if e.Recorder != nil {
		obj := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.Secret.Namespace, Name: e.Secret.Name}}
		e.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonInvalidMigrationCA, "AdmitCA", "%s", msg)
	}
	return nil
}

// ParseCAs reads a PEM bundle of CA certificates that are all usable now;
// a problem says why it is not (then no CA is returned: the bundle is
// trusted whole or not at all). Expired CAs in the bundle are left out
// when at least one is valid now.
func ParseCAs(data []byte, now time.Time) ([]*x509.Certificate, string) {
	if len(data) == 0 {
		return nil, "not set"
	}
	certs, bad := ParseBundle(data)
	if bad != nil {
		return nil, bad.Error()
	}
	var out []*x509.Certificate
	for _, c := range certs {
		if p := caProblem(c); p != "" {
			return nil, p
		}
		if now.Before(c.NotBefore) || now.After(c.NotAfter) {
			continue
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, "no CA certificate valid now"
	}
	return dedupe(out), ""
}

// Merge is the PEM bundle of base followed by the CAs of extra not already
// in it, and how many of extra were added.
func Merge(base []byte, extra []*x509.Certificate) ([]byte, int) {
	if len(extra) == 0 {
		return base, 0
	}
	have, _ := ParseBundle(base)
	var add []*x509.Certificate
	for _, c := range extra {
		dup := false
		for _, h := range append(have, add...) {
			dup = dup || h.Equal(c)
		}
		if !dup {
			add = append(add, c)
		}
	}
	if len(add) == 0 {
		return base, 0
	}
	out := append([]byte(nil), base...)
	if n := len(out); n > 0 && out[n-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, EncodeBundle(add)...), len(add)
}
