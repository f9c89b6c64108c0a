package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
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
	return allowResponse(id, domain), nil
}

// alwaysAllow answers every Check with OK and the same upstream headers as
// ext-authz, without looking at the request: the cost of gRPC alone.
type alwaysAllow struct {
	authv3.UnimplementedAuthorizationServer
}

func (alwaysAllow) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return allowResponse("runtime-00000", "skr-00000.kyma.example.com"), nil
}

func allowResponse(id, domain string) *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{
			{Header: &corev3.HeaderValue{Key: contract.HeaderRuntimeID, Value: id}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
			{Header: &corev3.HeaderValue{Key: contract.HeaderSKRDomain, Value: domain}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
		}}},
	}
}

func denyResponse(c codes.Code) *authv3.CheckResponse {
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(c)}}
}

// serve runs in a re-executed process: one ext_authz server on a loopback
// port, printed as ADDR=<addr>, until SIGTERM.
func serve(kind, runtimesFile string) int {
	var srv authv3.AuthorizationServer = alwaysAllow{}
	if kind == "opa" {
		s, err := newOPAServer(context.Background(), runtimesFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "opa:", err)
			return 1
		}
		srv = s
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(4 << 20))
	authv3.RegisterAuthorizationServer(gs, srv)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; gs.Stop() }()
	fmt.Printf("ADDR=%s\n", lis.Addr())
	if err := gs.Serve(lis); err != nil {
		return 1
	}
	return 0
}
