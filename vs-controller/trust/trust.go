// Package trust keeps vs-controller's trust bundles (docs/architecture.md §4.9,
// docs/certificates.md): for a CA Secret that cert-manager renews with a new
// key (rotationPolicy: Always), an Anchor holds every CA certificate that is
// valid now — the current one and, during the overlap, the ones before it —
// remembered in a ConfigMap so a restart forgets nothing. An old CA leaves
// the bundle when it expired or when no certificate in use is signed by it
// any more (the Anchor's InUse says which).
//
// Bad input (a Secret without a certificate, garbage, a certificate that is
// not a CA or not valid now) is logged, reported as a Warning Event on the
// Secret and in the metric runtime_watcher_vs_controller_ca_secret_valid,
// and never replaces the trust already held.
//
// The Keeper (keeper.go) runs the anchors for the runtime reconciler: it
// publishes the runtime and gateway CA bundles, writes the gateway's client
// CA Secret, and renews runtime certificates (renewal.go) and the gateway's
// certificate once the new CA is trusted everywhere; Options (options.go)
// build it from vs-controller's flags. MigrationCA (migrationca.go) is the trust window
// of a migration from Lifecycle Manager.
package trust

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// Keys and reasons.
const (
	// StoreKey is the ConfigMap key holding the remembered CAs (PEM).
	StoreKey = "ca-bundle.crt"
	// ReasonInvalidCA is the Warning Event reason on a bad CA Secret.
	ReasonInvalidCA = "InvalidCASecret"
	// ReasonRefusedStoreEntry is the Warning Event reason on a trust store
	// holding a certificate it may not add (unsealed, not a CA).
	ReasonRefusedStoreEntry = "TrustStoreEntryRefused"
)

// Anchor is the trust bundle of one CA Secret.
type Anchor struct {
	// Name labels logs and metrics ("runtime", "gateway").
	Name   string
	Client client.Client
	// Secret is the CA's Secret (cert-manager's: tls.crt is the CA
	// certificate; ca.crt is used when tls.crt is absent).
	Secret types.NamespacedName
	// Store is the ConfigMap that remembers the CAs seen.
	Store types.NamespacedName
	// Seal proves the store's CAs were seen in Secret; nil: nothing the
	// store holds is admitted.
	Seal     *Seal
	Recorder events.EventRecorder
	Log      logr.Logger
	// InUse reports, for the bundle's CAs, which still sign a certificate in
	// use; nil keeps every unexpired CA.
	InUse func(ctx context.Context, cas []*x509.Certificate) ([]bool, error)
	// Now is time.Now when nil.
	Now func() time.Time

	mu       sync.RWMutex
	loaded   bool
	cas      []*x509.Certificate
	current  *x509.Certificate
	pem      []byte
	badInput string
}

// Bundle is the PEM of every CA held (oldest first); nil before the first
// successful Refresh.
func (a *Anchor) Bundle() []byte {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.pem
}

// Current is the CA certificate in the Secret now (the one that signs new
// certificates); nil when unknown.
func (a *Anchor) Current() *x509.Certificate {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.current
}

// CAs are the CA certificates held, oldest first.
func (a *Anchor) CAs() []*x509.Certificate {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return append([]*x509.Certificate(nil), a.cas...)
}

