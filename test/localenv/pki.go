package localenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// The PKI of manifests/kcp/base/pki.yaml, with lifetimes short enough that
// certificates renew while a test runs.
const (
	// GatewayCAName is the gateway CA's Issuer, Certificate and Secret in
	// GatewayNamespace.
	GatewayCAName = "kcp-gateway-ca"
	// GatewayTLSSecret is the gateway's server Certificate and Secret
	// (the Gateway's credentialName); GatewayTLSSecret+"-cacert" holds
	// the client CA bundle vs-controller writes.
	GatewayTLSSecret = "kcp-gateway-tls"
	// CADuration and CARenewBefore: the CAs renew only on demand in a test.
	CADuration    = 2 * time.Hour
	CARenewBefore = 30 * time.Minute
	// LeafDuration and LeafRenewBefore of the runtime certificates
	// (vs-controller's --certificate-duration/--certificate-renew-before):
	// a runtime certificate is re-issued every LeafDuration-LeafRenewBefore.
	LeafDuration    = 2 * time.Minute
	LeafRenewBefore = 80 * time.Second
	// CASettle is vs-controller's --ca-settle here: no kubelet syncs
	// Secret volumes, the processes read what is written within seconds.
	CASettle = 12 * time.Second
	// IdentitySigningName is the Certificate and Secret in KymaNamespace of
	// ext-authz's identity signing key (tls.key; tls.crt is the verifiers'
	// key set).
	IdentitySigningName = "runtime-watcher-identity-signing"
)

// pkiObjects is a self-signed Issuer -> CA Certificate (new key at every
// renewal) -> CA Issuer in each namespace, and the gateway's server
// Certificate.
func pkiObjects() []client.Object {
	var objs []client.Object
	for _, ca := range []struct{ ns, name, selfSigned string }{
		{KymaNamespace, IssuerName, "runtime-watcher-selfsigned"},
		{GatewayNamespace, GatewayCAName, "kcp-gateway-selfsigned"},
	} {
		objs = append(objs,
			&certmanagerv1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ca.ns, Name: ca.selfSigned},
				Spec: certmanagerv1.IssuerSpec{IssuerConfig: certmanagerv1.IssuerConfig{SelfSigned: &certmanagerv1.SelfSignedIssuer{}}}},
			&certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: ca.ns, Name: ca.name},
				Spec: certmanagerv1.CertificateSpec{
					IsCA: true, CommonName: ca.name, SecretName: ca.name,
					// As manifests/kcp/base/pki.yaml: the label of vs-controller's Secret cache.
					SecretTemplate: &certmanagerv1.CertificateSecretTemplate{Labels: map[string]string{contract.LabelPartOf: contract.PartOf}},
					Duration:       &metav1.Duration{Duration: CADuration}, RenewBefore: &metav1.Duration{Duration: CARenewBefore},
					PrivateKey: &certmanagerv1.CertificatePrivateKey{RotationPolicy: certmanagerv1.RotationPolicyAlways,
						Algorithm: certmanagerv1.ECDSAKeyAlgorithm, Size: 256},
					IssuerRef: cmmeta.IssuerReference{Group: "cert-manager.io", Kind: "Issuer", Name: ca.selfSigned},
				}},
			&certmanagerv1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ca.ns, Name: ca.name},
				Spec: certmanagerv1.IssuerSpec{IssuerConfig: certmanagerv1.IssuerConfig{CA: &certmanagerv1.CAIssuer{SecretName: ca.name}}}},
		)
	}
	// ext-authz's identity signing key, as manifests/kcp/base/pki.yaml:
	// Ed25519, self-signed (the certificate only carries the public key to
	// the verifiers), a new key at every renewal.
	objs = append(objs, &certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: KymaNamespace, Name: IdentitySigningName},
		Spec: certmanagerv1.CertificateSpec{
			CommonName: IdentitySigningName, SecretName: IdentitySigningName,
			Duration: &metav1.Duration{Duration: CADuration}, RenewBefore: &metav1.Duration{Duration: CARenewBefore},
			PrivateKey: &certmanagerv1.CertificatePrivateKey{RotationPolicy: certmanagerv1.RotationPolicyAlways,
				Algorithm: certmanagerv1.Ed25519KeyAlgorithm},
			Usages:    []certmanagerv1.KeyUsage{certmanagerv1.UsageDigitalSignature},
			IssuerRef: cmmeta.IssuerReference{Group: "cert-manager.io", Kind: "Issuer", Name: "runtime-watcher-selfsigned"},
		}})
	objs = append(objs, &certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: GatewayNamespace, Name: GatewayTLSSecret},
		Spec: certmanagerv1.CertificateSpec{
			SecretName: GatewayTLSSecret, DNSNames: []string{GatewayHost},
			Duration: &metav1.Duration{Duration: CADuration}, RenewBefore: &metav1.Duration{Duration: CARenewBefore},
			PrivateKey: &certmanagerv1.CertificatePrivateKey{RotationPolicy: certmanagerv1.RotationPolicyAlways,
				Algorithm: certmanagerv1.ECDSAKeyAlgorithm, Size: 256},
			IssuerRef: cmmeta.IssuerReference{Group: "cert-manager.io", Kind: "Issuer", Name: GatewayCAName},
		}})
	return objs
}

// LoadCA reads a CA Secret (tls.crt, tls.key) as cert-manager writes it.
func LoadCA(ctx context.Context, c client.Reader, key client.ObjectKey) (*pki.CA, error) {
	var s corev1.Secret
	if err := c.Get(ctx, key, &s); err != nil {
		return nil, fmt.Errorf("CA Secret %s: %w", key, err)
	}
	certBlock, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	keyBlock, _ := pem.Decode(s.Data[corev1.TLSPrivateKeyKey])
	if certBlock == nil || keyBlock == nil {
		return nil, fmt.Errorf("CA Secret %s has no PEM tls.crt/tls.key", key)
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, err
	}
	var k *ecdsa.PrivateKey
	if p, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes); err == nil {
		k, _ = p.(*ecdsa.PrivateKey)
	} else if k, err = x509.ParseECPrivateKey(keyBlock.Bytes); err != nil {
		return nil, fmt.Errorf("CA key in %s: want ECDSA: %w", key, err)
	}
	if k == nil {
		return nil, fmt.Errorf("CA key in %s is not ECDSA", key)
	}
	return &pki.CA{Cert: cert, Key: k, PEM: s.Data[corev1.TLSCertKey]}, nil
}

// RuntimeCA is the current runtime CA (its key signs test certificates).
func (s *System) RuntimeCA(ctx context.Context) (*pki.CA, error) {
	return LoadCA(ctx, s.KCP.Client, client.ObjectKey{Namespace: KymaNamespace, Name: IssuerName})
}

// GatewayRoots is the gateway CA bundle as SKRs trust it (a pool of every
// gateway CA in the gateway CA's trust store, and the current one).
func GatewayRoots(ctx context.Context, c client.Reader) (*x509.CertPool, error) {
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: GatewayNamespace, Name: GatewayTLSSecret}, &s); err != nil {
		return nil, fmt.Errorf("gateway Secret: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
		return nil, fmt.Errorf("gateway Secret %s/%s has no ca.crt", GatewayNamespace, GatewayTLSSecret)
	}
	return pool, nil
}
