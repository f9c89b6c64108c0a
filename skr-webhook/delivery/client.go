package delivery

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/seed-c8be168e/runtime-watcher/filewatch"
)

// CertificateSource hands out the current client certificate;
// filewatch.KeyPair is one.
type CertificateSource interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// ClientConfig configures the mTLS client towards the KCP.
type ClientConfig struct {
	// CAFile holds the CA(s) that signed the KCP gateway's certificate; it
	// is the only trust root.
	CAFile string
	// Certs is the client certificate.
	Certs CertificateSource
	// Timeout bounds dialing, the TLS handshake and waiting for answer
	// headers; the per-attempt context bounds the whole attempt.
	Timeout time.Duration
	// MaxConns bounds the connections to the KCP (HTTP/1.1 fallback). HTTP/2
	// multiplexes everything over one.
	MaxConns int
	// MinTLSVersion is the lowest TLS version offered to the KCP gateway
	// (tls.VersionTLS12 when 0; tls.VersionTLS13 for TLS 1.3 only).
	MinTLSVersion uint16
}

// Client is the HTTP/2 mTLS client towards the KCP. All workers share one
// transport, so one connection carries all events. When the client
// certificate or the CA changes, Reload builds a new transport: connections
// made with the old certificate are never used for new requests (a TLS
// connection keeps the certificate it was opened with).
type Client struct {
	cfg ClientConfig
	log logr.Logger

	current atomic.Pointer[http.Client]
	mu      sync.Mutex // serialises Reload
	leaf    []byte     // client certificate the transport was built for
	caPEM   []byte
}

// NewClient reads the CA file and builds the client. It fails when the CA
// file is unreadable or holds no certificate, or no client certificate is
// available.
func NewClient(cfg ClientConfig, log logr.Logger) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 16
	}
	if cfg.MinTLSVersion == 0 {
		cfg.MinTLSVersion = tls.VersionTLS12
	}
	c := &Client{cfg: cfg, log: log}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// HTTP returns the current client. Take it anew for every request.
func (c *Client) HTTP() *http.Client { return c.current.Load() }

// Reload re-reads the CA file (filewatch.ParseCABundle) and the current
// client certificate and, when either changed, switches to a new transport
// and closes the old one's connections once they are idle. On error the old
// client stays. The webhook calls it when a file watcher sees either change
// (a CA rotation changes ca.crt alone).
func (c *Client) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	caPEM, err := os.ReadFile(c.cfg.CAFile)
	if err != nil {
		return fmt.Errorf("reading CA file: %w", err)
	}
	bundle, err := filewatch.ParseCABundle(caPEM, time.Now())
	if err != nil {
		return fmt.Errorf("CA file %s: %w", c.cfg.CAFile, err)
	}
	pool := bundle.Pool
	cert, err := c.cfg.Certs.GetCertificate(nil)
	if err != nil {
		return fmt.Errorf("client certificate: %w", err)
	}
	if cert == nil || len(cert.Certificate) == 0 {
		return errors.New("no client certificate loaded")
	}
	leaf := cert.Certificate[0]
	old := c.current.Load()
	if old != nil && bytes.Equal(leaf, c.leaf) && bytes.Equal(caPEM, c.caPEM) {
		return nil
	}
	c.current.Store(&http.Client{
		Transport: c.transport(pool),
		// A redirect is not an answer from the event endpoint; never follow
		// it with the client certificate.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	})
	c.leaf, c.caPEM = leaf, caPEM
	if old != nil {
		c.log.Info("client certificate or CA changed: new connections to the KCP use it")
		old.CloseIdleConnections()
		// Requests in flight on the old connections end within their
		// attempt timeout; close what is idle by then.
		time.AfterFunc(3*c.cfg.Timeout, old.CloseIdleConnections)
	}
	return nil
}

func (c *Client) transport(pool *x509.CertPool) *http.Transport {
	certs := c.cfg.Certs
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   c.cfg.Timeout,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSClientConfig: &tls.Config{
			MinVersion: c.cfg.MinTLSVersion,
			RootCAs:    pool,
			// Asked at every handshake: always the current certificate.
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return certs.GetCertificate(nil)
			},
		},
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   c.cfg.Timeout,
		ResponseHeaderTimeout: c.cfg.Timeout,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   c.cfg.MaxConns,
		MaxConnsPerHost:       c.cfg.MaxConns,
		HTTP2: &http.HTTP2Config{
			// Detect a silent (blackholed) connection: ping after this long
			// without frames, close it when the ping is not answered.
			SendPingTimeout: 2 * c.cfg.Timeout,
			PingTimeout:     c.cfg.Timeout,
		},
	}
}