func (a *Anchor) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Refresh reads the CA Secret (and, the first time, the store), updates the
// bundle and the store, and reports whether the bundle changed. Bad input
// keeps the trust held and is reported, not returned: only API failures are
// errors.
func (a *Anchor) Refresh(ctx context.Context) (bool, error) {
	now := a.now()
	a.mu.RLock()
	cas, current, loaded := append([]*x509.Certificate(nil), a.cas...), a.current, a.loaded
	a.mu.RUnlock()
	prev := append([]*x509.Certificate(nil), cas...) // what was held (and sealed) before this pass
	if !loaded {
		cm := &corev1.ConfigMap{}
		err := a.Client.Get(ctx, a.Store, cm)
		if err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("read trust store %s: %w", a.Store, err)
		}
		remembered, err := a.remembered(ctx, cm)
		if err != nil {
			return false, err
		}
		cas = append(cas, remembered...)
		prev = append(prev, remembered...)
	}

	secret := &corev1.Secret{}
	err := a.Client.Get(ctx, a.Secret, secret)
	switch {
	case apierrors.IsNotFound(err):
		a.reportBad("CA Secret does not exist")
	case err != nil:
		return false, fmt.Errorf("read CA Secret %s: %w", a.Secret, err)
	default:
		if ca, problem := parseCA(secret, now); problem != "" {
			a.reportBad(problem)
		} else {
			current = ca
			cas = append(cas, ca)
			a.reportGood()
		}
	}

	cas = dedupe(cas)
	kept := cas[:0]
	for _, c := range cas {
		if now.Before(c.NotAfter) {
			kept = append(kept, c)
		} else {
			a.Log.Info("CA expired: dropped from the trust bundle", "anchor", a.Name, "subject", c.Subject.String(), "notAfter", c.NotAfter)
		}
	}
	cas = kept
	if a.InUse != nil && current != nil && len(cas) > 1 {
		used, err := a.InUse(ctx, cas)
		if err != nil {
			return false, err
		}
		kept := cas[:0]
		for i, c := range cas {
			if c.Equal(current) || used[i] {
				kept = append(kept, c)
			} else {
				a.Log.Info("old CA no longer signs a certificate in use: dropped from the trust bundle", "anchor", a.Name, "subject", c.Subject.String(), "notAfter", c.NotAfter)
			}
		}
		cas = kept
	}
	sort.SliceStable(cas, func(i, j int) bool { return cas[i].NotBefore.Before(cas[j].NotBefore) })
	out := EncodeBundle(cas)

	a.mu.RLock()
	changed := !bytes.Equal(out, a.pem)
	a.mu.RUnlock()
	if a.Seal != nil && len(cas) > 0 && retired(prev, cas) {
		// A CA left the bundle: seals signed before (a saved copy of the
		// store) must not bring it back.
		if err := a.Seal.Advance(ctx, a.Name); err != nil {
			return false, err
		}
		a.Log.Info("a CA left the trust bundle: the store's seals move to a new epoch", "anchor", a.Name)
	}
	if len(cas) > 0 {
		// Every pass: the store is also ext-authz's CA file; whatever
		// else somebody wrote there is overwritten.
		repaired, err := a.writeStore(ctx, cas, out)
		if err != nil {
			return false, err
		}
		if repaired && loaded && !changed {
			a.Log.Info("trust store did not hold what vs-controller wrote: rewritten", "anchor", a.Name, "store", a.Store.String())
		}
	}
	a.mu.Lock()
	before := a.cas
	a.loaded, a.cas, a.current = true, cas, current
	if len(cas) > 0 {
		a.pem = out
	}
	a.mu.Unlock()
	held := map[string]bool{}
	for _, c := range cas {
		fp := Fingerprint(c)
		held[fp] = true
		vsmetrics.CANotAfter.WithLabelValues(a.Name, fp).Set(float64(c.NotAfter.Unix()))
	}
	// A CA that left the bundle leaves the metric too.
	for _, c := range before {
		if !held[Fingerprint(c)] {
			vsmetrics.CANotAfter.DeleteLabelValues(a.Name, Fingerprint(c))
		}
	}
	if changed && len(cas) > 0 {
		a.Log.Info("trust bundle changed", "anchor", a.Name, "cas", len(cas))
	}
	return changed && len(cas) > 0, nil
}

// Load reads, without writing anything, the trust the elected replica
// keeps (a replica that does not lead, shards): the store's sealed CAs and
// the CA Secret's current CA, expired ones left out, oldest first. Bad
// input is left out, not reported (the elected replica reports it).
func (a *Anchor) Load(ctx context.Context) error {
	now := a.now()
	if a.Seal != nil {
		a.Seal.Reread() // the elected replica may have advanced the epoch
	}
	cm := &corev1.ConfigMap{}
	if err := a.Client.Get(ctx, a.Store, cm); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read trust store %s: %w", a.Store, err)
	}
	cas, err := a.remembered(ctx, cm)
	if err != nil {
		return err
	}
	var current *x509.Certificate
	secret := &corev1.Secret{}
	switch err := a.Client.Get(ctx, a.Secret, secret); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("read CA Secret %s: %w", a.Secret, err)
	default:
		if ca, problem := parseCA(secret, now); problem == "" {
			current = ca
			cas = append(cas, ca)
		}
	}
	cas = slices.DeleteFunc(dedupe(cas), func(c *x509.Certificate) bool { return !now.Before(c.NotAfter) })
	sort.SliceStable(cas, func(i, j int) bool { return cas[i].NotBefore.Before(cas[j].NotBefore) })
	a.mu.Lock()
	defer a.mu.Unlock()
	a.loaded, a.cas, a.current = true, cas, current
	if len(cas) > 0 {
		a.pem = EncodeBundle(cas)
	}
	return nil
}

