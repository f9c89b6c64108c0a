package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/go-logr/logr"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// The four resource types the stand-in subscribes to over ADS, in the order
// Envoy's ADS sequencing uses (CDS, EDS, LDS, RDS: a cluster before its
// endpoints, a listener before its routes).
var (
	typeCluster   = typeURL(&clusterv3.Cluster{})
	typeEndpoints = typeURL(&endpointv3.ClusterLoadAssignment{})
	typeListener  = typeURL(&listenerv3.Listener{})
	typeRoute     = typeURL(&routev3.RouteConfiguration{})
	// xdsTypes lists them; a response of any other type is NACKed.
	xdsTypes = []string{typeCluster, typeEndpoints, typeListener, typeRoute}
)

func typeURL(m proto.Message) string {
	return "type.googleapis.com/" + string(m.ProtoReflect().Descriptor().FullName())
}

// shortType is the xDS short name of a type URL (metric and log label).
func shortType(t string) string {
	switch t {
	case typeCluster:
		return "CDS"
	case typeEndpoints:
		return "EDS"
	case typeListener:
		return "LDS"
	case typeRoute:
		return "RDS"
	}
	return t
}

// resources is the accepted state of the world: per type URL, the resources
// by name, and the version last ACKed.
type resources struct {
	byType   map[string]map[string]proto.Message
	versions map[string]string
}

func (r resources) clone() resources {
	c := resources{byType: map[string]map[string]proto.Message{}, versions: map[string]string{}}
	for t, m := range r.byType {
		c.byType[t] = map[string]proto.Message{}
		for n, v := range m {
			c.byType[t][n] = v
		}
	}
	for t, v := range r.versions {
		c.versions[t] = v
	}
	return c
}

// adsClient is one ADS stream to istiod (the SotW variant of
// https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol):
// wildcard subscriptions to CDS and LDS, named ones to the EDS of every EDS
// cluster and to the RDS of every listener's route configuration. Each
// response is compiled with what else is accepted; a response that does not
// compile is NACKed (the previous state stays in force, as in Envoy), one
// that does is ACKed and applied.
type adsClient struct {
	addr    string
	node    *corev3.Node
	log     logr.Logger
	metrics *metrics
	// apply compiles a candidate state; an error NACKs the response.
	compile func(resources) (*snapshot, error)
	// install takes the compiled state of an ACKed response.
	install func(*snapshot, resources)

	mu    sync.Mutex
	state resources
	names map[string][]string // subscribed names of EDS and RDS
	nonce map[string]string
}

// run keeps an ADS stream open until ctx ends, reconnecting after a failure
// (Envoy's ADS reconnects with a back-off as well).
func (c *adsClient) run(ctx context.Context) error {
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("xDS client for %s: %w", c.addr, err)
	}
	defer func() { _ = conn.Close() }()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(conn)
	backoff := 100 * time.Millisecond
	for {
		err := c.stream(ctx, ads)
		if ctx.Err() != nil {
			return nil
		}
		c.metrics.streams.WithLabelValues("broken").Inc()
		c.log.Info("xDS stream to istiod broken; reconnecting", "addr", c.addr, "error", err, "after", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (c *adsClient) stream(ctx context.Context, ads discoveryv3.AggregatedDiscoveryServiceClient) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := ads.StreamAggregatedResources(sctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.nonce = map[string]string{}
	// A new stream asks again for what is known (with the accepted
	// versions, so istiod can tell a reconnect from a first start).
	var initial []*discoveryv3.DiscoveryRequest
	for _, t := range xdsTypes {
		if t == typeCluster || t == typeListener || len(c.names[t]) > 0 {
			initial = append(initial, c.request(t, ""))
		}
	}
	c.mu.Unlock()
	for i, req := range initial {
		if i == 0 {
			req.Node = c.node
		}
		if err := st.Send(req); err != nil {
			return err
		}
	}
	c.metrics.streams.WithLabelValues("opened").Inc()
	for {
		resp, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("istiod closed the stream")
			}
			return err
		}
		for _, req := range c.handle(resp) {
			if err := st.Send(req); err != nil {
				return err
			}
		}
	}
}

