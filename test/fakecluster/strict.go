package fakecluster

import (
	"errors"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// ErrUnexpectedWrite is wrapped by the error of a write the strict mode
// (ExpectNoWrites) refused.
var ErrUnexpectedWrite = errors.New("write not expected by the test")

type strictWindow struct {
	tb      testing.TB
	allowed []Write
}

// ExpectNoWrites makes the cluster strict until end is called or tb's
// test ends, whichever is first: a write that none of allowed matches
// fails tb with tb.Errorf, naming the verb, the group, version and kind
// and the key (namespace/name) of the write, so the message says which
// write was not expected. Writes are create, update, patch, apply, delete,
// deleteAllOf and the create, update, patch and apply of a subresource
// (status), by the cluster's client itself or by whatever holds it: the
// clients Runtimes.For hands out and the managers' of Managers are this
// cluster. A create with dry run writes nothing and is accepted; reads
// are never affected.
//
// A field of an allowed Write left empty matches anything:
// Write{Verb: StatusPatch, Kind: "SyncResource"} allows every status patch
// of every SyncResource, Write{Kind: "ConfigMap", Namespace: "a", Name: "b"}
// every write of ConfigMap a/b.
//
// An unexpected write is also refused, not only reported: it returns an
// error wrapping ErrUnexpectedWrite, before any fault (Fail) is consulted,
// leaves the stored object as it was and is not recorded in Writes. Let
// through, the code under test would go on as if the write had succeeded,
// every later assertion of the test would look at a state the test says
// cannot be, and one unexpected write could bring a cascade of others
// (more messages hiding the first); refused, the first message is the
// cause and the code under test takes the path of a failed write, which
// it must have anyway. Errorf, not Fatalf: writes may come from the
// goroutines of a controller, where FailNow must not be called; the
// returned error stops the code instead.
//
// Calls do not nest: a second ExpectNoWrites replaces the first window,
// and the first's end then does nothing.
func (c *Cluster) ExpectNoWrites(tb testing.TB, allowed ...Write) (end func()) {
	tb.Helper()
	w := &strictWindow{tb: tb, allowed: append([]Write(nil), allowed...)}
	c.mu.Lock()
	c.strict = w
	c.mu.Unlock()
	end = func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.strict == w {
			c.strict = nil
		}
	}
	tb.Cleanup(end)
	return end
}

// expected is nil unless the cluster is strict and no allowed write
// matches this one; then it fails the strict window's test and is the
// refusal.
func (c *Cluster) expected(verb string, obj runtime.Object, namespace, name string) error {
	gvk := c.gvkOf(obj)
	c.mu.Lock()
	w := c.strict
	c.mu.Unlock()
	if w == nil || w.allows(Write{Verb: verb, Kind: c.kindOf(obj), Namespace: namespace, Name: name}) {
		return nil
	}
	key := name
	if name == "" {
		key = "*" // deleteAllOf
	}
	if namespace != "" {
		key = namespace + "/" + key
	}
	w.tb.Helper()
	what := gvk.GroupVersion().String() + " " + gvk.Kind + " " + key
	w.tb.Errorf("fakecluster: unexpected %s of %s (the cluster is strict: ExpectNoWrites)", verb, what)
	return fmt.Errorf("fakecluster: %s of %s: %w", verb, what, ErrUnexpectedWrite)
}

func (w *strictWindow) allows(wr Write) bool {
	for _, a := range w.allowed {
		if (a.Verb == "" || a.Verb == wr.Verb) && (a.Kind == "" || a.Kind == wr.Kind) &&
			(a.Namespace == "" || a.Namespace == wr.Namespace) && (a.Name == "" || a.Name == wr.Name) {
			return true
		}
	}
	return false
}
