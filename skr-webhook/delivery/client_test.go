package delivery

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/kcpstub"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// swappable is a CertificateSource a test can change.
type swappable struct {
	p atomic.Pointer[tls.Certificate]
}

func (s *swappable) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.p.Load(), nil
}

func (s *swappable) set(t testing.TB, l *pki.Leaf) {
	t.Helper()
	c, err := l.TLS()
	if err != nil {
		t.Fatal(err)
	}
	s.p.Store(&c)
}

// kcp is a CA, a KCP stub serving a certificate of that CA and a client
// certificate of that CA.
type kcp struct {
	ca     *pki.CA
	stub   *kcpstub.Stub
	client *pki.Leaf
	caFile string
}

func startKCP(t testing.TB, opts kcpstub.Options) *kcp {
	t.Helper()
	ca, err := pki.NewCA("kcp-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue(pki.LeafOptions{CommonName: "kcp-gateway", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := server.TLS()
	if err != nil {
		t.Fatal(err)
	}
	opts.ClientCAs, opts.Certificate = ca.Pool(), cert
	stub, err := kcpstub.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stub.Close)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return &kcp{ca: ca, stub: stub, client: client, caFile: caFile}
}

func newSender(t testing.TB, k *kcp, certs CertificateSource, timeout time.Duration) (*Client, *HTTPSender) {
	t.Helper()
	c, err := NewClient(ClientConfig{CAFile: k.caFile, Certs: certs, Timeout: timeout}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewHTTPSender(k.stub.Addr(), c.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func TestSenderDeliversOverHTTP2WithTheClientCertificate(t *testing.T) {
	var proto atomic.Value
	k := startKCP(t, kcpstub.Options{})
	certs := &swappable{}
	certs.set(t, k.client)
	c, s := newSender(t, k, certs, time.Second)
	c.HTTP().Transport.(*http.Transport).TLSClientConfig.VerifyConnection = func(cs tls.ConnectionState) error {
		proto.Store(cs.NegotiatedProtocol)
		return nil
	}
	ev := watch("kyma-1")
	r := s.Send(context.Background(), "lifecycle-manager", ev)
	if r.Outcome != Delivered || r.Status != 200 {
		t.Fatalf("result %+v", r)
	}
	d := k.stub.Deliveries()
	if len(d) != 1 || d[0].Manager != "lifecycle-manager" || d[0].Event != ev {
		t.Fatalf("stub got %+v", d)
	}
	if d[0].Serial != k.client.Cert.SerialNumber.String() {
		t.Fatalf("serial %s, want the client certificate's %s", d[0].Serial, k.client.Cert.SerialNumber)
	}
	if p, _ := proto.Load().(string); p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
}

func TestSenderClassifiesAnswers(t *testing.T) {
	k := startKCP(t, kcpstub.Options{})
	certs := &swappable{}
	certs.set(t, k.client)
	_, s := newSender(t, k, certs, time.Second)
	for _, tt := range []struct {
		status int
		want   Outcome
	}{
		{200, Delivered}, {202, Delivered}, {204, Delivered},
		{429, Retriable}, {500, Retriable}, {502, Retriable}, {503, Retriable},
		{401, Retriable}, {403, Retriable}, {404, Retriable}, {408, Retriable}, {425, Retriable}, {302, Retriable},
		{400, Rejected}, {413, Rejected}, {415, Rejected}, {422, Rejected},
	} {
		k.stub.SetStatus(tt.status)
		if r := s.Send(context.Background(), "m", watch("a")); r.Outcome != tt.want || r.Status != tt.status {
			t.Errorf("status %d: %+v, want %s", tt.status, r, tt.want)
		}
	}
	if r := s.Send(context.Background(), "Not_A_Label", watch("a")); r.Outcome != Rejected {
		t.Errorf("invalid manager: %+v", r)
	}
}

func TestSenderFailsRetriablyAgainstABrokenKCP(t *testing.T) {
	k := startKCP(t, kcpstub.Options{})
	certs := &swappable{}
	certs.set(t, k.client)
	_, s := newSender(t, k, certs, 200*time.Millisecond)

	if err := k.stub.SetMode(kcpstub.Refusing); err != nil {
		t.Fatal(err)
	}
	if r := s.Send(context.Background(), "m", watch("a")); r.Outcome != Retriable || !strings.Contains(r.Err.Error(), "refused") {
		t.Fatalf("refusing: %+v", r)
	}
	if err := k.stub.SetMode(kcpstub.Blackholed); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if r := s.Send(ctx, "m", watch("a")); r.Outcome != Retriable || r.Err == nil {
		t.Fatalf("blackholed: %+v", r)
	}
	if ctx.Err() != nil {
		t.Fatal("the attempt was ended by the caller's deadline, not the client's timeout")
	}
	if err := k.stub.SetMode(kcpstub.Serving); err != nil {
		t.Fatal(err)
	}
	// Serving again: delivered, once a handshake fits the client's short
	// timeout on a loaded machine.
	eventually(t, "delivered once serving again", func() bool {
		return s.Send(context.Background(), "m", watch("a")).Outcome == Delivered
	})
}

func TestSenderRefusesAnUntrustedKCP(t *testing.T) {
	k := startKCP(t, kcpstub.Options{})
	other := startKCP(t, kcpstub.Options{}) // another CA
	certs := &swappable{}
	certs.set(t, k.client)
	c, err := NewClient(ClientConfig{CAFile: other.caFile, Certs: certs}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewHTTPSender(k.stub.Addr(), c.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	r := s.Send(context.Background(), "m", watch("a"))
	if r.Outcome != Retriable || !strings.Contains(r.Err.Error(), "certificate") {
		t.Fatalf("result %+v", r)
	}
	if k.stub.Answered() != 0 {
		t.Fatal("event reached an untrusted server")
	}
}

func TestClientReloadUsesTheNewCertificateOnANewConnection(t *testing.T) {
	k := startKCP(t, kcpstub.Options{})
	certs := &swappable{}
	certs.set(t, k.client)
	c, s := newSender(t, k, certs, time.Second)
	for i := 0; i < 3; i++ { // a warm HTTP/2 connection with the old certificate
		if r := s.Send(context.Background(), "m", watch("a")); r.Outcome != Delivered {
			t.Fatal(r)
		}
	}
	before := c.HTTP()
	if err := c.Reload(); err != nil { // nothing changed: same client
		t.Fatal(err)
	}
	if c.HTTP() != before {
		t.Fatal("reload without a change built a new client")
	}
	rotated, err := k.ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	certs.set(t, rotated)
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if r := s.Send(context.Background(), "m", watch("b")); r.Outcome != Delivered {
			t.Fatal(r)
		}
	}
	for _, d := range k.stub.DeliveriesOf("m", watch("b")) {
		if d.Serial != rotated.Cert.SerialNumber.String() {
			t.Fatalf("delivery after reload used serial %s, want %s", d.Serial, rotated.Cert.SerialNumber)
		}
	}
	if k.stub.HandshakeErrors() != 0 {
		t.Fatalf("%d handshake errors", k.stub.HandshakeErrors())
	}
}

func TestNewClientErrors(t *testing.T) {
	k := startKCP(t, kcpstub.Options{})
	certs := &swappable{}
	certs.set(t, k.client)
	empty := filepath.Join(t.TempDir(), "empty.crt")
	if err := os.WriteFile(empty, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		cfg    ClientConfig
		substr string
	}{
		{"missing CA file", ClientConfig{CAFile: "/does/not/exist", Certs: certs}, "no such file"},
		{"CA file without PEM", ClientConfig{CAFile: empty, Certs: certs}, "no PEM certificate"},
		{"no client certificate", ClientConfig{CAFile: k.caFile, Certs: &swappable{}}, "no client certificate"},
	} {
		_, err := NewClient(tt.cfg, logr.Discard())
		if err == nil || !strings.Contains(err.Error(), tt.substr) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.substr)
		}
	}
}

func TestParseKCPAddr(t *testing.T) {
	for _, tt := range []struct {
		addr string
		ok   bool
	}{
		{"kcp.example.com", true},
		{"kcp.example.com:443", true},
		{"127.0.0.1:8443", true},
		{"[::1]:8443", true},
		{"", false},
		{"https://kcp.example.com", false},
		{"kcp.example.com/v2", false},
		{"user@kcp.example.com", false},
		{"kcp.example.com:99999", false},
		{"kcp.example.com:x", false},
		{":443", false},
		{"kcp.example.com?a=b", false},
	} {
		u, err := ParseKCPAddr(tt.addr)
		if (err == nil) != tt.ok {
			t.Errorf("%q: %v", tt.addr, err)
		}
		if err == nil && u.String() != "https://"+tt.addr {
			t.Errorf("%q: %s", tt.addr, u.String())
		}
	}
}

// Events leave with the contract's body and path.
func TestSenderBody(t *testing.T) {
	var got contract.WatchEvent
	k := startKCP(t, kcpstub.Options{OnEvent: func(d kcpstub.Delivery) string { got = d.Event; return "" }})
	certs := &swappable{}
	certs.set(t, k.client)
	_, s := newSender(t, k, certs, time.Second)
	ev := contract.WatchEvent{
		Watched:    contract.ObjectKey{Namespace: "kcp-system", Name: "kyma-sample"},
		WatchedGvk: contract.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"},
	}
	if r := s.Send(context.Background(), "lifecycle-manager", ev); r.Outcome != Delivered {
		t.Fatal(r)
	}
	if got != ev {
		t.Fatalf("stub decoded %+v", got)
	}
}

// TestClientMinTLSVersion: with MinTLSVersion 1.3 the client refuses a
// gateway that offers TLS 1.2 at most; the default (1.2) delivers to it.
func TestClientMinTLSVersion(t *testing.T) {
	k := startKCP(t, kcpstub.Options{})
	leaf, err := k.ca.Issue(pki.LeafOptions{CommonName: "tls12-gateway", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := leaf.TLS()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs: k.ca.Pool(), MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	certs := &swappable{}
	certs.set(t, k.client)
	for _, tt := range []struct {
		min  uint16
		want Outcome
	}{{0, Delivered}, {tls.VersionTLS12, Delivered}, {tls.VersionTLS13, Retriable}} {
		c, err := NewClient(ClientConfig{CAFile: k.caFile, Certs: certs, Timeout: time.Second, MinTLSVersion: tt.min}, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewHTTPSender(ln.Addr().String(), c.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		r := s.Send(context.Background(), "lifecycle-manager", watch("kyma-1"))
		if r.Outcome != tt.want {
			t.Errorf("MinTLSVersion %x: %+v, want %s", tt.min, r, tt.want)
		}
		if tt.want == Retriable && (r.Err == nil || !strings.Contains(r.Err.Error(), "protocol version")) {
			t.Errorf("MinTLSVersion 1.3 against a TLS 1.2 gateway: error %v, want a protocol version refusal", r.Err)
		}
	}
}
