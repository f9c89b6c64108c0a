// Package certmanager is a TEST STAND-IN for cert-manager's controller with
// SelfSigned and CA issuers, for the local environment and the test suites,
// where cert-manager cannot run (docs/architecture.md §1).
//
// What it does, as cert-manager does:
//   - resolves a Certificate's issuerRef: kind Issuer (the default) is looked
//     up in the Certificate's own namespace — a namespaced Issuer serves only
//     its namespace; a Certificate elsewhere naming it is not issued and gets
//     Ready=False (reason Pending, the message cert-manager's
//     CertificateRequest carries); kind ClusterIssuer reads its CA Secret
//     from the cluster resource namespace. Issuers of other groups are left
//     alone.
//   - SelfSigned issuers sign the certificate with its own key; CA issuers
//     with the key pair (tls.crt, tls.key) of spec.ca.secretName, capping
//     the leaf's notAfter at the CA's;
//   - writes the Secret spec.secretName (type kubernetes.io/tls) with ca.crt,
//     tls.crt and tls.key, the spec.secretTemplate labels and annotations and
//     cert-manager's cert-manager.io/* annotations (a changed template is
//     put on an issued Secret without re-issuing it); sets Ready,
//     notBefore/notAfter, renewalTime and revision;
//   - issues when the Secret is missing, incomplete or no longer matches the
//     spec (common name, DNS names, isCA, issuer), when renewalTime is
//     reached (spec.duration, default 90 days; spec.renewBefore, default a
//     third of the duration), and when the Issuing condition is set to True
//     (what `cmctl renew` does);
//   - privateKey.rotationPolicy: Always (the default) makes a new key at
//     every issuance, Never keeps the Secret's key;
//   - like cert-manager it does NOT re-issue a certificate because its
//     issuer's CA changed: that takes a renewal request.
//
// What it does not do: privateKey algorithm/size (always ECDSA P-256),
// usages (always server and client auth), IP/URI/email SANs, keystores,
// additionalOutputFormats, CertificateRequests, other issuer types, or delete
// the Secret when the Certificate goes.
package certmanager

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"sort"
	"strings"
	"sync"
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

// Secret keys, as cert-manager writes them.
const (
	KeyCA   = "ca.crt"
	KeyCert = corev1.TLSCertKey
	KeyKey  = corev1.TLSPrivateKeyKey
)

// Defaults of cert-manager.
const (
	DefaultDuration                 = 90 * 24 * time.Hour
	DefaultClusterResourceNamespace = "cert-manager"
	// ReasonPending is the Ready=False reason of a Certificate whose issuer
	// cannot sign (not found, CA Secret missing or invalid).
	ReasonPending = "Pending"
)

// Options of the stand-in.
type Options struct {
	// Namespaces whose Certificates and Issuers are served; all when empty.
	Namespaces []string
	// ClusterResourceNamespace holds ClusterIssuers' CA Secrets;
	// DefaultClusterResourceNamespace when empty (it is watched too).
	ClusterResourceNamespace string
}

// Run serves the Certificates until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	mgr, err := NewManager(cfg, o)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// NewManager is a manager running the stand-in, to start or to add to.
func NewManager(cfg *rest.Config, o Options) (manager.Manager, error) {
	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(certmanagerv1.AddToScheme(scheme))
	if o.ClusterResourceNamespace == "" {
		o.ClusterResourceNamespace = DefaultClusterResourceNamespace
	}
	var nss map[string]cache.Config
	if len(o.Namespaces) > 0 {
		nss = map[string]cache.Config{o.ClusterResourceNamespace: {}}
		for _, ns := range o.Namespaces {
			nss[ns] = cache.Config{}
		}
	}
	// Issuing is cheap; the stand-in must not be the bottleneck of a test.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 200, 400
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: nss},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	r := &Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), ClusterResourceNamespace: o.ClusterResourceNamespace}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("cert-manager-standin").
		For(&certmanagerv1.Certificate{}).
		// A deleted or edited Secret is re-issued, as cert-manager does.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.certificatesForSecret)).
		// A Certificate waiting for its Issuer is issued once it exists.
		Watches(&certmanagerv1.Issuer{}, handler.EnqueueRequestsFromMapFunc(r.certificatesForIssuer)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
	if err != nil {
		return nil, err
	}
	return mgr, nil
}

