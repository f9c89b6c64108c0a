// Package shards shares per-runtime work across the replicas of one
// component (ARCHITECTURE.md §3.13, issue 36) over Kubernetes' own
// coordination: each replica is a member with a Lease
// (coordination.k8s.io/v1, client-go), and runtimes go to the live members
// by rendezvous hashing (highest xxhash64 of member and runtime), so a
// change of membership moves only the share it must.
//
// Not multicluster-runtime's sharded coordinator (v0.24.1, evaluated for
// issue 36): it renews one fencing Lease per cluster every 10 s (25,000
// runtimes: 2,500 KCP writes/s), engages a cluster.Cluster (a cache) per
// cluster where our work items all live in the KCP's one cache, reads the
// wall clock directly, and does not end a pass in flight when a fence is
// lost; and its HRW sharder (FNV-1a of cluster|peer, no mixing) is not
// uniform: members a, b, c get 50/25/25 % of 25,000 runtimes.
//
// Fencing without a Lease per runtime (which would cost one KCP write per
// runtime per renewal): every member publishes in its own Lease the
// membership view it works under (annotation View). A member works on a
// runtime only when
//
//   - it owns the runtime under the view it adopted,
//   - it published that view and listed the members' Leases (a quorum read)
//     after that write, and
//   - no other live member's published view gives that member the runtime.
//
// A member that adopts a view in which it loses runtimes first ends every
// pass it began under the old view (their contexts are cancelled and it
// waits for them and for every request they sent to be answered: a
// cancelled request may still reach the API server), and only then
// publishes the new view. Writes and quorum
// reads of etcd are linearizable, so of two members that both claim a
// runtime, the one that published last sees the other's claim and waits:
// never two writers for one runtime. A member that cannot renew its Lease
// stops all work RenewDeadline after the start of its last successful
// renewal; the others treat its Lease as expired LeaseDuration after they
// last saw it change (their own clocks, as client-go's leader election),
// so its runtimes move only after it stopped. A member that stops cleanly
// releases its Lease (empty holder) and its runtimes move at the others'
// next tick.
//
// Membership cannot be forged (docs/architecture.md "Shards", docs/security.md
// "Shard membership"): only the component writes its members' Leases (the
// ValidatingAdmissionPolicy of manifests/kcp/base/shard-lease-policy.yaml),
// and what a Lease says counts only within bounds: a Lease is a member's
// only under the name <Group>-shard-<holder>; its declared duration counts
// at most as long as ours; a Lease deleted, or rewritten under a name that
// does not match its holder, counts as it was until it expires (a deletion
// is no release); a published view is read over the live members only
// (names that hold no live member Lease are dropped, which can only widen
// what its member claims).
//
// Nor frozen: no pass begins here once our own clock says RenewDeadline
// passed since the start of our last successful renewal, a watchdog ends
// every pass then (SIGSTOP, a frozen VM, a long GC: the loop that would
// notice does not run), and a member whose round finds that deadline past
// stops all work before it renews, and works again only after it published
// and listed anew (the others may have taken its runtimes meanwhile).
//
// A nil *Shards is a single replica: it owns every runtime (exactly the
// behaviour without sharding).
package shards

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Labels and annotation of the member Leases.
const (
	// LabelGroup names the component the member belongs to; its value is
	// Options.Group. `kubectl get leases -l shards.operator.kyma-project.io/group`
	// lists the members.
	LabelGroup = "shards.operator.kyma-project.io/group"
	// AnnotationView is the view the member works under: the members'
	// identities, comma-separated and sorted.
	AnnotationView = "shards.operator.kyma-project.io/view"
	// LabelOwner, on an object a member keeps for one runtime (written by
	// the component, e.g. vs-controller's runtime Certificate), is the
	// identity of the member that last wrote it: `kubectl get -L
	// shards.operator.kyma-project.io/owner` shows which replica keeps
	// each runtime. Set only when the identity is a valid label value.
	LabelOwner = "shards.operator.kyma-project.io/owner"
)

