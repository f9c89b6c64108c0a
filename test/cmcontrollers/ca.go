package cmcontrollers

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// InstallCA makes ca a CA Issuer named name in namespace, as an operator
// configures cert-manager: a kubernetes.io/tls Secret name with the CA's key
// pair (tls.crt, tls.key, ca.crt) and an Issuer name whose spec.ca.secretName
// is that Secret.
func InstallCA(ctx context.Context, c client.Client, ca *pki.CA, namespace, name string) error {
	kd, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			"ca.crt": ca.PEM, corev1.TLSCertKey: ca.PEM,
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}),
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