// InstallCA makes ca a CA Issuer named name in namespace: a Secret name with
// the CA's key pair (tls.crt, tls.key, ca.crt) and an Issuer name whose
// spec.ca.secretName is that Secret.
func InstallCA(ctx context.Context, c client.Client, ca *pki.CA, namespace, name string) error {
	kd, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			KeyCA: ca.PEM, KeyCert: ca.PEM,
			KeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}),
		},
	}
	if err := c.Create(ctx, s); err != nil {
		return fmt.Errorf("CA Secret: %w", err)
	}
	issuer := &certmanagerv1.Issuer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	issuer.Spec.CA = &certmanagerv1.CAIssuer{SecretName: name}
	if err := c.Create(ctx, issuer); err != nil {
		return fmt.Errorf("create the CA Issuer: %w", err)
	}
	return nil
}

// Reconciler issues Certificates.
type Reconciler struct {
	Client client.Client
	// Reader reads Secrets uncached, so a just-written Secret is never
	// mistaken for a stale one; Client when nil.
	Reader                   client.Reader
	ClusterResourceNamespace string

	// fulfilled: Certificate key -> resourceVersion whose Issuing request was
	// served (the cache may show that version again before our status
	// update arrives).
	fulfilled sync.Map
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

// certificatesForIssuer: Certificates in the Issuer's namespace that name it
// and are not Ready.
func (r *Reconciler) certificatesForIssuer(ctx context.Context, iss client.Object) []reconcile.Request {
	var list certmanagerv1.CertificateList
	if err := r.Client.List(ctx, &list, client.InNamespace(iss.GetNamespace())); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		c := &list.Items[i]
		if c.Spec.IssuerRef.Name == iss.GetName() && issuerKind(c) == "Issuer" && !condTrue(c, certmanagerv1.CertificateConditionReady) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
		}
	}
	return reqs
}

func issuerKind(c *certmanagerv1.Certificate) string {
	if c.Spec.IssuerRef.Kind == "" {
		return "Issuer"
	}
	return c.Spec.IssuerRef.Kind
}

// signer signs a template: parent and key are the issuer's CA (nil for
// self-signed), caPEM goes into ca.crt.
type signer struct {
	parent *x509.Certificate
	key    crypto.Signer
	caPEM  []byte
}

// errPending: the issuer cannot sign now; the message goes into Ready=False.
type errPending struct{ msg string }

func (e *errPending) Error() string { return e.msg }

func pending(format string, args ...any) error { return &errPending{fmt.Sprintf(format, args...)} }