// Defaults of Options (client-go leader election's).
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Options configure New.
type Options struct {
	// Leases is the client of the KCP's Leases (client-go).
	Leases coordinationclient.LeasesGetter
	// Namespace of the member Leases; Group names the component (the Lease
	// of a member is <Group>-shard-<Identity>).
	Namespace, Group string
	// Identity of this member (the pod's name); unique among the members.
	Identity string
	// LeaseDuration: a member whose Lease did not change for this long is
	// gone. RenewDeadline: a member that could not renew for this long
	// stops all work. RetryPeriod: how often a member renews and lists.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Clock: the real clock when nil (tests pass a fake one).
	Clock clock.WithTicker
	Log   logr.Logger
}

// Shards is one member.
type Shards struct {
	o     Options
	m     *Metrics
	lease string // name of our Lease

	mu sync.RWMutex
	// adopted is the view we work under (sorted identities, ours included);
	// confirmed the view we published and listed after; we begin passes
	// only for runtimes we own under both.
	adopted, confirmed []string
	// others: the live members but us, each with the view it published
	// (as of our last list after our last publish).
	others map[string][]string
	// fenced: our Lease is past RenewDeadline without a renewal.
	fenced bool
	// deadline: RenewDeadline after the start of our last successful
	// renewal, by our own clock; no pass begins at or after it.
	deadline time.Time
	epoch    *epoch
	// renewed wakes the watchdog when deadline or fenced changed.
	renewed chan struct{}

	// Used by the loop only.
	ours      *coordinationv1.Lease  // as last written
	seen      map[string]observation // other Leases by name: what each last said within bounds
	onChange  []func(gained func(runtime string) bool) error
	notified  *snapshot           // what the last complete notify saw
	renotify  bool                // a notify failed: again at the next round
	published func(view []string) // test hook: after each renewal
}

// epoch is the passes begun under one adopted view, and their requests
// on the wire (FenceTransport).
type epoch struct {
	ctx    context.Context
	cancel context.CancelFunc
	passes sync.WaitGroup

	mu     sync.Mutex
	closed bool           // ended: a pass's request is no longer sent
	wire   sync.WaitGroup // requests sent, not yet answered
}

// end ends the epoch: it cancels its passes, waits until each is done, and
// then until every request they sent was answered (or failed for itself).
// A cancelled request returns at once to the pass, but may still be on the
// wire (Go's HTTP/2 client writes a request's frames in its own goroutine)
// and reach the API server later; the view that gives its runtime to
// another member is published only after it.
func (e *epoch) end() {
	e.cancel()
	e.passes.Wait()
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.wire.Wait()
}

// send registers a request of the epoch on the wire: false once the epoch
// ended. Call the func returned when the request was answered.
func (e *epoch) send() (answered func(), ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, false
	}
	e.wire.Add(1)
	return e.wire.Done, true
}

// observation is what a member Lease said when we last saw it change, as
// far as we believe it.
type observation struct {
	resourceVersion string
	at              time.Time // our clock, when we saw it change
	holder          string    // "" when released (or never a member's)
	view            []string
	duration        time.Duration // its declared duration, at most ours
}