// request is a DiscoveryRequest for type t with the accepted version and
// the latest nonce; errDetail makes it a NACK. The caller holds c.mu.
func (c *adsClient) request(t, errDetail string) *discoveryv3.DiscoveryRequest {
	req := &discoveryv3.DiscoveryRequest{
		TypeUrl:       t,
		VersionInfo:   c.state.versions[t],
		ResponseNonce: c.nonce[t],
		ResourceNames: c.names[t],
	}
	if errDetail != "" {
		req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: errDetail}
	}
	return req
}

// handle decodes, compiles and ACKs or NACKs one response; it returns the
// requests to send (the ACK or NACK, then changed subscriptions).
func (c *adsClient) handle(resp *discoveryv3.DiscoveryResponse) []*discoveryv3.DiscoveryRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := resp.GetTypeUrl()
	c.nonce[t] = resp.GetNonce()
	candidate, err := c.merge(resp)
	var snap *snapshot
	if err == nil {
		snap, err = c.compile(candidate)
	}
	if err != nil {
		// Refused loudly: logged, counted, NACKed.
		c.metrics.updates.WithLabelValues(shortType(t), "nack").Inc()
		c.log.Error(err, "xDS update refused (NACK)", "type", shortType(t), "version", resp.GetVersionInfo())
		return []*discoveryv3.DiscoveryRequest{c.request(t, err.Error())}
	}
	candidate.versions[t] = resp.GetVersionInfo()
	c.state = candidate
	c.metrics.updates.WithLabelValues(shortType(t), "ack").Inc()
	c.log.V(1).Info("xDS update applied (ACK)", "type", shortType(t), "version", resp.GetVersionInfo(), "resources", len(resp.GetResources()))
	out := []*discoveryv3.DiscoveryRequest{c.request(t, "")}
	// Subscribe to what the accepted clusters and listeners name.
	for _, dep := range []struct{ t string }{{typeEndpoints}, {typeRoute}} {
		want := snap.references(dep.t)
		if !slices.Equal(want, c.names[dep.t]) {
			c.names[dep.t] = want
			out = append(out, c.request(dep.t, ""))
		}
	}
	c.install(snap, c.state.clone())
	return out
}

// merge is the accepted state with resp applied: CDS and LDS responses are
// the whole state of the world, EDS and RDS ones replace the resources
// they carry (https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol#resource-updates).
// Resources no longer subscribed to are dropped.
func (c *adsClient) merge(resp *discoveryv3.DiscoveryResponse) (resources, error) {
	t := resp.GetTypeUrl()
	if !slices.Contains(xdsTypes, t) {
		return resources{}, fmt.Errorf("resource type %s is not implemented", t)
	}
	next := c.state.clone()
	if t == typeCluster || t == typeListener || next.byType[t] == nil {
		next.byType[t] = map[string]proto.Message{}
	}
	for _, a := range resp.GetResources() {
		m, name, err := decode(t, a)
		if err != nil {
			return resources{}, err
		}
		next.byType[t][name] = m
	}
	if t == typeEndpoints || t == typeRoute {
		for name := range next.byType[t] {
			if !slices.Contains(c.names[t], name) {
				delete(next.byType[t], name)
			}
		}
	}
	return next, nil
}

func decode(t string, a *anypb.Any) (proto.Message, string, error) {
	if a.GetTypeUrl() != t {
		return nil, "", fmt.Errorf("a %s response carries a %s", shortType(t), a.GetTypeUrl())
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return nil, "", fmt.Errorf("%s resource: %w", shortType(t), err)
	}
	var name string
	switch r := m.(type) {
	case *clusterv3.Cluster:
		name = r.GetName()
	case *endpointv3.ClusterLoadAssignment:
		name = r.GetClusterName()
	case *listenerv3.Listener:
		name = r.GetName()
	case *routev3.RouteConfiguration:
		name = r.GetName()
	}
	if name == "" {
		return nil, "", fmt.Errorf("%s resource without a name", shortType(t))
	}
	return m, name, nil
}

// sortedKeys is the sorted names of a resource map.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
