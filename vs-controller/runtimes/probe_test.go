package runtimes

// The watch-path prober's causes (Config and Silent, docs/architecture.md
// §4.12) over the fake-cluster tier: one table per probe, each row a
// runtime whose SKR (or KCP) is put into a state, and the Finding (or
// error) the probe must give. Rows with two faults at once show the order
// of the checks: the earlier one wins. The e2e label "silent" runs the
// same causes against real clusters.

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/health"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// probeFixture is runtime-a (Kyma kyma-a, skr-domain a.example.com) after
// a bundle pass: its SKR holds the bundle with the webhook of one routed
// Watcher, the client certificate the gateway and ext-authz let pass
// (signed by the runtime CA, its skr-domain as DNS SAN) and a ready
// skr-webhook Deployment. Nothing is wrong with it but its silence. The
// KCP also holds Kyma kyma-b (runtime-b) without skr-domain.
type probeFixture struct {
	*setup
	rt        health.Runtime
	runtimeCA *pki.CA
}

func newProbeFixture(t *testing.T, runtimeCA *pki.CA) *probeFixture {
	t.Helper()
	w, vs := routedWatcher("w", "lifecycle-manager")
	s := newSetup(t, w, vs, fakecluster.Kyma(kymaNS, "kyma-b", "runtime-b", ""))
	s.r.Bundle.Namespace = bundle.DefaultNamespace // the --skr-namespace default
	leaf := issue(t, runtimeCA, pki.LeafOptions{CommonName: "runtime-a", DNSNames: []string{"a.example.com"}})
	s.issued.Data = map[string][]byte{certificates.KeyCA: runtimeCA.PEM, certificates.KeyCert: leaf.CertPEM, certificates.KeyKey: leaf.KeyPEM}
	if err := s.kcp.Create(ctx, s.issued); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t)
	d := &appsv1.Deployment{}
	if err := s.skr.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.Name}, d); err != nil {
		t.Fatal(err)
	}
	d.Status.ReadyReplicas = 1
	if err := s.skr.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	s.kcp.Reset()
	s.skr.Reset()
	return &probeFixture{setup: s, runtimeCA: runtimeCA,
		rt: health.Runtime{ID: "runtime-a", Kyma: fakecluster.Kyma(kymaNS, "kyma-a", "runtime-a", "a.example.com")}}
}

func issue(t *testing.T, ca *pki.CA, o pki.LeafOptions) *pki.Leaf {
	t.Helper()
	l, err := ca.Issue(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// clientCert puts certPEM as the client certificate (tls.crt) of the
// SKR's Secret skr-webhook-tls.
func (f *probeFixture) clientCert(t *testing.T, certPEM []byte) {
	t.Helper()
	sec := &corev1.Secret{}
	if err := f.skr.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.SecretName}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[corev1.TLSCertKey] = certPEM
	if err := f.skr.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
}

func (f *probeFixture) deleteSKR(t *testing.T, obj client.Object) {
	t.Helper()
	if err := f.skr.Delete(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

func (f *probeFixture) deleteIssued(t *testing.T) {
	t.Helper()
	if err := f.kcp.Delete(ctx, f.issued); err != nil {
		t.Fatal(err)
	}
}

func (f *probeFixture) webhookConfig(t *testing.T) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := f.skr.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc); err != nil {
		t.Fatal(err)
	}
	return vwc
}

func (f *probeFixture) updateSKR(t *testing.T, obj client.Object) {
	t.Helper()
	if err := f.skr.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

// withKeeper gives the reconciler a trust keeper that has published the
// runtime CA bundle (the gateway's client CA): the runtime CA alone.
func (f *probeFixture) withKeeper(t *testing.T) {
	t.Helper()
	caSecret := types.NamespacedName{Namespace: kymaNS, Name: "runtime-ca"}
	if err := f.kcp.Create(ctx, &corev1.Secret{ObjectMeta: metaOf(caSecret), Data: map[string][]byte{corev1.TLSCertKey: f.runtimeCA.PEM}}); err != nil {
		t.Fatal(err)
	}
	k := &trust.Keeper{Runtime: &trust.Anchor{Name: "probe-test", Client: f.kcp, Secret: caSecret, Log: logr.Discard(),
		Store: types.NamespacedName{Namespace: kymaNS, Name: "trust-runtime"}}, Client: f.kcp, Log: logr.Discard()}
	k.Init(f.kcp, kymaNS)
	k.Sync(ctx)
	if _, known := k.GatewayTrusts(f.runtimeCA.Cert); !known {
		t.Fatal("the keeper published no runtime CA bundle")
	}
	f.r.Trust = k
}

type probeRow struct {
	name string
	// edit puts the runtime into the row's state.
	edit func(t *testing.T, f *probeFixture)
	want health.Finding
	// wantErr: the probe fails with an error whose text holds it.
	wantErr string
	// reads: how many reads of the webhook configuration the probe makes
	// (Config; 0: not checked).
	reads int
}

func runProbeRows(t *testing.T, runtimeCA *pki.CA, rows []probeRow, probe func(*Reconciler, context.Context, health.Runtime) (health.Finding, error)) {
	t.Helper()
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			f := newProbeFixture(t, runtimeCA)
			if row.edit != nil {
				row.edit(t, f)
			}
			f.skr.Reset()
			got, err := probe(f.r, ctx, f.rt)
			switch {
			case row.wantErr != "" && (err == nil || !strings.Contains(err.Error(), row.wantErr)):
				t.Fatalf("got %+v, %v; want an error with %q", got, err, row.wantErr)
			case row.wantErr == "" && err != nil:
				t.Fatalf("error %v; want %+v", err, row.want)
			case got != row.want:
				t.Errorf("got  %+v\nwant %+v", got, row.want)
			}
			if n := f.skr.Reads(bundle.ValidatingWebhookConfigurationGVK.Kind); row.reads > 0 && n != row.reads {
				t.Errorf("%d reads of the webhook configuration, want %d", n, row.reads)
			}
		})
	}
}

