package loadgen

import (
	"context"
	"io"
	"net/http"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/listener"
)

// AlwaysAllow is the ceiling of ext_authz: it answers every Check with OK
// and the upstream headers ext-authz sets, without looking at the request
// (the cost of gRPC alone, same grpc-go as ext-authz).
type AlwaysAllow struct {
	authv3.UnimplementedAuthorizationServer
}

// Check allows.
func (AlwaysAllow) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return AllowResponse("runtime-00000", "skr-00000.kyma.example.com"), nil
}

// AllowResponse is an allow answer setting the runtime-id and SKR-domain
// headers as ext-authz does.
func AllowResponse(id, domain string) *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{
			{Header: &corev3.HeaderValue{Key: contract.HeaderRuntimeID, Value: id}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
			{Header: &corev3.HeaderValue{Key: contract.HeaderSKRDomain, Value: domain}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
		}}},
	}
}

// NewGRPCServer is the gRPC server of the ext_authz stand-ins (ceiling,
// OPA): grpc-go's defaults with a 4 MiB receive limit.
func NewGRPCServer(srv authv3.AuthorizationServer) *grpc.Server {
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(4 << 20))
	authv3.RegisterAuthorizationServer(gs, srv)
	return gs
}

// BareHTTP is the ceiling of the listener: bare net/http reading what the
// listener reads of an event (the body, the XFCC and runtime-id headers),
// answering 200, with the listener's server timeouts.
func BareHTTP() *http.Server {
	return &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			xfcc := r.Header.Get(contract.HeaderXFCC)
			id := r.Header.Get(contract.HeaderRuntimeID)
			if err != nil || len(body) == 0 || xfcc == "" || id == "" {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusOK)
		}),
		ReadHeaderTimeout: listener.DefaultReadHeaderTimeout,
		ReadTimeout:       listener.DefaultReadTimeout,
		WriteTimeout:      listener.DefaultWriteTimeout,
		IdleTimeout:       listener.DefaultIdleTimeout,
	}
}