// retired says whether a CA of prev is not in cas.
func retired(prev, cas []*x509.Certificate) bool {
	for _, p := range prev {
		if !slices.ContainsFunc(cas, p.Equal) {
			return true
		}
	}
	return false
}

// writeStore makes the store hold cas (whose PEM is data) and their seals;
// true when it held something else.
func (a *Anchor) writeStore(ctx context.Context, cas []*x509.Certificate, data []byte) (bool, error) {
	seals := ""
	if a.Seal != nil {
		var err error
		if seals, err = a.Seal.Sign(ctx, a.Name, cas); err != nil {
			return false, err
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: a.Store.Namespace, Name: a.Store.Name}}
	res, err := controllerutil.CreateOrUpdate(ctx, a.Client, cm, func() error {
		cm.Data = map[string]string{StoreKey: string(data)}
		if seals != "" {
			cm.Data[SealKey] = seals
		}
		cm.BinaryData = nil
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("write trust store %s: %w", a.Store, err)
	}
	return res == controllerutil.OperationResultUpdated, nil
}

// remembered are the CAs of the store that vs-controller saw in the CA
// Secret: sealed (Seal) and CA certificates. Everything else in the store
// is refused: logged, counted (trust_store_refused_total) and reported as
// a Warning Event on the ConfigMap.
func (a *Anchor) remembered(ctx context.Context, cm *corev1.ConfigMap) ([]*x509.Certificate, error) {
	certs, bad := ParseBundle([]byte(cm.Data[StoreKey]))
	if bad != nil {
		a.Log.Info("trust store holds unusable certificates; they are left out", "anchor", a.Name, "store", a.Store.String(), "problem", bad.Error())
	}
	if len(certs) == 0 {
		return nil, nil
	}
	sealed := make([]bool, len(certs))
	if a.Seal != nil {
		var err error
		if sealed, err = a.Seal.Sealed(ctx, a.Name, certs, cm.Data[SealKey]); err != nil {
			return nil, err
		}
	}
	var out []*x509.Certificate
	for i, c := range certs {
		problem := caProblem(c)
		if problem == "" && !sealed[i] {
			problem = "not sealed by vs-controller: never seen in the CA Secret " + a.Secret.String()
		}
		if problem == "" {
			out = append(out, c)
			continue
		}
		vsmetrics.TrustStoreRefused.WithLabelValues(a.Name).Inc()
		a.Log.Info("trust store entry refused: the store remembers CAs, it never adds one", "anchor", a.Name, "store", a.Store.String(),
			"subject", skrclient.Bounded(c.Subject.String()), "fingerprint", Fingerprint(c), "problem", problem)
		if a.Recorder != nil {
			obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: a.Store.Namespace, Name: a.Store.Name}}
			a.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonRefusedStoreEntry, "AdmitCA", "certificate %q (serial %s) not admitted to the %s trust bundle: %s",
				skrclient.Bounded(c.Subject.String()), skrclient.Bounded(Fingerprint(c)), a.Name, problem)
		}
	}
	return out, nil
}

func (a *Anchor) reportBad(problem string) {
	vsmetrics.CASecretValid.WithLabelValues(a.Name).Set(0)
	a.mu.Lock()
	repeated := a.badInput == problem
	a.badInput = problem
	a.mu.Unlock()
	if repeated {
		return
	}
	msg := fmt.Sprintf("CA Secret %s is unusable, the trust bundle is kept as it was: %s", a.Secret, problem)
	a.Log.Error(errors.New(problem), "CA Secret is unusable; the trust bundle is kept as it was", "anchor", a.Name, "secret", a.Secret.String())
	if a.Recorder != nil {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: a.Secret.Namespace, Name: a.Secret.Name}}
		a.Recorder.Eventf(s, nil, corev1.EventTypeWarning, ReasonInvalidCA, "AdmitCA", "%s", msg)
	}
}