// resolve finds the issuer a Certificate names, as cert-manager does.
func (r *Reconciler) resolve(ctx context.Context, crt *certmanagerv1.Certificate) (*signer, bool, error) {
	ref := crt.Spec.IssuerRef
	if ref.Group != "" && ref.Group != certmanagerv1.SchemeGroupVersion.Group {
		return nil, false, nil // an external issuer: not ours
	}
	var spec certmanagerv1.IssuerSpec
	secretNS := crt.Namespace
	switch kind := issuerKind(crt); kind {
	case "Issuer":
		iss := &certmanagerv1.Issuer{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: crt.Namespace, Name: ref.Name}, iss); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, true, pending("Referenced %q not found: %v", kind, err)
			}
			return nil, true, err
		}
		spec = iss.Spec
	case "ClusterIssuer":
		iss := &certmanagerv1.ClusterIssuer{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: ref.Name}, iss); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, true, pending("Referenced %q not found: %v", kind, err)
			}
			return nil, true, err
		}
		spec, secretNS = iss.Spec, r.ClusterResourceNamespace
	default:
		return nil, false, nil
	}
	switch {
	case spec.SelfSigned != nil:
		return &signer{}, true, nil
	case spec.CA != nil:
		s := &corev1.Secret{}
		if err := r.reader().Get(ctx, client.ObjectKey{Namespace: secretNS, Name: spec.CA.SecretName}, s); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, true, pending("issuer's CA Secret %s/%s does not exist", secretNS, spec.CA.SecretName)
			}
			return nil, true, err
		}
		cert, err := parseCert(s.Data[KeyCert])
		if err != nil {
			return nil, true, pending("issuer's CA Secret %s/%s: tls.crt: %v", secretNS, spec.CA.SecretName, err)
		}
		key, err := parseKey(s.Data[KeyKey])
		if err != nil {
			return nil, true, pending("issuer's CA Secret %s/%s: tls.key: %v", secretNS, spec.CA.SecretName, err)
		}
		return &signer{parent: cert, key: key, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, true, nil
	default:
		return nil, false, nil // another issuer type: not ours
	}
}

func (r *Reconciler) reader() client.Reader {
	if r.Reader != nil {
		return r.Reader
	}
	return r.Client
}

// Reconcile issues one Certificate when needed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	crt := &certmanagerv1.Certificate{}
	if err := r.Client.Get(ctx, req.NamespacedName, crt); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if crt.DeletionTimestamp != nil || crt.Spec.SecretName == "" {
		return reconcile.Result{}, nil
	}
	sig, ours, err := r.resolve(ctx, crt)
	if !ours {
		return reconcile.Result{}, nil
	}
	if p := (*errPending)(nil); errors.As(err, &p) {
		return reconcile.Result{RequeueAfter: 2 * time.Second}, r.setNotReady(ctx, crt, p.msg)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	secret := &corev1.Secret{}
	err = r.reader().Get(ctx, client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName}, secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	exists := err == nil
	requested := condTrue(crt, certmanagerv1.CertificateConditionIssuing)
	if v, ok := r.fulfilled.Load(req.String()); ok && v == crt.ResourceVersion {
		requested = false // served; our status update has not reached the cache yet
	}
	now := time.Now()
	if exists && !requested {
		if cert, ok := matches(crt, secret); ok {
			renew := renewalTime(crt, cert)
			if now.Before(renew) {
				if err := r.syncSecretTemplate(ctx, crt, secret); err != nil {
					return reconcile.Result{}, err
				}
				return reconcile.Result{RequeueAfter: renew.Sub(now)}, r.setReady(ctx, crt, cert, false)
			}
		}
	}

	var key crypto.Signer
	if exists && crt.Spec.PrivateKey != nil && crt.Spec.PrivateKey.RotationPolicy == certmanagerv1.RotationPolicyNever {
		key, _ = parseKey(secret.Data[KeyKey]) // nil when unusable: a new one
	}
	if key == nil {
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			return reconcile.Result{}, err
		}
	}
	certPEM, caPEM, cert, err := issue(crt, sig, key, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	keyPEM, err := marshalKey(key)
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
			certmanagerv1.IssuerKindAnnotationKey:  issuerKind(crt),
			certmanagerv1.IssuerGroupAnnotationKey: crt.Spec.IssuerRef.Group,
			certmanagerv1.CommonNameAnnotationKey:  crt.Spec.CommonName,
			certmanagerv1.AltNamesAnnotationKey:    strings.Join(crt.Spec.DNSNames, ","),
		} {
			metav1.SetMetaDataAnnotation(&want.ObjectMeta, k, v)
		}
		want.Data = map[string][]byte{KeyCA: caPEM, KeyCert: certPEM, KeyKey: keyPEM}
		return nil
	})
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("write Secret %s: %w (%s)", crt.Spec.SecretName, err, op)
	}
	if requested {
		r.fulfilled.Store(req.String(), crt.ResourceVersion)
	}
	renew := renewalTime(crt, cert)
	return reconcile.Result{RequeueAfter: time.Until(renew)}, r.setReady(ctx, crt, cert, true)
}

