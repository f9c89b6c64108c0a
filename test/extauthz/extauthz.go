// Package extauthz helps test ext-authz and what sits behind it. It runs
// the real ext-authz binary the way Kubernetes would (start the process,
// learn its addresses from its start-up log line, probe readiness, read its
// resident memory, stop it with SIGTERM), and it stands in for the Istio
// ingress gateway's Envoy: GatewayXFCC writes the x-forwarded-client-cert
// header Envoy sets with SANITIZE_SET, CheckRequest builds the CheckRequest
// Envoy's ext_authz filter sends. Kyma builds the Kyma CRs Lifecycle Manager
// would create. The binary and the API server are real.
package extauthz

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
)

// StartedMessage is the log message ext-authz writes once it listens (a
// JSON line with grpcAddr, healthAddr and metricsAddr: zap's default
// production encoding, so do not pass --zap-devel to Start).
const StartedMessage = "ext-authz started"

// Process is a running ext-authz binary.
type Process struct {
	Cmd         *exec.Cmd
	GRPCAddr    string
	HealthAddr  string
	MetricsAddr string

	exited  chan struct{}
	waitErr error
	mu      sync.Mutex
	output  strings.Builder // stderr, bounded
}

const maxOutput = 1 << 20

// Start runs binary with args (loopback port-0 addresses are added unless
// args set them) and returns once it logged StartedMessage. Its stderr is
// copied to logOut. It fails when the process exits first or takes longer
// than timeout.
func Start(binary string, logOut io.Writer, timeout time.Duration, args ...string) (*Process, error) {
	all := args
	for _, d := range []string{"--grpc-addr=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0"} {
		if !hasFlag(args, strings.SplitN(d, "=", 2)[0]) {
			all = append(all, d)
		}
	}
	cmd := exec.Command(binary, all...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = logOut
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{Cmd: cmd, exited: make(chan struct{})}
	started := make(chan map[string]any, 1)
	scanDone := make(chan struct{})
	go func() {
		defer close(scanDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logOut, line)
			p.mu.Lock()
			if p.output.Len() < maxOutput {
				p.output.WriteString(line + "\n")
			}
			p.mu.Unlock()
			var entry map[string]any
			if json.Unmarshal([]byte(line), &entry) == nil && entry["msg"] == StartedMessage {
				select {
				case started <- entry:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-scanDone
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case entry := <-started:
		p.GRPCAddr, _ = entry["grpcAddr"].(string)
		p.HealthAddr, _ = entry["healthAddr"].(string)
		p.MetricsAddr, _ = entry["metricsAddr"].(string)
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("ext-authz exited before start: %v\n%s", p.waitErr, p.Output())
	case <-timer.C:
		_ = p.Kill()
		return nil, fmt.Errorf("ext-authz did not start within %s\n%s", timeout, p.Output())
	}
}

func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// Output is what the process wrote to stderr so far (up to 1 MiB).
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.output.String()
}

// ExitCode is the exit code once the process has exited (-1 if killed by a
// signal).
func (p *Process) ExitCode() int { return p.Cmd.ProcessState.ExitCode() }

// Ready reports whether GET /readyz answers 200.
func (p *Process) Ready() (bool, error) { return httpOK("http://" + p.HealthAddr + "/readyz") }

// Healthy reports whether GET /healthz answers 200.
func (p *Process) Healthy() (bool, error) { return httpOK("http://" + p.HealthAddr + "/healthz") }

// Metrics returns the text of GET /metrics.
func (p *Process) Metrics() (string, error) {
	resp, err := http.Get("http://" + p.MetricsAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return string(b), err
}

func httpOK(url string) (bool, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK, nil
}

// WaitReady polls /readyz until it answers 200 or ctx ends.
func (p *Process) WaitReady(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if ok, _ := p.Ready(); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ext-authz not ready: %w\n%s", ctx.Err(), p.Output())
		case <-p.exited:
			return fmt.Errorf("ext-authz exited: %v\n%s", p.waitErr, p.Output())
		case <-tick.C:
		}
	}
}

// Dial opens a gRPC client connection to the process.
func (p *Process) Dial() (*grpc.ClientConn, error) {
	return grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// RSSBytes reads the process's resident set size (VmRSS) from /proc.
func (p *Process) RSSBytes() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("unexpected VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// Stop sends SIGTERM and waits up to timeout for the exit (then kills).
func (p *Process) Stop(timeout time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
		_ = p.Kill()
		return fmt.Errorf("ext-authz did not stop within %s after SIGTERM", timeout)
	}
}

// Kill kills the process and waits for it.
func (p *Process) Kill() error {
	err := p.Cmd.Process.Kill()
	<-p.exited
	return err
}

// Kyma returns a Kyma CR (unstructured) with the skr-domain annotation
// (none when domain is "") and extra labels.
func Kyma(namespace, name, domain string, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	u.SetNamespace(namespace)
	u.SetName(name)
	if domain != "" {
		u.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: domain})
	}
	if len(labels) > 0 {
		u.SetLabels(labels)
	}
	u.Object["spec"] = map[string]any{"channel": "regular", "modules": []any{}}
	return u
}

// GatewayXFCC is the header an Istio ingress gateway with SANITIZE_SET writes
// for a client certificate (one element: Hash, Cert, Subject, URI, DNS).
func GatewayXFCC(certPEM []byte, cn string, dnsNames []string) string {
	var b strings.Builder
	b.WriteString(`Hash=6b1a0c0e;Cert="` + xfcc.EncodeCert(certPEM) + `";Subject="CN=` + cn + `";URI=`)
	for _, d := range dnsNames {
		b.WriteString(";DNS=" + d)
	}
	return b.String()
}

// CheckRequest is a CheckRequest as Envoy's ext_authz filter sends it for
// POST /v2/<manager>/event through the gateway, with lowercase header names
// and the given extra headers (e.g. x-forwarded-client-cert).
func CheckRequest(manager string, headers map[string]string) *authv3.CheckRequest {
	h := map[string]string{
		":authority":        "gateway.kcp.example.com",
		":method":           "POST",
		":path":             contract.EventPath(manager),
		":scheme":           "https",
		"content-type":      "application/json",
		"content-length":    "120",
		"user-agent":        "Go-http-client/2.0",
		"x-forwarded-proto": "https",
		"x-request-id":      "0b6e1f3c-3d0c-4a1e-9f0e-7f1c2f3a4b5c",
	}
	for k, v := range headers {
		h[k] = v
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "10.1.2.3", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 51234}},
		}}},
		Destination: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "10.9.8.7", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 443}},
		}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "1", Method: "POST", Path: contract.EventPath(manager), Host: "gateway.kcp.example.com",
			Scheme: "https", Protocol: "HTTP/2", Headers: h,
		}},
	}}
}
