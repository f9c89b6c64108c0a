package delivery

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// kymaWatchEvent is the type Kyma's listener v1.4.3 decodes a body into
// (kyma-project/runtime-watcher listener/pkg/v2/types.WatchEvent, tag
// listener/v1.4.3): watched is a types.NamespacedName (no JSON tags: keys
// match case-insensitively), watchedGvk a metav1.GroupVersionKind. It has no
// field for "resync" or "heartbeat".
type kymaWatchEvent struct {
	Watched    types.NamespacedName    `json:"watched"`
	WatchedGvk metav1.GroupVersionKind `json:"watchedGvk"`
}

// kymaListenerV143 answers a request as Kyma's listener v1.4.3 does for its
// component (listener/pkg/v2/event: SKREventListener.Start's route
// /v2/<component>/event and 16 KiB limit, HandleSKREvent, UnmarshalSKREvent,
// getSkrMetaFromRequest, UnstructuredContent; listener/pkg/v2/certificate:
// GetCertificateFromHeader). On 200 it returns the content of the
// unstructured object the operator receives on its channel.
func kymaListenerV143(component string, r *http.Request) (int, map[string]any) {
	const limit = 16384
	if r.URL.Path != "/v2/"+component+"/event" {
		return http.StatusNotFound, nil
	}
	if r.ContentLength > limit {
		return http.StatusRequestEntityTooLarge, nil
	}
	if r.Method != http.MethodPost {
		return http.StatusMethodNotAllowed, nil
	}
	var version string
	if _, err := fmt.Sscanf(strings.Split(r.URL.Path, "/")[1], "v%s", &version); (err != nil && !errors.Is(err, io.EOF)) || version == "" {
		return http.StatusBadRequest, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		return http.StatusInternalServerError, nil
	}
	var ev kymaWatchEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return http.StatusInternalServerError, nil
	}
	// The runtime ID is the CN of the first certificate in XFCC.
	values, ok := r.Header["X-Forwarded-Client-Cert"]
	if !ok || len(values[0]) > 32*1024 {
		return http.StatusUnauthorized, nil
	}
	_, token, found := strings.Cut(values[0], "Cert=")
	if i := strings.IndexAny(token, ";,"); i >= 0 {
		token = token[:i]
	}
	if !found || token == "" {
		return http.StatusUnauthorized, nil
	}
	decoded, err := url.QueryUnescape(token)
	if err != nil {
		return http.StatusUnauthorized, nil
	}
	block, _ := pem.Decode([]byte(strings.Trim(decoded, `"`)))
	if block == nil {
		return http.StatusUnauthorized, nil
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return http.StatusUnauthorized, nil
	}
	if cert.Subject.CommonName == "" {
		return http.StatusBadRequest, nil
	}
	return http.StatusOK, map[string]any{
		"watched": ev.Watched, "watched-gvk": ev.WatchedGvk, "runtime-id": cert.Subject.CommonName,
	}
}

// recordedRequest is one request as our HTTP sender puts it on the wire
// (testdata/kymalistener-requests.json).
type recordedRequest struct {
	What        string `json:"what"`
	Method      string `json:"method"`
	Path        string `json:"path"`
	ContentType string `json:"contentType"`
	Body        string `json:"body"`
}

