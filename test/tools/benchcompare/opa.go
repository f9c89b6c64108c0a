package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
)

// policy is SAN pinning in Rego: the certificate from the XFCC header's
// Cert, valid now, its CN a known runtime whose skr-domain is one of its
// DNS SANs (data.runtimes: runtime ID -> domain). opa-envoy-plugin's input
// is the CheckRequest as JSON, as here.
const policy = `package envoy.authz

import rego.v1

xfcc := input.attributes.request.http.headers["x-forwarded-client-cert"]

cert := c if {
	m := regex.find_all_string_submatch_n(` + "`" + `Cert="([^"]+)"` + "`" + `, xfcc, 2)
	count(m) == 1
	certs := crypto.x509.parse_certificates(urlquery.decode(m[0][1]))
	count(certs) == 1
	c := certs[0]
}

valid if {
	now := time.now_ns()
	time.parse_rfc3339_ns(cert.NotBefore) <= now
	now <= time.parse_rfc3339_ns(cert.NotAfter)
}

runtime := cert.Subject.CommonName

domain := data.runtimes[runtime]

default allow := false

allow if {
	valid
	domain != ""
	some san in cert.DNSNames
	lower(san) == domain
}

decision := {"allow": allow, "runtime": runtime, "domain": domain} if allow

default decision := {"allow": false}
`

// opaServer is an ext_authz server deciding with a prepared Rego query, as
// opa-envoy-plugin does.
type opaServer struct {
	authv3.UnimplementedAuthorizationServer
	query rego.PreparedEvalQuery
}

func newOPAServer(ctx context.Context, runtimesFile string) (*opaServer, error) {
	raw, err := os.ReadFile(runtimesFile)
	if err != nil {
		return nil, err
	}
	var runtimes map[string]any
	if err := json.Unmarshal(raw, &runtimes); err != nil {
		return nil, err
	}
	store := inmem.NewFromObject(map[string]any{"runtimes": runtimes})
	q, err := rego.New(rego.Query("data.envoy.authz.decision"), rego.Module("authz.rego", policy), rego.Store(store)).PrepareForEval(ctx)
	if err != nil {
		return nil, err
	}
	return &opaServer{query: q}, nil
}

func (s *opaServer) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	// opa-envoy-plugin: the request as JSON, decoded into OPA's input value.
	raw, err := protojson.Marshal(req)
	if err != nil {
		return nil, err
	}
	var input any
	if err := util.UnmarshalJSON(raw, &input); err != nil {
		return nil, err
	}
	rs, err := s.query.Eval(ctx, rego.EvalInput(input))
	if err != nil || len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return denyResponse(codes.Unavailable), nil
	}
	d, _ := rs[0].Expressions[0].Value.(map[string]any)
	if allow, _ := d["allow"].(bool); !allow {
		return denyResponse(codes.PermissionDenied), nil
	}
	id, _ := d["runtime"].(string)
	domain, _ := d["domain"].(string)
	return loadgen.AllowResponse(id, domain), nil
}

func denyResponse(c codes.Code) *authv3.CheckResponse {
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(c)}}
}

// serveOPA serves the OPA ext_authz server (loadgen.ServeFunc); arg is the
// file of runtimes (ID -> SKR domain).
func serveOPA(ctx context.Context, ln net.Listener, runtimesFile string) error {
	s, err := newOPAServer(ctx, runtimesFile)
	if err != nil {
		return fmt.Errorf("opa: %w", err)
	}
	gs := loadgen.NewGRPCServer(s)
	go func() { <-ctx.Done(); gs.Stop() }()
	return gs.Serve(ln)
}

func opaVersion() string {
	if bi, ok := debugBuildInfo(); ok {
		for _, d := range bi {
			if d[0] == "github.com/open-policy-agent/opa" {
				return d[1]
			}
		}
	}
	return ""
}
