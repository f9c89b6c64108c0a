// Package shardaudit checks the shard invariants of docs/architecture.md
// "Shards" from the API servers' audit logs alone (never from our logs):
// the member Leases' writes with the views they published (the KCP's),
// and the writes of each runtime's objects by the replica its user agent
// names (shards.UserAgent: "… shard/<identity>") — in the KCP and, when
// given, in the SKR. module-sync's and vs-controller's shard tests use it.
package shardaudit

import (
	"bufio"
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-c8be168e/runtime-watcher/shards"
)

// Event is the part of an audit event the check reads.
type Event struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	Stage     string `json:"stage"`
	ObjectRef struct {
		Resource, Namespace, Name, Subresource string
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceived metav1.MicroTime `json:"requestReceivedTimestamp"`
	StageTimestamp  metav1.MicroTime `json:"stageTimestamp"`
	RequestObject   json.RawMessage  `json:"requestObject"`
}

// Policy is the KCP audit policy Check reads: every write of a shard
// member's Lease in kcp-system with the Lease itself (the views it
// published), and the metadata of every write of the runtimes' objects,
// written: a YAML flow list of audit resource groups, as
// `[{group: "g", resources: ["r", "r/status"]}]`.
func Policy(written string) []byte {
	return []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: RequestResponse
  verbs: ["create", "update", "patch"]
  namespaces: ["kcp-system"]
  resources: [{group: "coordination.k8s.io", resources: ["leases"]}]
- level: Metadata
  verbs: ["create", "update", "patch", "delete"]
  resources: ` + written + `
- level: None
`)
}

// Member is the shard identity in a user agent; "" when it names none.
func Member(userAgent string) string {
	i := strings.Index(userAgent, " shard/")
	if i < 0 {
		return ""
	}
	return userAgent[i+len(" shard/"):]
}

// Options of Check.
type Options struct {
	// Group of the members (their Leases are <Group>-shard-<identity>).
	Group string
	// Lease is the members' Lease duration.
	Lease time.Duration
	// Runtime is the runtime key (shards' hash input) an audited write of a
	// member is about; false for writes that are none of the check's.
	Runtime func(e *Event) (string, bool)
	// SKRAudit, when set, is the audit log of the SKR the runtimes point
	// at; SKRRuntime is the runtime key of a member's write there. Both
	// API servers run on one machine: one clock.
	SKRAudit   string
	SKRRuntime func(e *Event) (string, bool)
	// Runtimes: how many runtimes must have been written.
	Runtimes int
	// MembershipChanges bounds how often a runtime may change writer.
	MembershipChanges int
}

// publication is a member's Lease write: who, when it was stored, the view
// it published, whether it was a release.
type publication struct {
	at       time.Time
	member   string
	view     []string
	released bool
}

type write struct {
	at     time.Time
	member string
}

// Check reads the audit log at path and fails t unless: every write of a
// runtime was made by a replica whose live Lease claimed that runtime; when
// a runtime's writer changed, the previous one had published a view
// without it (or released or let expire its Lease) after its last write
// and before the new writer's first (never two writers); a runtime never
// went back to a replica that had handed it on within one Lease period;
// and no runtime changed writer more often than membership changed (no
// flapping). It returns the number of writes and of writer changes.
func Check(t testing.TB, path string, o Options) (writes, moves int) {
	t.Helper()
	var pubs []publication
	byRuntime := map[string][]write{}
	prefix := o.Group + "-shard-"
	read(t, path, func(e *Event) {
		if e.ObjectRef.Resource == "leases" && strings.HasPrefix(e.ObjectRef.Name, prefix) {
			var l coordinationv1.Lease
			if err := json.Unmarshal(e.RequestObject, &l); err != nil {
				t.Fatalf("Lease in the audit log: %v", err)
			}
			p := publication{at: e.StageTimestamp.Time, member: strings.TrimPrefix(l.Name, prefix),
				released: l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == ""}
			if v := l.Annotations[shards.AnnotationView]; v != "" {
				p.view = strings.Split(v, ",")
			}
			pubs = append(pubs, p)
			return
		}
		if member := Member(e.UserAgent); member != "" {
			if rt, ok := o.Runtime(e); ok {
				byRuntime[rt] = append(byRuntime[rt], write{at: e.RequestReceived.Time, member: member})
			}
		}
	})
	skrWrites := 0
	if o.SKRAudit != "" {
		read(t, o.SKRAudit, func(e *Event) {
			if member := Member(e.UserAgent); member != "" {
				if rt, ok := o.SKRRuntime(e); ok {
					byRuntime[rt] = append(byRuntime[rt], write{at: e.RequestReceived.Time, member: member})
					skrWrites++
				}
			}
		})
		if skrWrites == 0 {
			t.Fatalf("SKR audit log %s holds no write of a member", o.SKRAudit)
		}
	}
	if len(pubs) == 0 || len(byRuntime) != o.Runtimes {
		t.Fatalf("audit log holds %d member Lease writes and writes of %d runtimes, want writes of %d", len(pubs), len(byRuntime), o.Runtimes)
	}
	sort.Slice(pubs, func(i, j int) bool { return pubs[i].at.Before(pubs[j].at) })
	// claimAt: the view member's live Lease published last before at.
	claimAt := func(member string, at time.Time) (view []string, live bool) {
		var last *publication
		for i := range pubs {
			if pubs[i].at.After(at) {
				break
			}
			if pubs[i].member == member {
				last = &pubs[i]
			}
		}
		if last == nil || last.released || at.Sub(last.at) >= o.Lease {
			return nil, false
		}
		return last.view, true
	}
	for runtime, ws := range byRuntime {
		sort.Slice(ws, func(i, j int) bool { return ws[i].at.Before(ws[j].at) })
		handedOn := map[string]time.Time{} // member -> when it last wrote before another did
		changes := 0
		for i, w := range ws {
			writes++
			view, live := claimAt(w.member, w.at)
			if !live || shards.Owner(runtime, view) != w.member {
				t.Errorf("%s written by %s at %s while its Lease did not claim it (live %v, view %v)", runtime, w.member, w.at.Format(time.StampMicro), live, view)
			}
			if i == 0 || ws[i-1].member == w.member {
				continue
			}
			moves++
			changes++
			prev := ws[i-1]
			if !released(pubs, prev.member, runtime, prev.at, w.at, o.Lease) {
				t.Errorf("%s written by %s at %s before %s (last write at %s) released it or its Lease expired: two writers",
					runtime, w.member, w.at.Format(time.StampMicro), prev.member, prev.at.Format(time.StampMicro))
			}
			handedOn[prev.member] = prev.at
			if at, ok := handedOn[w.member]; ok && w.at.Sub(at) < o.Lease {
				t.Errorf("%s went back to %s %s after it handed it on: two writers in one Lease period", runtime, w.member, w.at.Sub(at))
			}
		}
		if changes > o.MembershipChanges {
			t.Errorf("%s changed writer %d times over %d membership changes (flapping)", runtime, changes, o.MembershipChanges)
		}
	}
	t.Logf("audit logs: %d member Lease writes, %d writes of %d runtimes (%d of them in the SKR), %d writer changes; every write under its writer's live claim", len(pubs), writes, len(byRuntime), skrWrites, moves)
	return writes, moves
}

// read calls f with every successful write (ResponseComplete, 2xx) of the
// audit log at path.
func read(t testing.TB, path string, f func(e *Event)) {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line: %v", err)
		}
		if e.Stage != "ResponseComplete" || e.ResponseStatus.Code/100 != 2 {
			continue
		}
		f(&e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// released: between from and to, member published a view in which it does
// not own runtime (or released its Lease), or its Lease expired — one of
// its publications went a Lease period without a next one, at a moment
// after from and not after to (a member that was stopped and came back
// renews under its old view: its Lease lapsed in between all the same).
func released(pubs []publication, member, runtime string, from, to time.Time, lease time.Duration) bool {
	var last *publication
	for i := range pubs {
		p := &pubs[i]
		if p.member != member || p.at.After(to) {
			continue
		}
		if last != nil {
			if expiry := last.at.Add(lease); expiry.After(from) && !p.at.Before(expiry) {
				return true
			}
		}
		last = p
		if p.at.After(from) && (p.released || shards.Owner(runtime, p.view) != member) {
			return true
		}
	}
	return last == nil || to.Sub(last.at) >= lease
}