// syncSecretTemplate puts spec.secretTemplate's labels and annotations on
// an issued Secret without re-issuing, as cert-manager's post-issuance
// SecretTemplate check does when the template changes. Unlike cert-manager
// it does not remove labels dropped from the template.
func (r *Reconciler) syncSecretTemplate(ctx context.Context, crt *certmanagerv1.Certificate, secret *corev1.Secret) error {
	tpl := crt.Spec.SecretTemplate
	if tpl == nil {
		return nil
	}
	orig := secret.DeepCopy()
	for k, v := range tpl.Labels {
		metav1.SetMetaDataLabel(&secret.ObjectMeta, k, v)
	}
	for k, v := range tpl.Annotations {
		metav1.SetMetaDataAnnotation(&secret.ObjectMeta, k, v)
	}
	if maps.Equal(orig.Labels, secret.Labels) && maps.Equal(orig.Annotations, secret.Annotations) {
		return nil
	}
	if err := r.Client.Patch(ctx, secret, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("apply secretTemplate to Secret %s: %w", crt.Spec.SecretName, err)
	}
	return nil
}

// issue signs a certificate for the spec with key.
func issue(crt *certmanagerv1.Certificate, sig *signer, key crypto.Signer, now time.Time) (certPEM, caPEM []byte, cert *x509.Certificate, err error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, nil, err
	}
	notAfter := now.Add(duration(crt))
	if sig.parent != nil && notAfter.After(sig.parent.NotAfter) {
		notAfter = sig.parent.NotAfter // cert-manager's CA issuer: never outlive the CA
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: crt.Spec.CommonName},
		NotBefore:    now,
		NotAfter:     notAfter,
		DNSNames:     crt.Spec.DNSNames,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if crt.Spec.IsCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage = nil
	}
	parent, signKey := sig.parent, sig.key
	if parent == nil {
		parent, signKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signKey)
	if err != nil {
		return nil, nil, nil, err
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		return nil, nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	caPEM = sig.caPEM
	if sig.parent == nil {
		caPEM = certPEM
	}
	return certPEM, caPEM, cert, nil
}

func duration(crt *certmanagerv1.Certificate) time.Duration {
	if crt.Spec.Duration != nil && crt.Spec.Duration.Duration > 0 {
		return crt.Spec.Duration.Duration
	}
	return DefaultDuration
}

// renewalTime: notAfter - renewBefore (a third of the lifetime by default).
func renewalTime(crt *certmanagerv1.Certificate, cert *x509.Certificate) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	before := life / 3
	if rb := crt.Spec.RenewBefore; rb != nil && rb.Duration > 0 && rb.Duration < life {
		before = rb.Duration
	}
	return cert.NotAfter.Add(-before)
}

func condTrue(crt *certmanagerv1.Certificate, typ certmanagerv1.CertificateConditionType) bool {
	for _, c := range crt.Status.Conditions {
		if c.Type == typ && c.Status == cmmeta.ConditionTrue {
			return true
		}
	}
	return false
}

// matches returns the Secret's certificate when it fits the spec and its
// key; expiry is for the renewal time to judge.
func matches(crt *certmanagerv1.Certificate, s *corev1.Secret) (*x509.Certificate, bool) {
	if len(s.Data[KeyCA]) == 0 {
		return nil, false
	}
	cert, err := parseCert(s.Data[KeyCert])
	if err != nil {
		return nil, false
	}
	key, err := parseKey(s.Data[KeyKey])
	if err != nil {
		return nil, false
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, false
	}
	a := s.Annotations
	if a[certmanagerv1.IssuerNameAnnotationKey] != crt.Spec.IssuerRef.Name || a[certmanagerv1.IssuerKindAnnotationKey] != issuerKind(crt) {
		return nil, false
	}
	have, want := slices.Clone(cert.DNSNames), slices.Clone(crt.Spec.DNSNames)
	sort.Strings(have)
	sort.Strings(want)
	return cert, cert.Subject.CommonName == crt.Spec.CommonName && slices.Equal(have, want) && cert.IsCA == crt.Spec.IsCA
}

