package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SecretCredentials are the gateway's credentials as Istio reads them for a
// MUTUAL server with credentialName X: the key pair from Secret X (tls.crt,
// tls.key) and the client CA bundle from Secret X-cacert (ca.crt), reloaded
// when they change, as Istio's SDS pushes them to Envoy. Config.Credentials
// takes its Get.
type SecretCredentials struct {
	Reader client.Reader
	// Server is Secret X, ClientCA Secret X-cacert.
	Server, ClientCA types.NamespacedName
	// Interval between reads; 250ms when 0.
	Interval time.Duration

	mu        sync.RWMutex
	cert      *tls.Certificate
	pool      *x509.CertPool
	seen      [3]string
	loadError error
	reloads   int
}

// Get is the current key pair and client CA pool.
func (s *SecretCredentials) Get() (*tls.Certificate, *x509.CertPool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cert == nil || s.pool == nil {
		if s.loadError != nil {
			return nil, nil, s.loadError
		}
		return nil, nil, errors.New("gateway credentials not loaded yet")
	}
	return s.cert, s.pool, nil
}

// Reloads counts the credential changes loaded.
func (s *SecretCredentials) Reloads() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.reloads
}

// Run reloads until ctx ends.
func (s *SecretCredentials) Run(ctx context.Context) error {
	interval := s.Interval
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.load(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *SecretCredentials) load(ctx context.Context) {
	var server, ca corev1.Secret
	err := s.Reader.Get(ctx, s.Server, &server)
	if err == nil {
		err = s.Reader.Get(ctx, s.ClientCA, &ca)
	}
	if err != nil {
		s.fail(err)
		return
	}
	now := [3]string{string(server.Data[corev1.TLSCertKey]), string(server.Data[corev1.TLSPrivateKeyKey]), string(ca.Data["ca.crt"])}
	s.mu.RLock()
	same := now == s.seen
	s.mu.RUnlock()
	if same {
		return
	}
	cert, err := tls.X509KeyPair(server.Data[corev1.TLSCertKey], server.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		// A half-written pair: keep what is served (as Envoy keeps a
		// listener's last good secret).
		s.fail(fmt.Errorf("gateway key pair %s: %w", s.Server, err))
		return
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.Data["ca.crt"]) {
		s.fail(fmt.Errorf("gateway client CA %s holds no certificate", s.ClientCA))
		return
	}
	s.mu.Lock()
	s.cert, s.pool, s.seen, s.loadError = &cert, pool, now, nil
	s.reloads++
	s.mu.Unlock()
}

func (s *SecretCredentials) fail(err error) {
	s.mu.Lock()
	s.loadError = err
	s.mu.Unlock()
}