// What an operator on Kyma's listener v1.4.3 receives behind our edge: the
// requests our webhook sends for a change, a resync and a heartbeat are
// recorded byte-exact (and must equal testdata/kymalistener-requests.json),
// then answered as Kyma's listener does with the XFCC header our gateway
// sets. A change arrives intact; a resync and a heartbeat arrive as the
// same ordinary event with an empty object and GVK (their marker is
// dropped) — which is why heartbeats are opt-in per manager.
func TestKymaListenerV143ReceivesOurRequests(t *testing.T) {
	const manager, runtimeID = "lifecycle-manager", "runtime-a"
	// The replicated decoder first accepts Kyma's own fixture.
	fixture, err := os.ReadFile("testdata/listener-event-small.json")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("kyma-compat-ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: runtimeID, DNSNames: []string{"skr.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	xfcc := envoy.XFCC(leaf.Cert)
	post := func(method, path, body string, xfccHeader bool) (int, map[string]any) {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if xfccHeader {
			r.Header.Set(contract.HeaderXFCC, xfcc)
		}
		return kymaListenerV143(manager, r)
	}
	path := contract.EventPath(manager)
	if code, got := post(http.MethodPost, path, string(fixture), true); code != http.StatusOK ||
		got["watched"] != (types.NamespacedName{Namespace: "kcp-system", Name: "watched-resource"}) || got["runtime-id"] != runtimeID {
		t.Fatalf("Kyma's fixture: %d %v", code, got)
	}
	for name, c := range map[string]struct {
		method, body string
		xfcc         bool
		want         int
	}{
		"no XFCC": {http.MethodPost, string(fixture), false, http.StatusUnauthorized},
		"GET":     {http.MethodGet, string(fixture), true, http.StatusMethodNotAllowed},
		"bad":     {http.MethodPost, `{"watched": []}`, true, http.StatusInternalServerError},
		"large":   {http.MethodPost, strings.Repeat(" ", 16385), true, http.StatusRequestEntityTooLarge},
	} {
		if code, _ := post(c.method, path, c.body, c.xfcc); code != c.want {
			t.Errorf("replicated decoder, %s: %d, want %d", name, code, c.want)
		}
	}

	// Record what our sender puts on the wire.
	var recorded []recordedRequest
	kcp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		recorded = append(recorded, recordedRequest{
			Method: r.Method, Path: r.URL.Path, ContentType: r.Header.Get("Content-Type"), Body: string(body),
		})
	}))
	defer kcp.Close()
	s, err := NewHTTPSender(strings.TrimPrefix(kcp.URL, "http://"), kcp.Client)
	if err != nil {
		t.Fatal(err)
	}
	s.base.Scheme = "http" // plain HTTP test server; the request is what matters
	events := []struct {
		what string
		ev   contract.WatchEvent
	}{
		{"change", contract.WatchEvent{
			Watched:    contract.ObjectKey{Namespace: "kcp-system", Name: "kyma-sample"},
			WatchedGvk: contract.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"},
		}},
		{"resync", contract.WatchEvent{Resync: contract.ResyncStartup}},
		{"heartbeat", contract.WatchEvent{Heartbeat: true}},
	}
	for i, e := range events {
		if r := s.Send(context.Background(), manager, e.ev); r.Outcome != Delivered {
			t.Fatalf("%s: %+v", e.what, r)
		}
		recorded[i].What = e.what
	}
	golden, err := os.ReadFile("testdata/kymalistener-requests.json")
	if err != nil {
		t.Fatal(err)
	}
	var want []recordedRequest
	if err := json.Unmarshal(golden, &want); err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(recorded); !bytes.Equal(got, mustMarshal(t, want)) {
		t.Fatalf("on the wire:\n%s\nrecorded in testdata:\n%s", got, mustMarshal(t, want))
	}

	// What the operator gets for each.
	empty := map[string]any{"watched": types.NamespacedName{}, "watched-gvk": metav1.GroupVersionKind{}, "runtime-id": runtimeID}
	wantContent := map[string]map[string]any{
		"change": {
			"watched":     types.NamespacedName{Namespace: "kcp-system", Name: "kyma-sample"},
			"watched-gvk": metav1.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"},
			"runtime-id":  runtimeID,
		},
		"resync":    empty,
		"heartbeat": empty,
	}
	for _, r := range want {
		code, got := post(r.Method, r.Path, r.Body, true)
		if code != http.StatusOK {
			t.Errorf("%s: Kyma's listener answers %d", r.What, code)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(wantContent[r.What]) {
			t.Errorf("%s: the operator receives %v, want %v", r.What, got, wantContent[r.What])
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