var (
	wantConfigMissing = health.Finding{Cause: health.CauseWebhookConfigMissing, Detail: "no ValidatingWebhookConfiguration skr-webhook in the SKR"}
	wantConfigAltered = health.Finding{Cause: health.CauseWebhookConfigAltered, Detail: "ValidatingWebhookConfiguration skr-webhook differs from the one vs-controller applied"}
	wantNothingHeard  = health.Finding{Cause: health.CauseNothingHeard,
		Detail: "certificate, trust, pinning, webhook configuration and readiness look right from the KCP: the SKR does not reach the gateway (network, DNS, egress)"}
	wantNoSecret = health.Finding{Cause: health.CauseWebhookNotReady, Detail: "no Secret skr-webhook-tls in the SKR"}
	wantNotReady = health.Finding{Cause: health.CauseWebhookNotReady, Detail: "no ready skr-webhook in the SKR"}
)

// TestProbeConfig: the webhook configuration check, row by row.
func TestProbeConfig(t *testing.T) {
	runtimeCA := pki.MustCA(t, "runtime CA")
	forget := func(_ *testing.T, f *probeFixture) { f.r.memo.ForgetPrefix("") }
	rows := []probeRow{
		{name: "healthy: at the resourceVersion the pass applied, one metadata read", reads: 1},
		{name: "healthy, not known (a restarted vs-controller): read in full and compared", edit: forget, reads: 2},
		{name: "missing", edit: func(t *testing.T, f *probeFixture) { f.deleteSKR(t, f.webhookConfig(t)) }, want: wantConfigMissing, reads: 1},
		{name: "altered under vs-controller's hash", edit: func(t *testing.T, f *probeFixture) {
			vwc := f.webhookConfig(t)
			vwc.Webhooks[0].TimeoutSeconds = ptrTo(int32(29))
			f.updateSKR(t, vwc)
		}, want: wantConfigAltered, reads: 2},
		{name: "altered: the hash annotation removed", edit: func(t *testing.T, f *probeFixture) {
			vwc := f.webhookConfig(t)
			delete(vwc.Annotations, diffapply.HashAnnotation)
			f.updateSKR(t, vwc)
		}, want: wantConfigAltered, reads: 2},
		{name: "another hash: vs-controller's own change still to be pushed", edit: func(t *testing.T, f *probeFixture) {
			vwc := f.webhookConfig(t)
			vwc.Annotations[diffapply.HashAnnotation] = "0123456789abcdef01234567"
			vwc.Webhooks[0].TimeoutSeconds = ptrTo(int32(29))
			f.updateSKR(t, vwc)
		}, reads: 2},
		{name: "compared, then known at its resourceVersion", edit: func(t *testing.T, f *probeFixture) {
			forget(t, f)
			if got, err := f.r.Config(ctx, f.rt); err != nil || !got.Healthy() {
				t.Fatalf("first check: %+v, %v", got, err)
			}
		}, reads: 1},
		{name: "SKR unreachable: an error", edit: func(_ *testing.T, f *probeFixture) {
			f.skr.Fail(fakecluster.Get, bundle.ValidatingWebhookConfigurationGVK.Kind, "", fakecluster.ErrUnreachable, 1)
		}, wantErr: "connection refused"},
		{name: "no kubeconfig: an error", edit: func(t *testing.T, f *probeFixture) {
			if err := f.kcp.Delete(ctx, fakecluster.KubeconfigSecret(kymaNS, "runtime-a", true)); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "no kubeconfig Secret"},
		{name: "the runtime certificate not issued (to compare with): an error", edit: func(t *testing.T, f *probeFixture) {
			forget(t, f)
			f.deleteIssued(t)
		}, wantErr: "runtime certificate not issued"},
		// Order: a missing configuration is found before anything is
		// compared (nor the certificate read to build the desired one).
		{name: "order: missing before the certificate to compare with", edit: func(t *testing.T, f *probeFixture) {
			forget(t, f)
			f.deleteIssued(t)
			f.deleteSKR(t, f.webhookConfig(t))
		}, want: wantConfigMissing, reads: 1},
	}
	runProbeRows(t, runtimeCA, rows, (*Reconciler).Config)
}

// TestProbeSilent: the diagnosis of a silent runtime, row by row.
func TestProbeSilent(t *testing.T) {
	runtimeCA, stranger := pki.MustCA(t, "runtime CA"), pki.MustCA(t, "stranger CA")
	san := []string{"a.example.com"}
	past, future := time.Now().Add(-48*time.Hour), time.Now().Add(48*time.Hour)
	expired := issue(t, runtimeCA, pki.LeafOptions{CommonName: "runtime-a", DNSNames: san, NotBefore: past, NotAfter: past.Add(24 * time.Hour)})
	notYet := issue(t, runtimeCA, pki.LeafOptions{CommonName: "runtime-a", DNSNames: san, NotBefore: future, NotAfter: future.Add(24 * time.Hour)})
	foreign := issue(t, stranger, pki.LeafOptions{CommonName: "runtime-a", DNSNames: san})
	unknown := issue(t, runtimeCA, pki.LeafOptions{CommonName: "runtime-x", DNSNames: san})
	noSAN := issue(t, runtimeCA, pki.LeafOptions{CommonName: "runtime-a", DNSNames: []string{"b.example.com"}})
	domainless := issue(t, runtimeCA, pki.LeafOptions{CommonName: "runtime-b", DNSNames: san})
	twoCNs := issue(t, runtimeCA, pki.LeafOptions{CommonName: "runtime-a", ExtraCommonNames: []string{"runtime-b"}, DNSNames: san})
	expiredUnknown := issue(t, runtimeCA, pki.LeafOptions{CommonName: "runtime-x", DNSNames: san, NotBefore: past, NotAfter: past.Add(24 * time.Hour)})
	notYetForeign := issue(t, stranger, pki.LeafOptions{CommonName: "runtime-a", DNSNames: san, NotBefore: future, NotAfter: future.Add(24 * time.Hour)})
	foreignUnknown := issue(t, stranger, pki.LeafOptions{CommonName: "runtime-x", DNSNames: san})

	unparsable := health.Finding{Cause: health.CauseCAUntrusted, Detail: "the SKR's client certificate cannot be parsed"}
	expiredAt := func(l *pki.Leaf) health.Finding {
		return health.Finding{Cause: health.CauseCertificateExpired, Detail: "the SKR's client certificate expired at " + l.Cert.NotAfter.UTC().Format(time.RFC3339)}
	}
	validFrom := func(l *pki.Leaf) health.Finding {
		return health.Finding{Cause: health.CauseCertificateNotYetValid, Detail: "the SKR's client certificate is valid from " + l.Cert.NotBefore.UTC().Format(time.RFC3339)}
	}
	gatewayUntrusted := health.Finding{Cause: health.CauseCAUntrusted,
		Detail: "the SKR's client certificate (issuer CN=stranger CA) is not signed by a CA of the gateway's client CA bundle"}
	unknownRuntime := health.Finding{Cause: health.CauseUnknownRuntime, Detail: `ext-authz would deny: unknown-runtime: no Kyma for runtime "runtime-x"`}
	sanMismatch := health.Finding{Cause: health.CauseSANMismatch,
		Detail: `ext-authz would deny: san-mismatch: no DNS SAN of the certificate of runtime "runtime-a" is its ` + contract.AnnotationSKRDomain}

	put := func(l *pki.Leaf) func(*testing.T, *probeFixture) {
		return func(t *testing.T, f *probeFixture) { f.clientCert(t, l.CertPEM) }
	}
	noDeployment := func(t *testing.T, f *probeFixture) {
		f.deleteSKR(t, &appsv1.Deployment{ObjectMeta: metaOf(types.NamespacedName{Namespace: bundle.DefaultNamespace, Name: bundle.Name})})
	}
	unready := func(t *testing.T, f *probeFixture) {
		d := &appsv1.Deployment{}
		if err := f.skr.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.Name}, d); err != nil {
			t.Fatal(err)
		}
		d.Status.ReadyReplicas = 0
		if err := f.skr.Status().Update(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	noSecretInSKR := func(t *testing.T, f *probeFixture) {
		f.deleteSKR(t, &corev1.Secret{ObjectMeta: metaOf(types.NamespacedName{Namespace: bundle.DefaultNamespace, Name: bundle.SecretName})})
	}
	// readyWithCA: the readiness check of a webhook not run as pods
	// (takeover.URLReady): ready only when handed the runtime CA bundle
	// want, the one the webhook's serving certificate is verified with.
	readyWithCA := func(f *probeFixture, want []byte) {
		f.r.Adoption.Ready = func(_ context.Context, _ client.Client, key client.ObjectKey, tls *certificates.TLS) (bool, error) {
			return key == client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.Name} && bytes.Equal(tls.CA, want) &&
				bytes.Equal(tls.Cert, f.issued.Data[certificates.KeyCert]) && bytes.Equal(tls.Key, f.issued.Data[certificates.KeyKey]), nil
		}
	}
	then := func(edits ...func(*testing.T, *probeFixture)) func(*testing.T, *probeFixture) {
		return func(t *testing.T, f *probeFixture) {
			for _, e := range edits {
				e(t, f)
			}
		}
	}
	keeper := func(t *testing.T, f *probeFixture) { f.withKeeper(t) }

	rows := []probeRow{
		{name: "nothing wrong in sight: nothing-heard", want: wantNothingHeard},
		{name: "no Secret skr-webhook-tls", edit: noSecretInSKR, want: wantNoSecret},
		{name: "client certificate unparsable", edit: func(t *testing.T, f *probeFixture) { f.clientCert(t, []byte("not a certificate")) }, want: unparsable},
		{name: "client certificate expired", edit: put(expired), want: expiredAt(expired)},
		{name: "client certificate not yet valid", edit: put(notYet), want: validFrom(notYet)},
		{name: "client certificate of a CA the gateway does not trust", edit: then(keeper, put(foreign)), want: gatewayUntrusted},
		{name: "a CA the gateway does not trust, no trust keeper: not judged", edit: put(foreign), want: wantNothingHeard},
		{name: "ext-authz: unknown runtime", edit: put(unknown), want: unknownRuntime},
		{name: "ext-authz: SAN mismatch", edit: put(noSAN), want: sanMismatch},
		{name: "ext-authz: the Kyma has no skr-domain", edit: put(domainless), want: health.Finding{Cause: health.CauseSANMismatch,
			Detail: `ext-authz would deny: domain-not-set: Kyma of runtime "runtime-b" has no ` + contract.AnnotationSKRDomain + " annotation"}},
		{name: "ext-authz: another denial (two CNs)", edit: put(twoCNs), want: health.Finding{Cause: health.CauseCAUntrusted,
			Detail: "ext-authz would deny: invalid-certificate: certificate has 2 CNs, want exactly one"}},
		// A runtime ext-authz would not know, but the Kymas cannot be read:
		// not a denial, the diagnosis goes on.
		{name: "ext-authz cannot tell (Kyma lookup fails): judged on", edit: then(put(unknown), func(_ *testing.T, f *probeFixture) {
			f.kcp.Fail(fakecluster.List, "Kyma", "", apierrors.NewInternalError(errNoKymas), -1)
		}), want: wantNothingHeard},
		{name: "skr-webhook Deployment not ready", edit: unready, want: wantNotReady},
		{name: "no skr-webhook Deployment", edit: noDeployment, want: wantNotReady},
		{name: "readiness gets the runtime certificate's ca.crt without a trust keeper", edit: func(_ *testing.T, f *probeFixture) {
			readyWithCA(f, f.runtimeCA.PEM)
		}, want: wantNothingHeard},
		{name: "readiness gets the keeper's runtime CA bundle", edit: func(t *testing.T, f *probeFixture) {
			f.withKeeper(t)
			readyWithCA(f, trust.EncodeBundle([]*x509.Certificate{f.runtimeCA.Cert}))
		}, want: wantNothingHeard},
		{name: "readiness refused: not ready", edit: func(_ *testing.T, f *probeFixture) { readyWithCA(f, []byte("another CA")) }, want: wantNotReady},

		{name: "SKR unreachable (the Secret): an error", edit: func(_ *testing.T, f *probeFixture) {
			f.skr.Fail(fakecluster.Get, "Secret", bundle.SecretName, fakecluster.ErrUnreachable, 1)
		}, wantErr: "connection refused"},
		{name: "SKR unreachable (readiness): an error", edit: func(_ *testing.T, f *probeFixture) {
			f.skr.Fail(fakecluster.Get, "Deployment", bundle.Name, fakecluster.ErrUnreachable, 1)
		}, wantErr: "connection refused"},
		{name: "the runtime certificate not issued (readiness): an error", edit: func(t *testing.T, f *probeFixture) { f.deleteIssued(t) },
			wantErr: "runtime certificate not issued"},
		{name: "no kubeconfig: an error", edit: func(t *testing.T, f *probeFixture) {
			if err := f.kcp.Delete(ctx, fakecluster.KubeconfigSecret(kymaNS, "runtime-a", true)); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "no kubeconfig Secret"},

		// Order: two faults at once, the earlier check wins.
		{name: "order: no Secret before readiness", edit: then(noSecretInSKR, noDeployment), want: wantNoSecret},
		{name: "order: unparsable before readiness", edit: then(func(t *testing.T, f *probeFixture) { f.clientCert(t, nil) }, unready), want: unparsable},
		{name: "order: expired before ext-authz", edit: put(expiredUnknown), want: expiredAt(expiredUnknown)},
		{name: "order: not yet valid before the gateway's CA", edit: then(keeper, put(notYetForeign)), want: validFrom(notYetForeign)},
		{name: "order: the gateway's CA before ext-authz", edit: then(keeper, put(foreignUnknown)), want: gatewayUntrusted},
		{name: "order: ext-authz before readiness", edit: then(put(noSAN), noDeployment), want: sanMismatch},
		{name: "order: a certificate cause before the KCP's certificate is read", edit: then(put(expired), func(t *testing.T, f *probeFixture) { f.deleteIssued(t) }),
			want: expiredAt(expired)},
	}
	runProbeRows(t, runtimeCA, rows, (*Reconciler).Silent)
}

var errNoKymas = errors.New("etcd timeout")

func metaOf(key types.NamespacedName) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}
}

