package filewatch

import (
	"crypto/tls"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// KeyPair is a TLS certificate and its key from two PEM files, reloaded
// when they change (a renewed certificate is used for the next handshake).
// A pair that does not match or does not parse keeps the pair in use.
type KeyPair struct {
	Watcher

	cert     atomic.Pointer[tls.Certificate]
	mu       sync.Mutex
	onChange []func()
}

// NewKeyPair loads the pair (an error when it is unusable) and returns it,
// ready to Run.
func NewKeyPair(certFile, keyFile string, interval time.Duration, log logr.Logger) (*KeyPair, error) {
	k := &KeyPair{}
	k.Watcher = Watcher{Name: "certificate files", Paths: []string{certFile, keyFile}, Interval: interval, Log: log, Load: k.load}
	if err := k.Init(); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *KeyPair) load(contents [][]byte) error {
	cert, err := tls.X509KeyPair(contents[0], contents[1])
	if err != nil {
		return err
	}
	if len(cert.Certificate) == 0 {
		return errors.New("no certificate")
	}
	k.cert.Store(&cert)
	k.mu.Lock()
	fs := append([]func(){}, k.onChange...)
	k.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return nil
}

// OnChange calls f after every reload of the pair (not for the pair
// loaded by NewKeyPair), on the watcher's goroutine.
func (k *KeyPair) OnChange(f func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.onChange = append(k.onChange, f)
}

// Certificate is the pair in use.
func (k *KeyPair) Certificate() *tls.Certificate { return k.cert.Load() }

// GetCertificate is the pair in use, for tls.Config.GetCertificate.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.cert.Load(), nil
}

// GetClientCertificate is the pair in use, for
// tls.Config.GetClientCertificate.
func (k *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.cert.Load(), nil
}