func parseCert(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParseCertificate(b.Bytes)
}

func parseKey(data []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("not a signing key")
	}
	return s, nil
}

func marshalKey(key crypto.Signer) ([]byte, error) {
	if k, ok := key.(*ecdsa.PrivateKey); ok {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// setReady sets Ready=True, the validity times and renewal time, clears
// Issuing, and counts a revision when issued.
func (r *Reconciler) setReady(ctx context.Context, crt *certmanagerv1.Certificate, cert *x509.Certificate, issued bool) error {
	next := crt.DeepCopy()
	now := metav1.Now()
	conds := []certmanagerv1.CertificateCondition{}
	for _, c := range next.Status.Conditions {
		if c.Type != certmanagerv1.CertificateConditionIssuing && c.Type != certmanagerv1.CertificateConditionReady {
			conds = append(conds, c)
		}
	}
	ready := certmanagerv1.CertificateCondition{
		Type: certmanagerv1.CertificateConditionReady, Status: cmmeta.ConditionTrue,
		LastTransitionTime: &now, Reason: "Ready", Message: "Certificate is up to date and has not expired",
		ObservedGeneration: crt.Generation,
	}
	for _, c := range crt.Status.Conditions {
		if c.Type == ready.Type && c.Status == ready.Status {
			ready.LastTransitionTime = c.LastTransitionTime
		}
	}
	next.Status.Conditions = append(conds, ready)
	next.Status.NotBefore = &metav1.Time{Time: cert.NotBefore}
	next.Status.NotAfter = &metav1.Time{Time: cert.NotAfter}
	next.Status.RenewalTime = &metav1.Time{Time: renewalTime(crt, cert)}
	if issued {
		next.Status.Revision = ptr.To(ptr.Deref(crt.Status.Revision, 0) + 1)
	}
	if statusEqual(crt.Status, next.Status) {
		return nil
	}
	return r.Client.Status().Update(ctx, next)
}

// setNotReady sets Ready=False with reason Pending and msg.
func (r *Reconciler) setNotReady(ctx context.Context, crt *certmanagerv1.Certificate, msg string) error {
	next := crt.DeepCopy()
	now := metav1.Now()
	conds := []certmanagerv1.CertificateCondition{}
	for _, c := range next.Status.Conditions {
		if c.Type != certmanagerv1.CertificateConditionReady {
			conds = append(conds, c)
		}
	}
	next.Status.Conditions = append(conds, certmanagerv1.CertificateCondition{
		Type: certmanagerv1.CertificateConditionReady, Status: cmmeta.ConditionFalse,
		LastTransitionTime: &now, Reason: ReasonPending, Message: msg, ObservedGeneration: crt.Generation,
	})
	if statusEqual(crt.Status, next.Status) {
		return nil
	}
	return r.Client.Status().Update(ctx, next)
}

func statusEqual(a, b certmanagerv1.CertificateStatus) bool {
	if len(a.Conditions) != len(b.Conditions) || ptr.Deref(a.Revision, 0) != ptr.Deref(b.Revision, 0) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.ObservedGeneration != y.ObservedGeneration || x.Message != y.Message {
			return false
		}
	}
	return timeEqual(a.NotBefore, b.NotBefore) && timeEqual(a.NotAfter, b.NotAfter) && timeEqual(a.RenewalTime, b.RenewalTime)
}

func timeEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Unix() == b.Unix()
}