// TestChainEvaluate: the checks run in order; the first that finds a cause
// or fails ends the chain, the ones after it are not run; a chain whose
// checks all pass is healthy.
func TestChainEvaluate(t *testing.T) {
	var ran []string
	pass := func(name string) check {
		return func(context.Context, *probe) (health.Finding, error) {
			ran = append(ran, name)
			return health.Finding{}, nil
		}
	}
	find := func(name string, c health.Cause) check {
		return func(context.Context, *probe) (health.Finding, error) {
			ran = append(ran, name)
			return health.Finding{Cause: c, Detail: name}, nil
		}
	}
	fail := func(name string) check {
		return func(context.Context, *probe) (health.Finding, error) {
			ran = append(ran, name)
			return health.Finding{}, errors.New(name)
		}
	}
	for _, tc := range []struct {
		name    string
		c       chain
		want    health.Finding
		wantErr string
		ran     string
	}{
		{"empty: healthy", nil, health.Finding{}, "", ""},
		{"all pass: healthy", chain{pass("a"), pass("b")}, health.Finding{}, "", "a b"},
		{"the first finding wins", chain{pass("a"), find("b", health.CauseCertificateExpired), find("c", health.CauseUnknownRuntime)},
			health.Finding{Cause: health.CauseCertificateExpired, Detail: "b"}, "", "a b"},
		{"an error ends it", chain{fail("a"), find("b", health.CauseUnknownRuntime)}, health.Finding{}, "a", "a"},
		{"a finding before an error", chain{find("a", health.CauseWebhookNotReady), fail("b")},
			health.Finding{Cause: health.CauseWebhookNotReady, Detail: "a"}, "", "a"},
	} {
		ran = nil
		got, err := tc.c.evaluate(ctx, &probe{})
		if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) || strings.Join(ran, " ") != tc.ran {
			t.Errorf("%s: %+v, %v, ran %q; want %+v, %q, ran %q", tc.name, got, err, ran, tc.want, tc.wantErr, tc.ran)
		}
	}
}
