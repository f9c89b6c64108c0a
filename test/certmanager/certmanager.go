// Package certmanager is a TEST STAND-IN for cert-manager's controller with a
// CA Issuer, for the local environment and the test suites, where
// cert-manager cannot run (ARCHITECTURE.md §4).
//
// What it does, as cert-manager's CA issuer does: for every Certificate
// (cert-manager.io/v1) in its namespace it signs a new key pair with the
// given CA, with the Certificate's commonName and dnsNames, usable for server
// and client auth; writes the Secret spec.secretName (type kubernetes.io/tls)
// with ca.crt, tls.crt and tls.key, the spec.secretTemplate labels and
// annotations and cert-manager's cert-manager.io/* annotations; and sets the
// Certificate's Ready condition and notBefore/notAfter. It re-issues when
// the Secret is missing, incomplete or no longer matches the spec (common
// name, DNS names, CA), and when the Issuing condition is set to True (what
// `cmctl renew` does).
//
// What it does not do: look at issuerRef (every Certificate is signed by
// the one CA, whatever issuer it names), renew before expiry, honour
// duration, privateKey, usages, IP/URI/email SANs, keystores or
// additionalOutputFormats, create CertificateRequests, or delete the Secret
// when the Certificate goes.
package certmanager

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// FieldOwner is the field manager of the stand-in's writes.
const FieldOwner = "cert-manager-standin"

// Secret keys and annotations, as cert-manager writes them.
const (
	KeyCA   = "ca.crt"
	KeyCert = corev1.TLSCertKey
	KeyKey  = corev1.TLSPrivateKeyKey
)

// Run signs the Certificates in namespace with ca until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, ca *pki.CA, namespace string) error {
	mgr, err := NewManager(cfg, ca, namespace)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// NewManager is a manager running the stand-in, to start or to add to.
func NewManager(cfg *rest.Config, ca *pki.CA, namespace string) (manager.Manager, error) {
	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(certmanagerv1.AddToScheme(scheme))
	// Issuing is cheap; the stand-in must not be the bottleneck of a test.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 200, 400
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	r := &Reconciler{Client: mgr.GetClient(), CA: ca}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("cert-manager-standin").
		For(&certmanagerv1.Certificate{}).
		// A deleted or edited Secret is re-issued, as cert-manager does.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.certificatesForSecret)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
	if err != nil {
		return nil, err
	}
	return mgr, nil
}

// Reconciler issues Certificates.
type Reconciler struct {
	Client client.Client
	CA     *pki.CA
	// Validity of issued certificates; a day when 0.
	Validity time.Duration
}

func (r *Reconciler) certificatesForSecret(ctx context.Context, s client.Object) []reconcile.Request {
	name := s.GetAnnotations()[certmanagerv1.CertificateNameKey]
	if name == "" {
		var list certmanagerv1.CertificateList
		if err := r.Client.List(ctx, &list, client.InNamespace(s.GetNamespace())); err != nil {
			return nil
		}
		for i := range list.Items {
			if list.Items[i].Spec.SecretName == s.GetName() {
				name = list.Items[i].Name
			}
		}
	}
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: s.GetNamespace(), Name: name}}}
}

// Reconcile issues one Certificate when its Secret is missing or stale.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	crt := &certmanagerv1.Certificate{}
	if err := r.Client.Get(ctx, req.NamespacedName, crt); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if crt.DeletionTimestamp != nil || crt.Spec.SecretName == "" {
		return reconcile.Result{}, nil
	}
	secret := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName}, secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	if err == nil && !issuingRequested(crt) && r.matches(crt, secret) {
		return reconcile.Result{}, r.setReady(ctx, crt, secret)
	}
	leaf, err := r.CA.Issue(pki.LeafOptions{
		CommonName: crt.Spec.CommonName,
		DNSNames:   crt.Spec.DNSNames,
		NotAfter:   time.Now().Add(r.validity()),
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: crt.Spec.SecretName, Namespace: crt.Namespace},
		Type:       corev1.SecretTypeTLS,
	}
	op, err := ctrl.CreateOrUpdate(ctx, r.Client, want, func() error {
		if tpl := crt.Spec.SecretTemplate; tpl != nil {
			for k, v := range tpl.Labels {
				metav1.SetMetaDataLabel(&want.ObjectMeta, k, v)
			}
			for k, v := range tpl.Annotations {
				metav1.SetMetaDataAnnotation(&want.ObjectMeta, k, v)
			}
		}
		for k, v := range map[string]string{
			certmanagerv1.CertificateNameKey:       crt.Name,
			certmanagerv1.IssuerNameAnnotationKey:  crt.Spec.IssuerRef.Name,
			certmanagerv1.IssuerKindAnnotationKey:  crt.Spec.IssuerRef.Kind,
			certmanagerv1.IssuerGroupAnnotationKey: crt.Spec.IssuerRef.Group,
			certmanagerv1.CommonNameAnnotationKey:  crt.Spec.CommonName,
			certmanagerv1.AltNamesAnnotationKey:    strings.Join(crt.Spec.DNSNames, ","),
		} {
			metav1.SetMetaDataAnnotation(&want.ObjectMeta, k, v)
		}
		want.Data = map[string][]byte{KeyCA: r.CA.PEM, KeyCert: leaf.CertPEM, KeyKey: leaf.KeyPEM}
		return nil
	})
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("write Secret %s: %w (%s)", crt.Spec.SecretName, err, op)
	}
	return reconcile.Result{}, r.setReady(ctx, crt, want)
}

