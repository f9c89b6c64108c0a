package localenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
)

// Delivery controls (docs/architecture.md §4.8) for the e2e suite: the
// skr-webhook can be killed and started again, and the example operators
// run as replicas behind a Service stand-in, which can answer injected
// faults.

// Operator is one example operator process: its event, health and metrics
// addresses (host:port).
type Operator struct {
	Listen, Health, Metrics string
}

// Operators are the example operator replicas.
func (s *System) Operators() []Operator { return s.operators }

// ServiceAnswers counts, per operator replica (index of Operators), the
// answers the Service stand-in relayed, by status code; nil with one
// replica (no stand-in).
func (s *System) ServiceAnswers() []map[int]int {
	if s.service == nil {
		return nil
	}
	return s.service.answers()
}

// Fault answers a request in place of the operators (fault injection for
// tests): ok=false lets the request through.
type Fault func(r *http.Request) (status int, ok bool)

// SetServiceFault makes the operators' Service stand-in answer f's status
// instead of relaying to a replica (nil: normal operation); only with more
// than one replica (there is no Service stand-in otherwise). The gateway is
// Envoy: what it answers is its own; a fault behind it reaches the webhook
// exactly as Envoy relays it.
func (s *System) SetServiceFault(f Fault) error {
	if s.service == nil {
		return errors.New("no Service stand-in: one operator replica")
	}
	if f == nil {
		s.service.fault.Store(nil)
		return nil
	}
	s.service.fault.Store(&f)
	return nil
}

// WebhookManagersFile is the --managers-file the skr-webhook reads.
func (s *System) WebhookManagersFile() string { return filepath.Join(s.Dir, "skr-webhook-managers") }

// deliveryFlags are the skr-webhook flags of §3.8: --managers-file, the
// file vs-controller's ConfigMap holds for the sample Watcher (its manager,
// opted in to heartbeats: bundle.ManagersConfigMap writes the line), and
// --heartbeat-interval when o sets one.
func (s *System) deliveryFlags(o Options) ([]string, error) {
	managers := bundle.ManagersConfigMap(bundle.Options{}, []v1beta2.Watcher{*SampleWatcher()}).Data[bundle.ManagersKey]
	// In one step, as the kubelet swaps a mounted ConfigMap: a running
	// skr-webhook must never read a half-written file (an empty one names
	// no manager, and it would forget them all).
	if err := writeFileAtomic(s.WebhookManagersFile(), []byte(managers)); err != nil {
		return nil, err
	}
	flags := []string{"--managers-file", s.WebhookManagersFile()}
	if o.HeartbeatInterval > 0 {
		flags = append(flags, "--heartbeat-interval", o.HeartbeatInterval.String())
	}
	return flags, nil
}

// StartWebhook starts the skr-webhook (again) and waits until it is ready.
func (s *System) StartWebhook(ctx context.Context) error {
	s.webhookMu.Lock()
	defer s.webhookMu.Unlock()
	if s.webhook != nil {
		select {
		case <-s.webhook.done:
		default:
			return errors.New("skr-webhook is running")
		}
	}
	name := "skr-webhook"
	if s.webhook != nil {
		name += "-" + strconv.FormatInt(time.Now().UnixNano(), 36) // a fresh log per start
	}
	p, err := s.start(name, s.webhookBinary, nil, nil, append(append([]string{}, s.webhookArgs...), s.webhookExtra...)...)
	if err != nil {
		return err
	}
	s.webhook = p
	if err := p.waitReady(ctx, "http://"+s.webhookHealth+"/readyz", time.Minute); err != nil {
		return err
	}
	return nil
}

// SetWebhookExtraArgs sets flags the next StartWebhook adds after the
// usual ones (a later flag wins: --kcp-addr elsewhere makes a runtime
// whose network to the KCP is broken); none restores the usual start.
func (s *System) SetWebhookExtraArgs(args ...string) {
	s.webhookMu.Lock()
	defer s.webhookMu.Unlock()
	s.webhookExtra = args
}

// KillWebhook sends SIGKILL to the skr-webhook and waits until it is gone:
// nothing it holds is flushed.
func (s *System) KillWebhook() error {
	s.webhookMu.Lock()
	defer s.webhookMu.Unlock()
	if s.webhook == nil {
		return errors.New("no skr-webhook")
	}
	_ = syscall.Kill(-s.webhook.pid(), syscall.SIGKILL)
	select {
	case <-s.webhook.done:
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("skr-webhook did not die within 10s of SIGKILL")
	}
}

// WebhookLog is the path of the running skr-webhook's log (each start
// writes a new one).
func (s *System) WebhookLog() string {
	s.webhookMu.Lock()
	defer s.webhookMu.Unlock()
	if s.webhook == nil {
		return ""
	}
	return s.webhook.log
}

// WebhookAddr is host:port of the skr-webhook's admission endpoint (TLS,
// certificate for "localhost" signed by CA).
func (s *System) WebhookAddr() string { return s.webhookAddr }

// WebhookRSS reads the running skr-webhook's resident set size and its
// peak (VmRSS, VmHWM of /proc/<pid>/status; Linux only), in bytes.
func (s *System) WebhookRSS() (current, peak int64, err error) {
	s.webhookMu.Lock()
	p := s.webhook
	s.webhookMu.Unlock()
	if p == nil {
		return 0, 0, errors.New("no skr-webhook")
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			current = n * 1024
		case "VmHWM":
			peak = n * 1024
		}
	}
	if current == 0 || peak == 0 {
		return 0, 0, errors.New("no VmRSS/VmHWM in /proc status")
	}
	return current, peak, sc.Err()
}

// roundRobin is the operators' Service stand-in: per request, the next
// replica (kube-proxy/Envoy balance per connection or request; per request
// makes every replica see traffic). Like Envoy behind Istio's default retry
// policy (retriable status 503, two retries, never the same host again), a
// 503 — a replica whose event consumer does not run — is retried once on
// each other replica before it is passed on.
type roundRobin struct {
	fault   atomic.Pointer[Fault]
	mu      sync.Mutex
	next    int
	counts  []map[int]int
	targets []string
}

func startRoundRobin(ctx context.Context, addr string, ops []Operator) (*roundRobin, error) {
	rr := &roundRobin{}
	for _, op := range ops {
		rr.targets = append(rr.targets, op.Listen)
		rr.counts = append(rr.counts, map[int]int{})
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: rr, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return rr, nil
}

func (rr *roundRobin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f := rr.fault.Load(); f != nil {
		if status, ok := (*f)(r); ok {
			http.Error(w, "injected fault", status)
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	rr.mu.Lock()
	first := rr.next
	rr.next = (rr.next + 1) % len(rr.targets)
	rr.mu.Unlock()
	for attempt := range len(rr.targets) {
		i := (first + attempt) % len(rr.targets)
		out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+rr.targets[i]+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		out.Host = r.Host
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			if attempt == len(rr.targets)-1 {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			continue
		}
		rr.mu.Lock()
		rr.counts[i][resp.StatusCode]++
		rr.mu.Unlock()
		if resp.StatusCode == http.StatusServiceUnavailable && attempt < len(rr.targets)-1 {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			continue
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		_ = resp.Body.Close()
		return
	}
}

func (rr *roundRobin) answers() []map[int]int {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	out := make([]map[int]int, len(rr.counts))
	for i, c := range rr.counts {
		out[i] = map[int]int{}
		for k, v := range c {
			out[i][k] = v
		}
	}
	return out
}
