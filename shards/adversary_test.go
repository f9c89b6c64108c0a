package shards

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/seed-c8be168e/runtime-watcher/test/fakeleases"
)

// The attacks of issue 40 (findings 4 and 5) on members over a fake Lease
// client (test/fakeleases), each member with its own fake clock and its
// rounds driven by the test.

// settled returns members a and b of group, settled on the view {a, b}.
func settled(t *testing.T, group string) (a, b *member, cs kubernetes.Interface) {
	t.Helper()
	cs = fakeleases.New()
	a, b = newMember(t, cs, group, "a"), newMember(t, cs, group, "b")
	for range 3 {
		a.tick(t)
		b.tick(t)
	}
	if owned, unowned := writers(t, a, b); unowned != 0 || owned["a"] == 0 || owned["b"] == 0 {
		t.Fatalf("not settled: %v owned, %d unowned", owned, unowned)
	}
	return a, b, cs
}

// forge writes a member Lease of group as an attacker with Lease write in
// the members' namespace would: holder zz, its own view, the longest
// duration a Lease can declare.
func forge(t *testing.T, leases coordinationclient.LeaseInterface, group, name string, at time.Time) {
	t.Helper()
	now := metav1.NewMicroTime(at)
	if _, err := leases.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelGroup: group},
			Annotations: map[string]string{AnnotationView: "zz"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("zz"), LeaseDurationSeconds: ptr.To(int32(math.MaxInt32)),
			AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestForgedMemberLease: issue 40 finding 4 — a Lease with holder zz, its
// own view and leaseDurationSeconds 2147483647 left 3000 of 3000 runtimes
// unowned for 24 h. Under any name it is ignored (the name binds the
// holder); under zz's own name, written once, it counts for at most our
// Lease duration (docs/security.md "Shard membership"; at admission the
// policy of manifests/kcp/base/shard-lease-policy.yaml refuses it first).
func TestForgedMemberLease(t *testing.T) {
	t.Run("under any name: ignored, every runtime stays owned", func(t *testing.T) {
		a, b, cs := settled(t, "forged-name")
		leases := cs.CoordinationV1().Leases(ns)
		forge(t, leases, "forged-name", "forged", a.clock.Now())
		for elapsed := time.Duration(0); elapsed < 24*time.Hour; elapsed += time.Hour {
			step(t, time.Second, a, b) // rounds see the forged Lease change nothing
			if _, unowned := writers(t, a, b); unowned != 0 {
				t.Fatalf("%d of %d runtimes unowned %s after a Lease named forged with holder zz", unowned, len(runtimes), elapsed)
			}
			a.clock.Step(time.Hour - time.Second)
			b.clock.Step(time.Hour - time.Second)
			a.tick(t)
			b.tick(t)
		}
		if a.adoptedView() != "a,b" || b.adoptedView() != "a,b" {
			t.Errorf("views %q and %q, want a,b: the forged holder became a member", a.adoptedView(), b.adoptedView())
		}
	})

	t.Run("under its holder's name, written once: counts for at most our Lease duration", func(t *testing.T) {
		a, b, cs := settled(t, "forged-duration")
		leases := cs.CoordinationV1().Leases(ns)
		forge(t, leases, "forged-duration", "forged-duration-shard-zz", a.clock.Now())
		var stalled, back time.Duration
		for elapsed := time.Duration(0); elapsed <= time.Minute; elapsed += time.Second {
			step(t, time.Second, a, b)
			_, unowned := writers(t, a, b) // never two writers either
			if unowned > 0 {
				stalled = elapsed
			}
			if unowned == 0 && stalled > 0 && back == 0 {
				back = elapsed
			}
		}
		if stalled == 0 {
			t.Fatal("the forged member was never believed (test premise: a well-formed Lease is a member until it expires)")
		}
		if back == 0 {
			t.Fatalf("runtimes not owned again within a minute after the forged Lease (declared %d s)", math.MaxInt32)
		}
		if back > DefaultLeaseDuration+2*DefaultRetryPeriod {
			t.Errorf("runtimes owned again %s after the forged Lease (declared %d s), want within our Lease duration %s and a round", back, math.MaxInt32, DefaultLeaseDuration)
		}
		t.Logf("forged member Lease of %d s: runtimes owned again after %s", math.MaxInt32, back)
	})

	t.Run("a member Lease deleted is no release: its runtimes move only once it expired", func(t *testing.T) {
		a, b, cs := settled(t, "deleted")
		leases := cs.CoordinationV1().Leases(ns)
		if err := leases.Delete(context.Background(), "deleted-shard-b", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		a.tick(t) // no time passes: b still works
		writers(t, a, b)
		if a.Owns(ownedBy(b)) {
			t.Fatal("a took b's runtimes at once when b's Lease was deleted while b works")
		}
	})

	t.Run("a view padded with non-members cannot shrink its member's claim", func(t *testing.T) {
		a, b, cs := settled(t, "padded")
		leases := cs.CoordinationV1().Leases(ns)
		c := newMember(t, cs, "padded", "c")
		// a still works under {a, b}; its Lease is rewritten to name
		// twenty members that do not exist, under which it would claim
		// almost nothing. c joins.
		l, err := leases.Get(context.Background(), "padded-shard-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ghosts := []string{"a", "b"}
		for i := range 20 {
			ghosts = append(ghosts, fmt.Sprintf("ghost-%02d", i))
		}
		l.Annotations[AnnotationView] = strings.Join(ghosts, ",")
		if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			c.tick(t)
			writers(t, a, b, c) // a's runtimes going to c: never while a may still write them
		}
		b.tick(t)
		a.tick(t)
		for range 3 {
			c.tick(t)
			a.tick(t)
			b.tick(t)
		}
		if _, unowned := writers(t, a, b, c); unowned != 0 {
			t.Errorf("%d runtimes unowned after c joined", unowned)
		}
	})
}

// TestFrozenMemberFenced: issue 40 finding 5 — a member whose loop did not
// run for 30 s (SIGSTOP) kept its runtimes by its own Owns while the other
// took them: 1480 of 3000 runtimes had two owners, and the pass it began
// before the pause stayed live. Now its own clock ends its work at its
// renew deadline: nothing is owned twice, the pass is cancelled by the
// watchdog, and it works again only after it renewed and listed.
func TestFrozenMemberFenced(t *testing.T) {
	a, b, _ := settled(t, "frozen")
	r := ownedBy(b)
	pass, done, ok := b.Begin(context.Background(), r)
	if !ok {
		t.Fatal("b begins no pass over its own runtime")
	}
	defer done()
	// A write of the pass through FenceTransport (the runtimes' and the
	// KCP's clients): sent now, not once b's renew deadline passed.
	sent := 0
	skr := FenceTransport(roundTripFunc(func(*http.Request) (*http.Response, error) {
		sent++
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}))
	write := func() error {
		req, err := http.NewRequestWithContext(pass, http.MethodPut, "https://skr.example/api/v1/namespaces/shards/configmaps/x", http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := skr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := write(); err != nil || sent != 1 {
		t.Fatalf("a write of b's pass before the pause: %v (sent %d)", err, sent)
	}
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { defer close(watched); b.watch(ctx, logr.Discard()) }()
	t.Cleanup(func() { cancel(); <-watched })
	before := owners(a, b)

	// b is stopped for 30 s, mid-pass; a keeps its rounds and takes b's
	// runtimes once b's Lease expired.
	for range 30 {
		a.clock.Step(time.Second)
		a.tick(t)
	}
	if owned, _ := writers(t, a); owned["a"] != len(runtimes) {
		t.Fatalf("a owns %d runtimes after b's Lease expired (test premise)", owned["a"])
	}
	// b runs again: its clock says 30 s passed.
	b.clock.Step(30 * time.Second)
	if owned, _ := writers(t, a, b); owned["b"] != 0 {
		t.Errorf("b owns %d runtimes after its renew deadline passed", owned["b"])
	}
	if _, _, ok := b.Begin(context.Background(), r); ok {
		t.Error("b begins a pass after its renew deadline passed")
	}
	if err := write(); !errors.Is(err, ErrFenced) || sent != 1 {
		t.Errorf("a write of the pass b began before the pause, after it: %v (sent %d), want ErrFenced and not sent", err, sent)
	}
	waitFor(t, "the watchdog cancels the pass b began before the pause", func() bool { return pass.Err() != nil })
	done()

	// b's loop runs again: it fences, renews and lists, waits for a's
	// release; a sees b back and releases b's share.
	moves := map[string]int{}
	prev := owners(a, b)
	record := func() {
		for rt, o := range owners(a, b) {
			if prev[rt] != o {
				moves[rt]++
			}
		}
		prev = owners(a, b)
	}
	for _, m := range []*member{b, a, b, a, b} {
		m.clock.Step(time.Second)
		m.tick(t)
		writers(t, a, b)
		record()
	}
	owned, unowned := writers(t, a, b)
	if unowned != 0 || owned["b"] == 0 {
		t.Errorf("after b came back: %v owned, %d unowned", owned, unowned)
	}
	for rt, o := range owners(a, b) {
		if before[rt] != o {
			t.Errorf("runtime %s owned by %s after the pause, by %s before (one view again)", rt, o, before[rt])
		}
	}
	// b's share went to a at its expiry (counted above by a's take-over)
	// and back at its return: each at most once, the two membership
	// changes of the pause.
	for rt, n := range moves {
		if n > 1 {
			t.Errorf("runtime %s changed owner %d times on b's return", rt, n)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (m *member) adoptedView() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return strings.Join(m.adopted, ",")
}

// TestCancelledRequestHoldsTheView: TestShards' audit (module-sync, CI at
// 5be8277) saw a member's SKR write land after that member had published
// the view handing the runtime on. The pass had been cancelled and ended
// at once, but Go's HTTP/2 client writes a request in its own goroutine:
// a request cancelled on the client can still reach the server later. Now
// a request of a pass is held to its answer, and the member publishes the
// view that gives the runtime away only after it.
func TestCancelledRequestHoldsTheView(t *testing.T) {
	_, b, cs := settled(t, "wire")
	c := newMember(t, cs, "wire", "c")
	c.tick(t) // c's Lease: b loses to c at its next round
	var r string
	for _, rt := range runtimes {
		if b.Owns(rt) && Owner(rt, []string{"a", "b", "c"}) == "c" {
			r = rt
			break
		}
	}
	if r == "" {
		t.Fatal("no runtime of b goes to c (test premise)")
	}
	pass, done, ok := b.Begin(context.Background(), r)
	if !ok {
		t.Fatal("b begins no pass over its own runtime")
	}
	// The request is on the wire (its frames written); the server takes it
	// only when the test lets it. The client gives up on its context's
	// cancellation, as Go's does, but that does not unsend the request.
	arrived, release := make(chan struct{}), make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	var servedAt, publishedAt int
	var order int
	var mu sync.Mutex
	b.published = func(view []string) {
		mu.Lock()
		defer mu.Unlock()
		if slices.Contains(view, "c") {
			order++
			publishedAt = order
		}
	}
	skr := FenceTransport(roundTripFunc(func(req *http.Request) (*http.Response, error) {
		served := make(chan struct{})
		go func() {
			<-release
			mu.Lock()
			order++
			servedAt = order
			mu.Unlock()
			close(served)
		}()
		close(arrived)
		select {
		case <-served:
			return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}))
	wrote := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(pass, http.MethodPut, "https://skr.example/api/v1/namespaces/shards/configmaps/x", http.NoBody)
		if err != nil {
			wrote <- err
			return
		}
		resp, err := skr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		wrote <- err
	}()
	<-arrived
	ticked := make(chan struct{})
	go func() { defer close(ticked); b.tick(t) }() // b sees c: adopts a, b, c and cancels its passes
	if err := <-wrote; !errors.Is(err, context.Canceled) {
		t.Fatalf("the write of b's pass on b's view change: %v, want context.Canceled at once", err)
	}
	done()
	// b waits for the server's answer before it publishes a, b, c.
	for range 20 {
		if l := lease(t, cs, "wire-shard-b"); l != "a,b" {
			t.Fatalf("b published %q while its cancelled write was still on the wire", l)
		}
		time.Sleep(10 * time.Millisecond) // a negative: nothing may change in this window
	}
	unblock()
	<-ticked
	if l := lease(t, cs, "wire-shard-b"); l != "a,b,c" {
		t.Errorf("b publishes %q after its round, want a,b,c", l)
	}
	mu.Lock()
	defer mu.Unlock()
	if servedAt == 0 || publishedAt < servedAt {
		t.Errorf("b published its view (step %d) before the server took its cancelled write (step %d)", publishedAt, servedAt)
	}
	// A request of the ended view is not sent.
	req, _ := http.NewRequestWithContext(pass, http.MethodPut, "https://skr.example/x", http.NoBody)
	if _, err := skr.RoundTrip(req); err == nil {
		t.Error("a request of the pass b's view change ended was sent")
	}
}

func lease(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Annotations[AnnotationView]
}