func (a *Anchor) reportGood() {
	vsmetrics.CASecretValid.WithLabelValues(a.Name).Set(1)
	a.mu.Lock()
	a.badInput = ""
	a.mu.Unlock()
}

// parseCA takes the CA certificate from a CA Secret; a problem describes
// why it cannot be used.
func parseCA(s *corev1.Secret, now time.Time) (*x509.Certificate, string) {
	data, key := s.Data[corev1.TLSCertKey], corev1.TLSCertKey
	if len(data) == 0 {
		data, key = s.Data["ca.crt"], "ca.crt"
	}
	if len(data) == 0 {
		return nil, "neither tls.crt nor ca.crt is set"
	}
	certs, bad := ParseBundle(data)
	if bad != nil {
		return nil, fmt.Sprintf("%s: %v", key, bad)
	}
	if len(certs) == 0 {
		return nil, key + " holds no certificate"
	}
	c := certs[0]
	if p := caProblem(c); p != "" {
		return nil, fmt.Sprintf("%s: %s", key, p)
	}
	if key == corev1.TLSCertKey && len(s.Data[corev1.TLSPrivateKeyKey]) > 0 {
		// cert-manager's CA Secret: the certificate must be the key's.
		if _, err := tls.X509KeyPair(data, s.Data[corev1.TLSPrivateKeyKey]); err != nil {
			return nil, fmt.Sprintf("tls.crt %q is not the certificate of tls.key: %v", skrclient.Bounded(c.Subject.String()), err)
		}
	}
	switch {
	case now.After(c.NotAfter):
		return nil, fmt.Sprintf("%s: CA %q expired at %s", key, c.Subject.String(), c.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(c.NotBefore):
		return nil, fmt.Sprintf("%s: CA %q is not valid before %s", key, c.Subject.String(), c.NotBefore.UTC().Format(time.RFC3339))
	}
	return c, ""
}

// caProblem says why c may not be a trust anchor: a CA certificate has
// valid basic constraints with CA true and, when it names key usages, may
// sign certificates. "" when it may.
func caProblem(c *x509.Certificate) string {
	switch {
	case !c.BasicConstraintsValid || !c.IsCA:
		return fmt.Sprintf("%q is not a CA certificate (basic constraints CA=false or absent)", skrclient.Bounded(c.Subject.String()))
	case c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0:
		return fmt.Sprintf("%q is not a CA certificate (its key usage does not include certificate signing)", skrclient.Bounded(c.Subject.String()))
	}
	return ""
}

// ParseBundle parses PEM CERTIFICATE blocks; bad reports the first block
// that is not one (the others are still returned).
func ParseBundle(data []byte) (certs []*x509.Certificate, bad error) {
	rest := bytes.TrimSpace(data)
	for len(rest) > 0 {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			if bad == nil {
				bad = errors.New("not PEM")
			}
			break
		}
		if b.Type != "CERTIFICATE" {
			if bad == nil {
				bad = fmt.Errorf("PEM block %q is not a CERTIFICATE", b.Type)
			}
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			if bad == nil {
				bad = err
			}
			continue
		}
		certs = append(certs, c)
		rest = bytes.TrimSpace(rest)
	}
	return certs, bad
}

// EncodeBundle is the PEM of certs, in order.
func EncodeBundle(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

func dedupe(certs []*x509.Certificate) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range certs {
		dup := false
		for _, o := range out {
			dup = dup || o.Equal(c)
		}
		if !dup {
			out = append(out, c)
		}
	}
	return out
}

// Fingerprint is a short, stable name of a certificate (its serial number in
// hex), for metric labels and logs.
func Fingerprint(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// SignedBy is the index of the CA in cas that signed leaf; -1 when none.
func SignedBy(leaf *x509.Certificate, cas []*x509.Certificate) int {
	for i, ca := range cas {
		if bytes.Equal(leaf.RawIssuer, ca.RawSubject) && leaf.CheckSignatureFrom(ca) == nil {
			return i
		}
	}
	return -1
}
