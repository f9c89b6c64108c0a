package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// CASecret is the CA of a cert-manager CA Secret (tls.crt, ECDSA tls.key)
// in the KCP, to sign certificates with as that CA would.
func CASecret(ctx context.Context, kcp client.Client, key client.ObjectKey) (*pki.CA, error) {
	var s corev1.Secret
	if err := kcp.Get(ctx, key, &s); err != nil {
		return nil, fmt.Errorf("CA Secret %s: %w", key, err)
	}
	certBlock, _ := pem.Decode(s.Data["tls.crt"])
	keyBlock, _ := pem.Decode(s.Data["tls.key"])
	if certBlock == nil || keyBlock == nil {
		return nil, fmt.Errorf("CA Secret %s has no PEM tls.crt/tls.key", key)
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, err
	}
	var k *ecdsa.PrivateKey
	if pk, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes); err == nil {
		k, _ = pk.(*ecdsa.PrivateKey)
	} else if k, err = x509.ParseECPrivateKey(keyBlock.Bytes); err != nil {
		return nil, fmt.Errorf("CA key in %s: want ECDSA: %w", key, err)
	}
	if k == nil {
		return nil, fmt.Errorf("CA key in %s is not ECDSA", key)
	}
	return &pki.CA{Cert: cert, Key: k, PEM: s.Data["tls.crt"]}, nil
}