// New returns a member; Start runs it.
func New(o Options) (*Shards, error) {
	if o.Leases == nil || o.Namespace == "" || o.Group == "" || o.Identity == "" {
		return nil, errors.New("shards: Leases, Namespace, Group and Identity are required")
	}
	if errs := validation.IsDNS1123Subdomain(o.Group + "-shard-" + o.Identity); len(errs) > 0 {
		return nil, fmt.Errorf("shards: identity %q does not make a Lease name: %s", o.Identity, strings.Join(errs, "; "))
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewDeadline <= 0 {
		o.RenewDeadline = DefaultRenewDeadline
	}
	if o.RetryPeriod <= 0 {
		o.RetryPeriod = DefaultRetryPeriod
	}
	if o.RenewDeadline >= o.LeaseDuration || o.RetryPeriod >= o.RenewDeadline {
		return nil, errors.New("shards: want RetryPeriod < RenewDeadline < LeaseDuration")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	s := &Shards{
		o: o, m: NewMetrics(o.Group, o.Identity), lease: o.Group + "-shard-" + o.Identity,
		others: map[string][]string{}, seen: map[string]observation{},
		fenced:  true, // until the first renewal
		renewed: make(chan struct{}, 1),
	}
	s.adopted = []string{o.Identity}
	s.epoch = newEpoch()
	return s, nil
}

func newEpoch() *epoch {
	ctx, cancel := context.WithCancel(context.Background())
	return &epoch{ctx: ctx, cancel: cancel}
}

// Identity of this member; "" for a single replica.
func (s *Shards) Identity() string {
	if s == nil {
		return ""
	}
	return s.o.Identity
}

// LabelOwned sets LabelOwner on obj to this member's identity (nothing for
// a single replica, or an identity that is no valid label value).
func (s *Shards) LabelOwned(obj metav1.Object) {
	if id := s.Identity(); id != "" && len(validation.IsValidLabelValue(id)) == 0 {
		set := obj.GetLabels()
		if set == nil {
			set = map[string]string{}
		}
		set[LabelOwner] = id
		obj.SetLabels(set)
	}
}

// OnChange registers f, called (from the member's loop) whenever this
// member may have gained runtimes, with gained: true for a runtime it
// owns now and did not own at the previous call. The controllers requeue
// the work of the runtimes gained; when one returns an error, every f is
// called again at the next round with what was gained since the last call
// that succeeded. Register before Start.
func (s *Shards) OnChange(f func(gained func(runtime string) bool) error) {
	if s != nil {
		s.onChange = append(s.onChange, f)
	}
}

// owner is runtime's owner under view: the member with the highest hash
// of member and runtime (rendezvous); "" for an empty view.
func (s *Shards) owner(runtime string, view []string) string {
	return Owner(runtime, view)
}

// Owner is runtime's owner among members (rendezvous hashing); "" when
// there are none.
func Owner(runtime string, members []string) string {
	var best string
	var bestScore uint64
	for _, m := range members {
		d := xxhash.New()
		_, _ = d.WriteString(m)
		_, _ = d.Write([]byte{0})
		_, _ = d.WriteString(runtime)
		if score := d.Sum64(); best == "" || score > bestScore || (score == bestScore && m > best) {
			best, bestScore = m, score
		}
	}
	return best
}

// OwnerOf is runtime's owner as this member sees it (its adopted view);
// "" for a single replica.
func (s *Shards) OwnerOf(runtime string) string {
	if s == nil {
		return ""
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.owner(runtime, s.adopted)
}

// Elsewhere says whether another member owns runtime under the view this
// member works under (false for a single replica): what this member keeps
// for it (its runtime clients) can go.
func (s *Shards) Elsewhere(runtime string) bool {
	if s == nil {
		return false
	}
	owner := s.OwnerOf(runtime)
	return owner != "" && owner != s.o.Identity
}

// Owns says whether a pass over runtime may begin here now.
func (s *Shards) Owns(runtime string) bool {
	if s == nil {
		return true
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ownsLocked(runtime)
}

func (s *Shards) ownsLocked(runtime string) bool {
	return s.snapshotLocked().owns(runtime)
}

// snapshot is what decides ownership at one moment.
type snapshot struct {
	self               string
	fenced             bool
	now, deadline      time.Time
	adopted, confirmed []string
	others             map[string][]string
}

func (s *Shards) snapshotLocked() snapshot {
	return snapshot{self: s.o.Identity, fenced: s.fenced, now: s.o.Clock.Now(), deadline: s.deadline,
		adopted: s.adopted, confirmed: s.confirmed, others: s.others}
}

func (v snapshot) owns(runtime string) bool {
	if v.fenced || !v.now.Before(v.deadline) || Owner(runtime, v.adopted) != v.self || Owner(runtime, v.confirmed) != v.self {
		return false
	}
	for id, view := range v.others {
		if Owner(runtime, view) == id {
			return false // not yet released by the member that had it
		}
	}
	return true
}

// Begin begins a pass over runtime: ok false when it is not ours (now),
// also once our own clock says the renew deadline passed. The pass runs
// under ctx, which is cancelled when the member changes its view, is
// fenced (the watchdog: the renew deadline passed) or stops; call done
// when the pass ends (once is enough; more calls do nothing).
func (s *Shards) Begin(ctx context.Context, runtime string) (pass context.Context, done func(), ok bool) {
	if s == nil {
		return ctx, func() {}, true
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.ownsLocked(runtime) {
		s.m.refused()
		return nil, nil, false
	}
	e := s.epoch
	e.passes.Add(1)
	pass, cancel := context.WithCancel(withPass(ctx, s, e))
	stop := context.AfterFunc(e.ctx, cancel)
	return pass, sync.OnceFunc(func() { stop(); cancel(); e.passes.Done() }), true
}

// SetOwned records how many runtimes this member owns (the metric
// runtime_watcher_shard_owned_runtimes).
func (s *Shards) SetOwned(n int) {
	if s != nil {
		s.m.SetOwned(n)
	}
}

// NeedLeaderElection: every replica is a member.
func (s *Shards) NeedLeaderElection() bool { return false }

// Start runs the member until ctx ends; then it ends its passes and
// releases its Lease so that its runtimes move at once. Rounds come every
// RetryPeriod, and every tenth of it while the membership settles (see
// Settling) — for at most one LeaseDuration after the last change of what
// the members published (a member that cannot publish does not keep the
// others in fast rounds).
func (s *Shards) Start(ctx context.Context) error {
	log := s.o.Log.WithValues("group", s.o.Group, "member", s.o.Identity)
	log.Info("shard member starting", "leaseDuration", s.o.LeaseDuration, "renewDeadline", s.o.RenewDeadline, "retryPeriod", s.o.RetryPeriod)
	var (
		views   string    // what the members published, as of the last round
		changed time.Time // when that last changed
	)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); s.watch(watchCtx, log) }()
	defer func() { stopWatch(); <-watched }()
	for {
		s.Tick(ctx, log)
		settling, now := s.settling()
		if now != views {
			views, changed = now, s.o.Clock.Now()
		}
		wait := s.o.RetryPeriod
		if settling && s.o.Clock.Since(changed) < s.o.LeaseDuration {
			wait = s.o.RetryPeriod / 10
		}
		t := s.o.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.stop(log)
			return nil
		case <-t.C():
		}
	}
}

// Settling says whether the membership is settling: a live member's
// published view (as of our last list) is not the view we work under, or
// we have not listed since we published it. Until it settles, a runtime
// whose owner changed is owned by nobody: its new owner waits to see the
// others release it (issue 36: an event that came then was refused by
// every replica and delivered again a second later). Start runs its rounds
// faster meanwhile.
func (s *Shards) Settling() bool {
	if s == nil {
		return false
	}
	settling, _ := s.settling()
	return settling
}

// settling is Settling and, as one string, the views we and the others
// published.
func (s *Shards) settling() (settling bool, views string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	settling = s.fenced || !slices.Equal(s.confirmed, s.adopted)
	parts := []string{s.o.Identity + "=" + strings.Join(s.confirmed, ",")}
	for id, view := range s.others {
		settling = settling || !slices.Equal(view, s.adopted)
		parts = append(parts, id+"="+strings.Join(view, ","))
	}
	slices.Sort(parts)
	return settling, strings.Join(parts, ";")
}

// Tick is one round of the member: renew (publishing the adopted view),
// list the members, adopt a new view when the live members changed. Start
// calls it every RetryPeriod (a tenth of it while the membership
// settles); tests call it directly.
func (s *Shards) Tick(ctx context.Context, log logr.Logger) {
	for range 3 { // a view change publishes and lists again at once
		if !s.round(ctx, log) {
			return
		}
	}
}

// round returns true when the view changed (another round confirms it).
func (s *Shards) round(ctx context.Context, log logr.Logger) bool {
	start := s.o.Clock.Now()
	// Resumed after a gap (SIGSTOP, a frozen VM): our runtimes may be
	// another's by now. Stop first, then renew and list anew.
	s.expire(log, "renew deadline passed before this round: the member did not run (stopped, frozen) or its last round outlasted it")
	s.mu.RLock()
	publish := slices.Clone(s.adopted)
	s.mu.RUnlock()
	if err := s.renew(ctx, start, publish); err != nil {
		s.m.renewal("failed")
		if !s.expire(log, "member Lease not renewed within the renew deadline: "+err.Error()) {
			log.Info("member Lease not renewed; retrying", "error", err.Error())
		}
		return false
	}
	s.m.renewal("renewed")
	s.mu.Lock()
	s.deadline = start.Add(s.o.RenewDeadline)
	s.mu.Unlock()
	s.wake()
	if s.published != nil {
		s.published(publish)
	}
	others, err := s.list(ctx, log)
	if err != nil {
		log.Info("members not listed; retrying", "error", err.Error())
		return false
	}
	// The renewal and the list must both fall within the renew deadline
	// of the renewal's start: a pause between them (or a slow list) makes
	// what we listed stale by the time we would act on it.
	if s.expire(log, "renewal and list outlasted the renew deadline") {
		return false
	}
	desired := []string{s.o.Identity}
	for id := range others {
		desired = append(desired, id)
	}
	slices.Sort(desired)

	s.mu.Lock()
	wasFenced := s.fenced
	s.fenced = false
	if wasFenced {
		defer s.wake()
	}
	gained := wasFenced || !slices.Equal(s.confirmed, publish) || !sameViews(s.others, others)
	s.confirmed = publish
	s.others = others
	if slices.Equal(desired, s.adopted) {
		now := s.snapshotLocked()
		s.mu.Unlock()
		s.m.members(len(desired), 0)
		if wasFenced {
			log.Info("member working", "view", desired)
		}
		if gained || s.renotify {
			s.notify(log, now)
		}
		return false
	}
	// Adopt: passes begun under the old view end before we publish the
	// new one (a lost runtime's next owner waits for that publication).
	old := s.adopted
	s.adopted = desired
	e := s.epoch
	s.epoch = newEpoch()
	s.mu.Unlock()
	e.end()
	s.m.members(len(desired), 1)
	log.Info("membership changed", "view", desired, "previous", old)
	return true
}

func (s *Shards) notify(log logr.Logger, now snapshot) {
	prev := s.notified
	gained := func(runtime string) bool {
		return now.owns(runtime) && (prev == nil || !prev.owns(runtime))
	}
	var errs []error
	for _, f := range s.onChange {
		if err := f(gained); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		log.Error(err, "runtimes gained not all requeued; again at the next round")
		s.renotify = true
		return
	}
	s.renotify = false
	s.notified = &now
}

func sameViews(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for id, v := range a {
		w, ok := b[id]
		if !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}

// expire fences this member when its own clock says the renew deadline
// passed without a renewal (the others may take its Lease as expired
// soon, or have already); true when the deadline has passed (fenced now
// or before).
func (s *Shards) expire(log logr.Logger, why string) bool {
	s.mu.Lock()
	if s.deadline.IsZero() || s.o.Clock.Now().Before(s.deadline) {
		s.mu.Unlock()
		return false
	}
	if s.fenced {
		s.mu.Unlock()
		return true
	}
	s.fenced = true
	e := s.epoch
	s.epoch = newEpoch()
	s.mu.Unlock()
	e.end()
	s.m.fenced()
	log.Error(errors.New(why), "member fenced: all work stopped until it renewed its Lease and listed the members again", "renewDeadline", s.o.RenewDeadline)
	return true
}

// wake tells the watchdog that the deadline or fencing changed.
func (s *Shards) wake() {
	select {
	case s.renewed <- struct{}{}:
	default:
	}
}

// watch is the watchdog: at the renew deadline, by our own clock, it
// fences the member unless a renewal came first. The loop does the same
// when it runs, but a member whose loop does not run (stopped, frozen)
// would otherwise keep its passes alive past the deadline: the timer fires
// as soon as the process runs again.
func (s *Shards) watch(ctx context.Context, log logr.Logger) {
	for {
		s.mu.RLock()
		deadline, fenced := s.deadline, s.fenced
		s.mu.RUnlock()
		var t clock.Timer
		var expired <-chan time.Time
		if !fenced && !deadline.IsZero() {
			wait := deadline.Sub(s.o.Clock.Now())
			if wait <= 0 {
				s.expire(log, "renew deadline passed without a renewal (watchdog)")
				continue
			}
			t = s.o.Clock.NewTimer(wait)
			expired = t.C()
		}
		select {
		case <-ctx.Done():
		case <-s.renewed:
		case <-expired:
			s.expire(log, "renew deadline passed without a renewal (watchdog)")
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// stop ends every pass and releases our Lease.
func (s *Shards) stop(log logr.Logger) {
	s.mu.Lock()
	s.fenced = true
	e := s.epoch
	s.epoch = newEpoch()
	s.mu.Unlock()
	e.end()
	ctx, cancel := context.WithTimeout(context.Background(), s.o.RenewDeadline)
	defer cancel()
	leases := s.o.Leases.Leases(s.o.Namespace)
	l, err := leases.Get(ctx, s.lease, metav1.GetOptions{})
	if err == nil && ptr.Deref(l.Spec.HolderIdentity, "") == s.o.Identity {
		l.Spec.HolderIdentity = ptr.To("")
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		log.Info("member Lease not released; it expires", "error", err.Error())
		return
	}
	log.Info("member Lease released")
}

// renew writes our Lease with view.
func (s *Shards) renew(ctx context.Context, now time.Time, view []string) error {
	ctx, cancel := context.WithTimeout(ctx, s.o.RenewDeadline)
	defer cancel()
	leases := s.o.Leases.Leases(s.o.Namespace)
	if s.ours == nil {
		l, err := leases.Get(ctx, s.lease, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: s.lease, Namespace: s.o.Namespace}}
		case err != nil:
			return err
		}
		s.ours = l
	}
	l := s.ours.DeepCopy()
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[LabelGroup] = s.o.Group
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationView] = strings.Join(view, ",")
	t := metav1.NewMicroTime(now)
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != s.o.Identity {
		l.Spec.AcquireTime = &t
	}
	l.Spec.HolderIdentity = ptr.To(s.o.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(s.o.LeaseDuration / time.Second))
	l.Spec.RenewTime = &t
	var err error
	if l.ResourceVersion == "" {
		l, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		l, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		s.ours = nil // read again: a conflict means someone else wrote it
		return err
	}
	s.ours = l
	return nil
}

// list reads the members' Leases (a quorum read) and returns the live
// others with their published views, each read over the live members only.
// What a Lease says counts within bounds (see the package comment): the
// name binds the holder, the declared duration counts at most as ours, a
// Lease that disappeared or lost its name's holder counts as it last was
// until it expires.
func (s *Shards) list(ctx context.Context, log logr.Logger) (map[string][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.RenewDeadline)
	defer cancel()
	list, err := s.o.Leases.Leases(s.o.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{LabelGroup: s.o.Group}).String(),
	})
	if err != nil {
		return nil, err
	}
	now := s.o.Clock.Now()
	prefix := s.o.Group + "-shard-"
	seen := map[string]observation{}
	for i := range list.Items {
		l := &list.Items[i]
		if l.Name == s.lease {
			continue
		}
		o, ok := s.seen[l.Name]
		if ok && o.resourceVersion == l.ResourceVersion {
			seen[l.Name] = o
			continue
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		if holder != "" && l.Name != prefix+holder {
			// Not its holder's Lease: what it said while it was counts
			// until it expires; a Lease that never was says nothing.
			s.m.ignored("name")
			log.Info("member Lease ignored: its name is not <group>-shard-<holder>", "lease", l.Name, "holder", holder)
			o.resourceVersion = l.ResourceVersion
			if !ok {
				o.at = now
			}
			seen[l.Name] = o
			continue
		}
		// The member's own duration (it fences itself at its renew
		// deadline, a share of it), at most ours; ours when it declares
		// none.
		d := s.o.LeaseDuration
		if declared := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second; declared > 0 && declared < d {
			d = declared
		} else if declared > d {
			s.m.ignored("duration")
		}
		var view []string
		if v := l.Annotations[AnnotationView]; v != "" && holder != "" {
			view = strings.Split(v, ",")
		}
		seen[l.Name] = observation{resourceVersion: l.ResourceVersion, at: now, holder: holder, view: view, duration: d}
	}
	// A Lease deleted (or unlabelled) is no release: it counts as it last
	// was until it expires.
	for name, o := range s.seen {
		if _, ok := seen[name]; !ok && o.holder != "" && now.Sub(o.at) < o.duration {
			seen[name] = o
		}
	}
	s.seen = seen
	members := map[string]bool{s.o.Identity: true}
	for _, o := range seen {
		if o.holder != "" && now.Sub(o.at) < o.duration {
			members[o.holder] = true
		}
	}
	others := map[string][]string{}
	for _, o := range seen {
		if o.holder == "" || o.holder == s.o.Identity || now.Sub(o.at) >= o.duration {
			continue // released or expired
		}
		// Names that hold no live member Lease are dropped from the view:
		// that can only widen what its member claims (rendezvous hashing
		// over fewer members), never shrink it below what it may work on.
		others[o.holder] = slices.DeleteFunc(slices.Clone(o.view), func(id string) bool { return !members[id] })
	}
	return others, nil
}
