package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// GatewayAuthzTimeout is the ext_authz provider's timeout of the gateway
// (manifests/istio/istiod-values.yaml): Envoy sends it with every Check.
const GatewayAuthzTimeout = 500 * time.Millisecond

// Spread is the index of the i-th request of a chunk at offset into n
// prepared requests: a stride through all of them (7919 is prime, so the
// stride visits every request before repeating one unless n is a multiple
// of it), as heartbeats of a fleet come from every runtime in turn.
func Spread(offset, i, n int) int { return (offset + i*7919) % n }

// Checker sends Checks to one ext_authz server over several HTTP/2
// connections, as Envoy keeps a few (one per worker thread).
type Checker struct {
	conns   []*grpc.ClientConn
	clients []authv3.AuthorizationClient
	next    atomic.Uint64
}

// DialChecker opens conns connections to addr (plaintext loopback).
func DialChecker(addr string, conns int) (*Checker, error) {
	c := &Checker{}
	for range max(1, conns) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.conns = append(c.conns, conn)
		c.clients = append(c.clients, authv3.NewAuthorizationClient(conn))
	}
	return c, nil
}

// Close closes the connections.
func (c *Checker) Close() error {
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}

// Check sends req with the gateway's deadline. The answer must be an allow,
// and when wantID is not "", one for that runtime.
func (c *Checker) Check(req *authv3.CheckRequest, wantID string) error {
	return c.CheckWithin(req, wantID, GatewayAuthzTimeout)
}

// CheckWithin is Check with another deadline (e.g. for a warm-up whose
// first requests initialize the server).
func (c *Checker) CheckWithin(req *authv3.CheckRequest, wantID string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := c.clients[c.next.Add(1)%uint64(len(c.clients))].Check(ctx, req)
	if err != nil {
		return err
	}
	if resp.GetStatus().GetCode() != int32(codes.OK) {
		return fmt.Errorf("not allowed: %v", resp.GetStatus())
	}
	if wantID != "" {
		if h := resp.GetOkResponse().GetHeaders(); len(h) == 0 || h[0].GetHeader().GetValue() != wantID {
			return fmt.Errorf("allowed as %v, want %s", h, wantID)
		}
	}
	return nil
}

// WatchEvent is the body senders post for a watched Kyma.
const WatchEvent = `{"watched":{"namespace":"kcp-system","name":"kyma-1"},"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}`

// Poster posts events to one URL over kept-alive HTTP/1.1 connections.
type Poster struct {
	client *http.Client
	url    string
	header http.Header
	body   []byte
}

// NewPoster posts body with header to url, keeping up to conns connections.
func NewPoster(url string, header http.Header, body []byte, conns int) *Poster {
	return &Poster{
		client: &http.Client{Transport: &http.Transport{
			MaxIdleConns: conns * 2, MaxIdleConnsPerHost: conns * 2, DisableCompression: true,
		}, Timeout: 10 * time.Second},
		url: url, header: header, body: body,
	}
}

// Post posts once; the answer must be 200.
func (p *Poster) Post() error {
	req, err := http.NewRequest(http.MethodPost, p.url, bytes.NewReader(p.body))
	if err != nil {
		return err
	}
	req.Header = p.header
	return Send(p.client, req)
}

// Send sends req with c and reads the answer, which must be 200.
func Send(c *http.Client, req *http.Request) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// Close closes the idle connections.
func (p *Poster) Close() { p.client.CloseIdleConnections() }
