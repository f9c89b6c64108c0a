package shards

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// The members run against a real API server; time is a fake clock per
// member, and each member's round is driven by the test (Tick), so every
// interleaving below is the test's, not the scheduler's.

const ns = "default"

var runtimes = func() []string {
	out := make([]string, 3000)
	for i := range out {
		out[i] = fmt.Sprintf("kcp-system/runtime-%05d", i)
	}
	return out
}()

type member struct {
	*Shards
	clock *clocktesting.FakeClock
}

func newMember(t *testing.T, cs kubernetes.Interface, group, id string) *member {
	t.Helper()
	c := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	s, err := New(Options{Leases: cs.CoordinationV1(), Namespace: ns, Group: group, Identity: id, Clock: c, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	return &member{Shards: s, clock: c}
}

// waitFor polls cond (another goroutine's effect) for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling another goroutine's effect, bounded above
	}
}

func (m *member) tick(t *testing.T) {
	t.Helper()
	m.Tick(context.Background(), logr.Discard())
}

// step advances every member's clock by d and ticks them in order.
func step(t *testing.T, d time.Duration, ms ...*member) {
	t.Helper()
	for _, m := range ms {
		m.clock.Step(d)
	}
	for _, m := range ms {
		m.tick(t)
	}
}

// writers returns, per runtime, the members that may begin a pass now;
// it fails the test for a runtime two members may write.
func writers(t *testing.T, ms ...*member) (owned map[string]int, unowned int) {
	t.Helper()
	owned = map[string]int{}
	for _, r := range runtimes {
		var w []string
		for _, m := range ms {
			if m.Owns(r) {
				w = append(w, m.o.Identity)
			}
		}
		switch len(w) {
		case 0:
			unowned++
		case 1:
			owned[w[0]]++
		default:
			t.Errorf("runtime %s has two writers: %v", r, w)
		}
	}
	return owned, unowned
}

func owners(ms ...*member) map[string]string {
	out := map[string]string{}
	for _, r := range runtimes {
		for _, m := range ms {
			if m.Owns(r) {
				out[r] = m.o.Identity
			}
		}
	}
	return out
}

