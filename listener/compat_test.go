package listener_test

import (
	"bytes"
	"net/http"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/listener"
)

// TestKymaRuntimeWatcherBodies posts the exact bodies of Kyma's listener v2
// tests (testdata/README.md): the small one is accepted and decoded, the
// large one is refused with 413 as Kyma's listener does.
func TestKymaRuntimeWatcherBodies(t *testing.T) {
	small, err := os.ReadFile("testdata/kyma/listener-event-small.json")
	if err != nil {
		t.Fatal(err)
	}
	large, err := os.ReadFile("testdata/kyma/listener-event-large.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(large) <= contract.MaxEventBodyBytes {
		t.Fatalf("large fixture has %d bytes, not over the limit", len(large))
	}
	s := start(t)
	id := hdr(contract.HeaderRuntimeID, "runtime-a", "Content-Type", "application/json")

	resp, text := s.do(t, http.MethodPost, s.l.Path(), bytes.NewReader(small), id)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("small: %d (%s)", resp.StatusCode, text)
	}
	ev, ok := listener.EventFrom(nextEvent(t, s.l.Events()).Object)
	if !ok {
		t.Fatal("not a listener event")
	}
	if ev.Watched != (types.NamespacedName{Namespace: "kcp-system", Name: "watched-resource"}) ||
		ev.WatchedGVK.Group != "operator.kyma-project.io" || ev.WatchedGVK.Version != "v1alpha1" || ev.WatchedGVK.Kind != "kyma" ||
		ev.RuntimeID != "runtime-a" {
		t.Fatalf("decoded %+v", ev)
	}

	resp, _ = s.do(t, http.MethodPost, s.l.Path(), bytes.NewReader(large), id)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("large: %d, want 413", resp.StatusCode)
	}
	noEvent(t, s.l.Events())
}
