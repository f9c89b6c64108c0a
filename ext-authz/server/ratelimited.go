package server

import (
	"strconv"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// ReasonRateLimitedShadow is the reason an allowed Check is counted with
// when its runtime was over its rate limit in shadow mode.
const ReasonRateLimitedShadow = string(contract.ReasonRateLimited) + "-shadow"

// limit applies the rate limit (Config.Limiter) to an allowed Check of
// runtime: nil when the Check stays allowed (within the limit, or over it
// in shadow mode or dry-run, then counted as ReasonRateLimitedShadow),
// else the 429 answer, with d made a refusal. Requests over the limit get
// no decision log line of their own: the limiter's report names the
// runtimes (ratelimit.Limiter.Run).
func (s *Server) limit(d *decision, now time.Time, dry bool) *authv3.CheckResponse {
	ok, wait := s.cfg.Limiter.Allow(d.id.RuntimeID, d.id.Class, now)
	if ok {
		return nil
	}
	if s.cfg.Limiter.Shadow() || dry {
		d.reason = ReasonRateLimitedShadow
		return nil
	}
	d.result, d.reason = ResultDeny, string(contract.ReasonRateLimited)
	return rateLimited(wait)
}

// rateLimitReason reports whether a decision's reason is the rate limit's
// (such Checks get no decision log line of their own).
func rateLimitReason(reason string) bool {
	return reason == string(contract.ReasonRateLimited) || reason == ReasonRateLimitedShadow
}

// rateLimited is the answer over the limit: HTTP 429 with Retry-After in
// whole seconds (at least 1), x-watcher-deny-reason rate-limited and the
// JSON body of every refusal.
func rateLimited(wait time.Duration) *authv3.CheckResponse {
	secs := max(int64((wait+time.Second-1)/time.Second), 1)
	body := denyBody(typev3.StatusCode_TooManyRequests, contract.ReasonRateLimited,
		"runtime over its rate limit; retry after "+strconv.FormatInt(secs, 10)+"s")
	body.Headers = append(body.Headers, overwrite("retry-after", strconv.FormatInt(secs, 10)))
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(codes.ResourceExhausted), Message: string(contract.ReasonRateLimited)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: body},
	}
}
