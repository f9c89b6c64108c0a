package envoy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// StartEdge runs Envoy on e's bootstrap until the test ends, after
// checking the bootstrap with `envoy --mode validate`, and returns it with
// the port its listener bound on 127.0.0.1.
func StartEdge(t testing.TB, e Edge) (*Process, int) {
	t.Helper()
	b, err := e.Bootstrap()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	binary, err := testenv.EnvoyBinary()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "validate.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Validate(ctx, binary, path); err != nil {
		t.Fatal(err)
	}
	p, err := Start(ctx, Options{Dir: dir, Bootstrap: b, Output: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	ports, err := p.Admin.ListenerPorts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	port, ok := ports[ListenerName]
	if !ok {
		t.Fatalf("envoy has no listener %s: %v", ListenerName, ports)
	}
	return p, port
}

// logWriter sends Envoy's log to the test log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