func (r *Reconciler) validity() time.Duration {
	if r.Validity == 0 {
		return 24 * time.Hour
	}
	return r.Validity
}

func issuingRequested(crt *certmanagerv1.Certificate) bool {
	for _, c := range crt.Status.Conditions {
		if c.Type == certmanagerv1.CertificateConditionIssuing && c.Status == cmmeta.ConditionTrue {
			return true
		}
	}
	return false
}

// matches reports whether the Secret holds a valid certificate for the
// spec, signed by our CA, with its key.
func (r *Reconciler) matches(crt *certmanagerv1.Certificate, s *corev1.Secret) bool {
	if !bytes.Equal(s.Data[KeyCA], r.CA.PEM) || len(s.Data[KeyKey]) == 0 {
		return false
	}
	cert, err := parseCert(s.Data[KeyCert])
	if err != nil || time.Now().After(cert.NotAfter) {
		return false
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: r.CA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return false
	}
	have, want := slices.Clone(cert.DNSNames), slices.Clone(crt.Spec.DNSNames)
	sort.Strings(have)
	sort.Strings(want)
	return cert.Subject.CommonName == crt.Spec.CommonName && slices.Equal(have, want)
}

func parseCert(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, fmt.Errorf("no PEM block")
	}
	return x509.ParseCertificate(b.Bytes)
}

// setReady sets Ready=True (and clears Issuing) when it is not already so.
func (r *Reconciler) setReady(ctx context.Context, crt *certmanagerv1.Certificate, s *corev1.Secret) error {
	cert, err := parseCert(s.Data[KeyCert])
	if err != nil {
		return err
	}
	next := crt.DeepCopy()
	now := metav1.Now()
	conds := make([]certmanagerv1.CertificateCondition, 0, len(next.Status.Conditions)+1)
	ready := false
	for _, c := range next.Status.Conditions {
		switch c.Type {
		case certmanagerv1.CertificateConditionIssuing:
			continue
		case certmanagerv1.CertificateConditionReady:
			if c.Status != cmmeta.ConditionTrue || c.ObservedGeneration != crt.Generation {
				c = readyCondition(now, crt.Generation)
			}
			ready = true
		}
		conds = append(conds, c)
	}
	if !ready {
		conds = append(conds, readyCondition(now, crt.Generation))
	}
	next.Status.Conditions = conds
	next.Status.NotBefore = &metav1.Time{Time: cert.NotBefore}
	next.Status.NotAfter = &metav1.Time{Time: cert.NotAfter}
	if statusEqual(crt.Status, next.Status) {
		return nil
	}
	return r.Client.Status().Update(ctx, next)
}

func readyCondition(now metav1.Time, gen int64) certmanagerv1.CertificateCondition {
	return certmanagerv1.CertificateCondition{
		Type: certmanagerv1.CertificateConditionReady, Status: cmmeta.ConditionTrue,
		LastTransitionTime: &now, Reason: "Ready", Message: "Certificate is up to date and has not expired",
		ObservedGeneration: gen,
	}
}

func statusEqual(a, b certmanagerv1.CertificateStatus) bool {
	if len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return timeEqual(a.NotBefore, b.NotBefore) && timeEqual(a.NotAfter, b.NotAfter)
}

func timeEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Unix() == b.Unix()
}
