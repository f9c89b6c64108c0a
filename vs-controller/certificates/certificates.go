// Package certificates builds and reads a runtime's cert-manager
// Certificate in the KCP (docs/architecture.md §4.3): named
// <runtime-id>-webhook-tls like its Secret, in the Kyma's namespace and
// owned by the Kyma, with the runtime ID as common name. The issued
// certificate is the SKR webhook's serving and client certificate.
//
// It only builds and reads; writing is the runtime reconciler's job.
package certificates

import (
	"context"
	"fmt"
	"strings"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
)

const (
	// Suffix: runtime ID + Suffix names the runtime's Certificate and its
	// Secret.
	Suffix = "-webhook-tls"
	// MaxCommonNameLength bounds a runtime ID (the common name).
	MaxCommonNameLength = 64
)

// GVK of cert-manager's Certificate.
var GVK = certmanagerv1.SchemeGroupVersion.WithKind("Certificate")

// Name is the name of a runtime's Certificate and its Secret.
func Name(runtimeID string) string { return runtimeID + Suffix }

// RuntimeIDOfSecret is the runtime ID a Certificate Secret's name carries;
// false when the name is not a Certificate Secret's.
func RuntimeIDOfSecret(secretName string) (string, bool) {
	id, ok := strings.CutSuffix(secretName, Suffix)
	return id, ok && id != ""
}

// ValidRuntimeID fails when id cannot name a Certificate or be its common
// name.
func ValidRuntimeID(id string) error {
	if errs := validation.IsDNS1123Subdomain(Name(id)); len(errs) > 0 || len(id) > MaxCommonNameLength {
		return fmt.Errorf("runtime ID %q cannot name a certificate: it must be a DNS-1123 subdomain of at most %d characters", id, MaxCommonNameLength)
	}
	return nil
}

// PrivateKey is the runtime certificates' key: ECDSA P-256, a new key at
// every issuance. Set explicitly because cert-manager's default is RSA 2048
// (and Lifecycle Manager's RSA 4096): cert-manager makes a key at every
// issuance, for every runtime, and again for all of them at a CA rotation —
// a P-256 key takes microseconds where an RSA 2048 key takes tens of
// milliseconds of cert-manager's CPU (4096: hundreds) —, the webhook signs
// every mTLS handshake to the gateway with it (P-256 signing is several
// times cheaper than RSA 2048's), and it is as strong as the CAs' own
// P-256 keys (manifests/kcp/base/pki.yaml; RSA 2048 is weaker).
var PrivateKey = certmanagerv1.CertificatePrivateKey{
	Algorithm: certmanagerv1.ECDSAKeyAlgorithm, Size: 256, RotationPolicy: certmanagerv1.RotationPolicyAlways,
}

// Desired is runtime id's Certificate, owned by the Kyma: DNS names the
// skr-domain, then dnsNames (deduplicated, empty ones left out); its key
// PrivateKey. Its secretTemplate labels the Secret
// contract.LabelPartOf=contract.PartOf: vs-controller's cache holds only
// Secrets so labelled.
func Desired(kyma client.Object, id, domain string, issuer cmmeta.IssuerReference, dnsNames []string) *certmanagerv1.Certificate {
	dns := []string{domain}
	seen := map[string]bool{domain: true}
	for _, n := range dnsNames {
		if n != "" && !seen[n] {
			seen[n] = true
			dns = append(dns, n)
		}
	}
	return &certmanagerv1.Certificate{
		ObjectMeta: metav1.ObjectMeta{
			Name:            Name(id),
			Namespace:       kyma.GetNamespace(),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(kyma, v1beta2.KymaGroupVersionKind)},
		},
		Spec: certmanagerv1.CertificateSpec{
			CommonName: id,
			DNSNames:   dns,
			SecretName: Name(id),
			SecretTemplate: &certmanagerv1.CertificateSecretTemplate{
				Labels: map[string]string{contract.LabelPartOf: contract.PartOf},
			},
			IssuerRef:  issuer,
			PrivateKey: ptr.To(PrivateKey),
			Usages: []certmanagerv1.KeyUsage{
				certmanagerv1.UsageDigitalSignature, certmanagerv1.UsageKeyEncipherment,
				certmanagerv1.UsageServerAuth, certmanagerv1.UsageClientAuth,
			},
		},
	}
}

// Secret keys, as cert-manager writes them.
const (
	KeyCA   = "ca.crt"
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
)

// TLS is a runtime's issued certificate: the Secret keys KeyCA, KeyCert and
// KeyKey.
type TLS struct{ CA, Cert, Key []byte }

// Issued reads runtime id's certificate from its Secret in namespace; nil
// without error when the Secret does not exist or lacks one of ca.crt,
// tls.crt, tls.key.
func Issued(ctx context.Context, c client.Reader, namespace, id string) (*TLS, error) {
	s := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: Name(id)}, s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t := &TLS{CA: s.Data[KeyCA], Cert: s.Data[KeyCert], Key: s.Data[KeyKey]}
	if len(t.CA) == 0 || len(t.Cert) == 0 || len(t.Key) == 0 {
		return nil, nil
	}
	return t, nil
}
