package xdstest

import (
	"fmt"
	"net"
	"sync"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Server is a minimal state-of-the-world ADS server: it answers each
// subscription with the resources it holds of that type (by name when
// named), pushes every Set to open streams, and records the clients' ACKs
// and NACKs.
type Server struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	mu      sync.Mutex
	version int
	byType  map[string][]proto.Message
	streams map[*adsStream]bool
	acks    map[string]string // type -> version ACKed last
	nacks   []string          // error details
	changed chan struct{}
	addr    string
}

type adsStream struct {
	send  chan *discoveryv3.DiscoveryResponse
	names map[string][]string // subscribed names per type (nil: wildcard)
	subs  map[string]bool
}

// Start serves an empty ADS server on a loopback port until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{byType: map[string][]proto.Message{}, streams: map[*adsStream]bool{}, acks: map[string]string{}, changed: make(chan struct{})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, s)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	s.addr = l.Addr().String()
	return s
}

// Addr is the server's address (host:port).
func (s *Server) Addr() string { return s.addr }

// TypeURL is the xDS type URL of m's type.
func TypeURL(m proto.Message) string {
	return "type.googleapis.com/" + string(m.ProtoReflect().Descriptor().FullName())
}

// Set replaces the resources of their type (all of one type) and pushes.
func (s *Server) Set(t string, ms ...proto.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version++
	s.byType[t] = ms
	for st := range s.streams {
		if st.subs[t] {
			st.send <- s.responseLocked(t, st.names[t])
		}
	}
}

// Version is the version the next Set pushes, minus one: the last pushed.
func (s *Server) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.version)
}

func (s *Server) responseLocked(t string, names []string) *discoveryv3.DiscoveryResponse {
	resp := &discoveryv3.DiscoveryResponse{TypeUrl: t, VersionInfo: fmt.Sprint(s.version), Nonce: fmt.Sprintf("n%d", s.version)}
	for _, m := range s.byType[t] {
		if names != nil && !contains(names, resourceName(m)) {
			continue
		}
		a, _ := anypb.New(m)
		resp.Resources = append(resp.Resources, a)
	}
	return resp
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

func resourceName(m proto.Message) string {
	fd := m.ProtoReflect().Descriptor().Fields().ByName("name")
	if fd == nil {
		fd = m.ProtoReflect().Descriptor().Fields().ByName("cluster_name")
	}
	return m.ProtoReflect().Get(fd).String()
}

func (s *Server) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	st := &adsStream{send: make(chan *discoveryv3.DiscoveryResponse, 64), names: map[string][]string{}, subs: map[string]bool{}}
	s.mu.Lock()
	s.streams[st] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.streams, st)
		s.mu.Unlock()
	}()
	errc := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			s.mu.Lock()
			t := req.GetTypeUrl()
			if req.GetErrorDetail() != nil {
				s.nacks = append(s.nacks, req.GetErrorDetail().GetMessage())
			} else if req.GetResponseNonce() != "" {
				s.acks[t] = req.GetVersionInfo()
			}
			close(s.changed)
			s.changed = make(chan struct{})
			names := req.GetResourceNames()
			newSub := !st.subs[t] || !equal(names, st.names[t])
			st.subs[t] = true
			if len(names) > 0 {
				st.names[t] = names
			} else if t != TypeURL(&discoveryv3.DiscoveryRequest{}) {
				st.names[t] = nil
			}
			if newSub {
				st.send <- s.responseLocked(t, st.names[t])
			}
			s.mu.Unlock()
		}
	}()
	for {
		select {
		case err := <-errc:
			return err
		case resp := <-st.send:
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Nacks are the error details of the NACKs received.
func (s *Server) Nacks() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.nacks...)
}

// Acked is the version last ACKed for type t.
func (s *Server) Acked(t string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acks[t]
}

// Changed is closed at the next ACK or NACK.
func (s *Server) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}
