package main

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// options are ext-authz's flags. Each flag can also be set by the
// environment variable EXT_AUTHZ_<FLAG> (upper case, '-' as '_'), e.g.
// EXT_AUTHZ_KYMA_NAMESPACE; a command-line flag wins over the variable.
type options struct {
	grpcAddr      string
	kubeconfig    string
	kymaNamespace string
	metricsAddr   string
	healthAddr    string
	caFile        string
	apiTimeout    time.Duration
	shutdownGrace time.Duration
	zap           zap.Options

	roots *x509.CertPool // from caFile
}

// envPrefix starts the environment variables that mirror the flags.
const envPrefix = "EXT_AUTHZ_"

// parseFlags parses and validates args (without the program name).
func parseFlags(args []string, getenv func(string) string, errOut io.Writer) (*options, error) {
	o := &options{zap: zap.Options{Development: false}}
	fs := flag.NewFlagSet("ext-authz", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&o.grpcAddr, "grpc-addr", ":9001", "address of the gRPC server (envoy.service.auth.v3.Authorization and grpc.health.v1.Health)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file of the KCP cluster; in-cluster configuration when empty")
	fs.StringVar(&o.kymaNamespace, "kyma-namespace", "kcp-system", "namespace of the Kyma CRs")
	fs.StringVar(&o.metricsAddr, "metrics-addr", ":8080", "address of the plain HTTP /metrics endpoint")
	fs.StringVar(&o.healthAddr, "health-addr", ":8081", "address of the plain HTTP /healthz and /readyz endpoints")
	fs.StringVar(&o.caFile, "ca-file", "", "optional PEM file of the CA client certificates must chain to (defence in depth; the gateway verifies first)")
	fs.DurationVar(&o.apiTimeout, "api-timeout", 10*time.Second, "how long to wait for the API server at start-up before failing")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace", 10*time.Second, "how long in-flight Checks may take on SIGTERM")
	o.zap.BindFlags(fs)

	// Environment variables become the defaults of their flags.
	var envErrs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" {
			if err := f.Value.Set(v); err != nil {
				envErrs = append(envErrs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
			f.DefValue = v
		}
	})
	if err := errors.Join(envErrs...); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	for _, a := range []struct{ flag, addr string }{{"grpc-addr", o.grpcAddr}, {"metrics-addr", o.metricsAddr}, {"health-addr", o.healthAddr}} {
		if err := validAddr(a.addr); err != nil {
			return nil, fmt.Errorf("--%s %q: %w", a.flag, a.addr, err)
		}
	}
	seen := map[string]bool{}
	for _, a := range []string{o.grpcAddr, o.metricsAddr, o.healthAddr} {
		if seen[a] && !strings.HasSuffix(a, ":0") {
			return nil, fmt.Errorf("--grpc-addr, --metrics-addr and --health-addr must differ (%s, %s, %s)", o.grpcAddr, o.metricsAddr, o.healthAddr)
		}
		seen[a] = true
	}
	if errs := validation.IsDNS1123Label(o.kymaNamespace); len(errs) > 0 {
		return nil, fmt.Errorf("--kyma-namespace %q: %s", o.kymaNamespace, strings.Join(errs, "; "))
	}
	if o.apiTimeout <= 0 || o.shutdownGrace <= 0 {
		return nil, errors.New("--api-timeout and --shutdown-grace must be positive")
	}
	if o.kubeconfig != "" {
		if _, err := os.Stat(o.kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
	}
	if o.caFile != "" {
		pemBytes, err := os.ReadFile(o.caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		o.roots = x509.NewCertPool()
		if !o.roots.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", o.caFile)
		}
	}
	return o, nil
}

// validAddr accepts host:port with a numeric port (host may be empty).
func validAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}