func TestMembers(t *testing.T) {
	testenv.SkipIfShort(t)
	env, err := testenv.Start("kcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs := kubernetes.NewForConfigOrDie(env.Cluster("kcp").Config)

	t.Run("a single member owns every runtime", func(t *testing.T) {
		a := newMember(t, cs, "single", "a")
		if a.Owns(runtimes[0]) {
			t.Error("a member owns runtimes before its Lease is written")
		}
		a.tick(t)
		if _, unowned := writers(t, a); unowned != 0 {
			t.Errorf("%d runtimes unowned with one member", unowned)
		}
		var nilShards *Shards
		if !nilShards.Owns(runtimes[0]) || nilShards.Elsewhere(runtimes[0]) {
			t.Error("without sharding a runtime is not owned")
		}
		if a.Elsewhere(runtimes[0]) {
			t.Error("a single member sees its runtime elsewhere")
		}
	})

	t.Run("joins move only the share they must, each runtime once, never to two writers", func(t *testing.T) {
		a := newMember(t, cs, "join", "a")
		b := newMember(t, cs, "join", "b")
		c := newMember(t, cs, "join", "c")
		gainedB := 0
		b.OnChange(func(gained func(string) bool) error {
			for _, r := range runtimes {
				if gained(r) {
					gainedB++
				}
			}
			return nil
		})
		// What a is told when the membership changes: the runtimes it
		// lost are elsewhere (the controllers drop their runtime clients).
		elsewhereA := map[string]bool{}
		a.OnChange(func(func(string) bool) error {
			for _, r := range runtimes {
				if a.Elsewhere(r) {
					elsewhereA[r] = true
				}
			}
			return nil
		})
		a.tick(t)
		before := owners(a)
		// b joins: it publishes first, then a sees it. At every point in
		// between no runtime has two writers.
		b.tick(t)
		writers(t, a, b)
		a.tick(t)
		writers(t, a, b)
		b.tick(t)
		owned, unowned := writers(t, a, b)
		if unowned != 0 {
			t.Errorf("%d runtimes unowned after b joined and a released", unowned)
		}
		after := owners(a, b)
		moved := 0
		for r, o := range after {
			if before[r] != o {
				moved++
				if o != "b" {
					t.Errorf("runtime %s moved from %s to %s, not to the new member", r, before[r], o)
				}
			}
		}
		assertShare(t, "b joined", owned, 2)
		if len(elsewhereA) != moved {
			t.Errorf("a was told of %d runtimes elsewhere, %d moved to b", len(elsewhereA), moved)
		}
		for r := range elsewhereA {
			if after[r] != "b" {
				t.Errorf("a saw %s elsewhere, but it is %s's", r, after[r])
			}
		}
		if gainedB != owned["b"] {
			t.Errorf("b was told of %d runtimes gained, owns %d", gainedB, owned["b"])
		}
		// c joins; then several more rounds: nothing moves again.
		c.tick(t)
		writers(t, a, b, c)
		a.tick(t)
		writers(t, a, b, c)
		b.tick(t)
		writers(t, a, b, c)
		c.tick(t)
		owned, unowned = writers(t, a, b, c)
		if unowned != 0 {
			t.Errorf("%d runtimes unowned after c joined", unowned)
		}
		assertShare(t, "c joined", owned, 3)
		settled := owners(a, b, c)
		for r, o := range settled {
			if after[r] != o && o != "c" {
				t.Errorf("runtime %s moved from %s to %s when c joined", r, after[r], o)
			}
		}
		for range 3 {
			step(t, time.Second, a, b, c)
			for r, o := range owners(a, b, c) {
				if settled[r] != o {
					t.Fatalf("runtime %s flapped from %s to %s without a membership change", r, settled[r], o)
				}
			}
		}
	})

	t.Run("a member that stops releases its runtimes at once", func(t *testing.T) {
		a := newMember(t, cs, "leave", "a")
		b := newMember(t, cs, "leave", "b")
		for range 2 {
			a.tick(t)
			b.tick(t)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := b.Start(ctx); err != nil { // one round, then stop: end passes, release
			t.Fatal(err)
		}
		if _, unowned := writers(t, a, b); unowned == 0 {
			t.Fatal("a released member's runtimes are owned before a saw the release (test premise)")
		}
		a.tick(t) // no time passes: the release, not an expiry, moves them
		if owned, unowned := writers(t, a, b); unowned != 0 || owned["a"] != len(runtimes) {
			t.Errorf("after b released: a owns %d, %d unowned", owned["a"], unowned)
		}
	})

	t.Run("a member that dies: its runtimes move after its Lease expired, not before", func(t *testing.T) {
		a := newMember(t, cs, "die", "a")
		b := newMember(t, cs, "die", "b")
		for range 2 {
			a.tick(t)
			b.tick(t)
		}
		ownedB := 0
		for _, r := range runtimes {
			if b.Owns(r) {
				ownedB++
			}
		}
		// b stops ticking (SIGKILL). a keeps its rounds.
		var moved time.Duration
		for elapsed := time.Duration(0); elapsed < 30*time.Second; {
			a.clock.Step(time.Second)
			elapsed += time.Second
			a.tick(t)
			owned, _ := writers(t, a)
			if owned["a"] == len(runtimes) {
				moved = elapsed
				break
			}
		}
		if moved < DefaultLeaseDuration {
			t.Errorf("b's %d runtimes moved %s after its last renewal, before its Lease (%s) expired", ownedB, moved, DefaultLeaseDuration)
		}
		if moved == 0 || moved > DefaultLeaseDuration+DefaultRetryPeriod {
			t.Errorf("b's runtimes not re-owned within a Lease period and a round (moved after %s)", moved)
		}
	})

	t.Run("a member that cannot renew stops before the others take over", func(t *testing.T) {
		a := newMember(t, cs, "fence", "a")
		b := newMember(t, cs, "fence", "b")
		for range 2 {
			a.tick(t)
			b.tick(t)
		}
		_, done, ok := b.Begin(context.Background(), ownedBy(b))
		if !ok {
			t.Fatal("b begins no pass over its own runtime")
		}
		done()
		// b is cut off from the API server: its renewals fail.
		cut, cancel := context.WithCancel(context.Background())
		cancel()
		for elapsed := time.Second; elapsed <= 30*time.Second; elapsed += time.Second {
			a.clock.Step(time.Second)
			b.clock.Step(time.Second)
			b.Tick(cut, logr.Discard())
			a.tick(t)
			writers(t, a, b) // never two writers along the way
			if a.Owns(ownedBy(b)) && !b.fenced {
				t.Fatalf("after %s a took b's runtimes while b still works", elapsed)
			}
		}
		if !b.fenced {
			t.Error("b still works after 30 s without a renewal")
		}
		if owned, unowned := writers(t, a, b); unowned != 0 || owned["a"] != len(runtimes) {
			t.Errorf("a owns %d after b was cut off, %d unowned", owned["a"], unowned)
		}
		// b comes back: it waits until a released its share.
		b.tick(t)
		writers(t, a, b)
		a.tick(t)
		writers(t, a, b)
		b.tick(t)
		if _, unowned := writers(t, a, b); unowned != 0 {
			t.Errorf("%d runtimes unowned after b came back", unowned)
		}
	})

	t.Run("a pass in flight when its runtime moves ends before the move", func(t *testing.T) {
		a := newMember(t, cs, "inflight", "a")
		a.tick(t)
		b := newMember(t, cs, "inflight", "b")
		b.tick(t)
		r := ""
		for _, x := range runtimes {
			if b.owner(x, []string{"a", "b"}) == "b" {
				r = x
				break
			}
		}
		pass, done, ok := a.Begin(context.Background(), r)
		if !ok {
			t.Fatal("a cannot begin a pass before b joined")
		}
		// a adopts the new view: the pass is cancelled and a waits for it
		// to end before it publishes the view that gives r to b.
		var ended atomic.Bool
		early := make(chan struct{}, 1)
		a.published = func(view []string) {
			if len(view) == 2 && !ended.Load() {
				t.Error("a published the view that moves the runtime while its pass still runs")
				early <- struct{}{}
			}
		}
		go func() {
			<-pass.Done()
			// The pass goes on for a while after its cancellation (a
			// write in flight): a must not publish meanwhile.
			select {
			case <-early:
			case <-time.After(500 * time.Millisecond):
			}
			ended.Store(true)
			done()
		}()
		a.tick(t)
		if !ended.Load() {
			t.Error("a's round ended while its pass still runs")
		}
		b.tick(t)
		if !b.Owns(r) {
			t.Error("b does not own its runtime after a released it")
		}
	})

	t.Run("while the membership settles rounds come every tenth of the retry period", func(t *testing.T) {
		a := newMember(t, cs, "settle", "a")
		b := newMember(t, cs, "settle", "b")
		a.tick(t)
		a.tick(t)
		if a.Settling() {
			t.Fatal("a single member that published and listed its view is settling")
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			_ = b.Start(ctx)
		}()
		t.Cleanup(func() { cancel(); <-stopped })
		// b's first rounds: it adopts {a, b}; a still publishes {a}, so b
		// waits for a's release of b's share and is settling.
		waitFor(t, "b's first round", func() bool { return b.clock.HasWaiters() && b.Settling() })
		if owned, _ := writers(t, a, b); owned["b"] != 0 {
			t.Fatalf("b owns %d runtimes before a published a view with b", owned["b"])
		}
		a.tick(t) // a adopts {a, b} and publishes it
		// b's next round comes a tenth of the retry period later, not a
		// whole one (the runtimes it gained would be owned by nobody
		// meanwhile).
		b.clock.Step(DefaultRetryPeriod / 10)
		waitFor(t, "b's share owned a tenth of the retry period after a published the view", func() bool {
			owned, unowned := writers(t, a, b)
			return owned["b"] > 0 && unowned == 0
		})
		waitFor(t, "b settled", func() bool { return !b.Settling() })
	})

	t.Run("leases list the members", func(t *testing.T) {
		l, err := cs.CoordinationV1().Leases(ns).List(context.Background(), metav1.ListOptions{LabelSelector: LabelGroup + "=join"})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 3 {
			t.Errorf("%d member Leases of group join, want 3", len(l.Items))
		}
		for _, it := range l.Items {
			if it.Annotations[AnnotationView] != "a,b,c" {
				t.Errorf("Lease %s publishes view %q, want a,b,c", it.Name, it.Annotations[AnnotationView])
			}
		}
	})
}

func ownedBy(m *member) string {
	for _, r := range runtimes {
		if m.Owns(r) {
			return r
		}
	}
	return ""
}

// assertShare: n members each own about a 1/n share (rendezvous hashing
// of 3,000 runtimes: within 5 standard deviations).
func assertShare(t *testing.T, when string, owned map[string]int, n int) {
	t.Helper()
	want := float64(len(runtimes)) / float64(n)
	sd := math.Sqrt(want * (1 - 1/float64(n)))
	for id, got := range owned {
		if math.Abs(float64(got)-want) > 5*sd {
			t.Errorf("%s: member %s owns %d runtimes, want about %.0f", when, id, got, want)
		}
	}
	if len(owned) != n {
		t.Errorf("%s: %d members own runtimes, want %d", when, len(owned), n)
	}
}
