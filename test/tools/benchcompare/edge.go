package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

const (
	groupEdge   = "the edge (Envoy + authz server)"
	edgeSubject = "Envoy + ext-authz"
	// edgeAllow is the mechanism's price: the same Envoy calling an
	// always-allow ext_authz server (issue 42); a twin beside it.
	edgeAllow = "Envoy + always-allow ext_authz"
	// edgeAllowTwin is its twin: the spread between the two is the noise
	// of the goal judged on edgeAllow (a peer, never judged itself).
	edgeAllowTwin = edgeAllow + " (twin)"
)

// edgeAuthz are the authz servers of the ext_authz comparison, which the
// edge's Envoys call (set by setupExtAuthz).
var edgeAuthz struct {
	ca                    *pki.CA
	extAuthzAddr, opaAddr string
	extAuthzCPU, opaCPU   func() (time.Duration, error)
	runtimeID, domain     string
	// the always-allow ceiling and its twin of the ext_authz comparison
	allowAddr [2]string
	allowCPU  [2]func() (time.Duration, error)
}

// setupEdge starts six Envoys on test/envoy's static edge — without
// ext_authz (the ceiling and its twin), with an always-allow ext_authz
// server (and a twin: each Envoy its own server), with ext-authz, with OPA — in
// front of one bare net/http upstream, and an mTLS client per Envoy and
// load with a certificate of a runtime ext-authz and OPA know.
func setupEdge(serversBinary string) (*comparison, func(), error) {
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	a := edgeAuthz
	if a.ca == nil || a.opaAddr == "" || a.allowAddr[1] == "" {
		return nil, cleanup, fmt.Errorf("the ext_authz comparison's servers are not set up")
	}
	up, err := loadgen.StartServer(serversBinary, loadgen.KindBareHTTP, envoy.Manager)
	if err != nil {
		return nil, cleanup, err
	}
	cleanups = append(cleanups, func() { _ = up.Stop() })
	gw, err := a.ca.Issue(pki.LeafOptions{CommonName: "kcp-gateway", DNSNames: []string{"localhost"}})
	if err != nil {
		return nil, cleanup, err
	}
	client, err := a.ca.Issue(pki.LeafOptions{CommonName: a.runtimeID, DNSNames: []string{a.domain}})
	if err != nil {
		return nil, cleanup, err
	}
	cert, err := client.TLS()
	if err != nil {
		return nil, cleanup, err
	}
	c := &comparison{group: groupEdge, conns: []int{16, 64}}
	c.servers = []server{
		{name: "Envoy without ext_authz (ceiling)", role: roleCeiling},
		{name: "Envoy without ext_authz (twin)", role: roleTwin},
		{name: edgeAllow, role: rolePeer},
		{name: edgeAllowTwin, role: rolePeer},
		{name: edgeSubject},
		{name: "Envoy + OPA " + opaVersion() + " (Rego)", role: rolePeer, everyNth: 4, closedOnly: true},
	}
	authz := []struct {
		addr string
		cpu  func() (time.Duration, error)
	}{{}, {}, {a.allowAddr[0], a.allowCPU[0]}, {a.allowAddr[1], a.allowCPU[1]}, {a.extAuthzAddr, a.extAuthzCPU}, {a.opaAddr, a.opaCPU}}
	posters := map[string][]*tlsPoster{}
	for i := range c.servers {
		e := envoy.NewEdge(authz[i].addr, up.Addr, gw, a.ca)
		e.NoAuthz = authz[i].addr == ""
		b, err := e.Bootstrap()
		if err != nil {
			return nil, cleanup, err
		}
		dir, err := os.MkdirTemp("", "benchcompare-envoy-")
		if err != nil {
			return nil, cleanup, err
		}
		cleanups = append(cleanups, func() { _ = os.RemoveAll(dir) })
		p, err := envoy.Start(context.Background(), envoy.Options{Dir: dir, Bootstrap: b, Concurrency: 2})
		if err != nil {
			return nil, cleanup, fmt.Errorf("%s: %w", c.servers[i].name, err)
		}
		cleanups = append(cleanups, func() { _ = p.Stop() })
		ports, err := p.Admin.ListenerPorts(context.Background())
		if err != nil {
			return nil, cleanup, err
		}
		pid, authzCPU := p.Pid(), authz[i].cpu
		c.servers[i].cpu = func() (time.Duration, error) {
			d, err := loadgen.ProcessCPU(pid)
			if err != nil || authzCPU == nil {
				return d, err
			}
			d2, err := authzCPU()
			return d + d2, err
		}
		url := fmt.Sprintf("https://localhost:%d%s", ports[envoy.ListenerName], contract.EventPath(envoy.Manager))
		for _, conc := range c.conns {
			posters[closedLoad(conc)] = append(posters[closedLoad(conc)], newTLSPoster(url, cert, a.ca, a.runtimeID, conc))
		}
		posters[openLoad] = append(posters[openLoad], newTLSPoster(url, cert, a.ca, a.runtimeID, maxInFlight))
	}
	c.send = func(s int, load string, _, _ int) error { return posters[load][s].post() }
	for _, conc := range c.conns {
		for s := range c.servers {
			if _, err := loadgen.Closed(conc*4, conc, func(int) error { return c.send(s, closedLoad(conc), 0, 0) }); err != nil {
				return nil, cleanup, fmt.Errorf("%s warm-up: %w", c.servers[s].name, err)
			}
		}
	}
	return c, cleanup, nil
}

// tlsPoster posts events over mTLS (HTTP/2, as the skr-webhook does) with
// the runtime's certificate. It sends x-watcher-runtime-id itself, which
// the upstream wants: ext-authz overwrites it, the edges without ext-authz
// pass it on.
type tlsPoster struct {
	client *http.Client
	url    string
	header http.Header
}

func newTLSPoster(url string, cert tls.Certificate, ca *pki.CA, runtimeID string, conns int) *tlsPoster {
	return &tlsPoster{
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: true, MaxIdleConns: conns * 2, MaxIdleConnsPerHost: conns * 2, DisableCompression: true,
		}},
		url:    url,
		header: http.Header{"Content-Type": {"application/json"}, contract.HeaderRuntimeID: {runtimeID}},
	}
}

func (p *tlsPoster) post() error {
	req, err := http.NewRequest(http.MethodPost, p.url, strings.NewReader(loadgen.WatchEvent))
	if err != nil {
		return err
	}
	req.Header = p.header
	return loadgen.Send(p.client, req)
}
