package admission

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

type queued struct {
	manager string
	ev      contract.WatchEvent
}

// recorder is an Enqueuer that remembers what it was given.
type recorder struct {
	mu  sync.Mutex
	got []queued
}

func (r *recorder) Enqueue(manager string, ev contract.WatchEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, queued{manager, ev})
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHandler(t *testing.T) {
	create := readFixture(t, "admissionreview-mock-request-reference.json")
	status := readFixture(t, "admissionreview-mock-request-reference-status.json")
	unchangedStatus := func() []byte {
		var r admissionv1.AdmissionReview
		if err := json.Unmarshal(status, &r); err != nil {
			t.Fatal(err)
		}
		r.Request.Object = r.Request.OldObject
		b, _ := json.Marshal(r)
		return b
	}()
	withoutRequest := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`)
	v1beta1 := bytes.Replace(create, []byte(`"admission.k8s.io/v1"`), []byte(`"admission.k8s.io/v1beta1"`), 1)
	oversized := append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","x":"`),
		bytes.Repeat([]byte("a"), contract.MaxAdmissionBodyBytes)...)
	oversized = append(oversized, `"}`...)

	tests := []struct {
		name        string
		method      string
		path        string
		body        []byte
		hideLength  bool // send chunked, so only the reader limit catches size
		wantCode    int
		wantUID     string
		wantEnqueue []queued
		wantResult  string
		wantManager string
	}{
		{
			name: "CREATE is allowed and enqueued", method: http.MethodPost, path: "/validate/lifecycle-manager", body: create,
			wantCode: 200, wantUID: "b8c0335f-ce87-4da3-82bf-a6a6a55d088e",
			wantEnqueue: []queued{{"lifecycle-manager", contract.WatchEvent{
				Watched:    contract.ObjectKey{Namespace: "default", Name: "kyma-sample"},
				WatchedGvk: contract.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1alpha1", Kind: "Kyma"},
			}}},
			wantResult: "emitted", wantManager: "lifecycle-manager",
		},
		{
			name: "status change is allowed and enqueued", method: http.MethodPost, path: "/validate/m2", body: status,
			wantCode: 200, wantUID: "53b89f11-eea2-4659-a2ae-da610698730e",
			wantEnqueue: []queued{{"m2", contract.WatchEvent{
				Watched:    contract.ObjectKey{Namespace: "default", Name: "sample-sample"},
				WatchedGvk: contract.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1alpha1", Kind: "Sample"},
			}}},
			wantResult: "emitted", wantManager: "m2",
		},
		{
			name: "unchanged status is allowed, nothing enqueued", method: http.MethodPost, path: "/validate/m2", body: unchangedStatus,
			wantCode: 200, wantUID: "53b89f11-eea2-4659-a2ae-da610698730e", wantResult: "unchanged", wantManager: "m2",
		},
		{name: "empty manager", method: http.MethodPost, path: "/validate/", body: create, wantCode: 404, wantResult: "not_found", wantManager: "_invalid"},
		{name: "manager not a DNS label", method: http.MethodPost, path: "/validate/Lifecycle_Manager", body: create, wantCode: 404, wantResult: "not_found", wantManager: "_invalid"},
		{name: "nested path", method: http.MethodPost, path: "/validate/a/b", body: create, wantCode: 404, wantResult: "not_found", wantManager: "_invalid"},
		{name: "other path", method: http.MethodPost, path: "/v2/a/event", body: create, wantCode: 404, wantResult: "not_found", wantManager: "_invalid"},
		{name: "GET", method: http.MethodGet, path: "/validate/m", wantCode: 405, wantResult: "method_not_allowed", wantManager: "m"},
		{name: "body over the limit by Content-Length", method: http.MethodPost, path: "/validate/m", body: oversized, wantCode: 413, wantResult: "too_large", wantManager: "m"},
		{name: "body over the limit, chunked", method: http.MethodPost, path: "/validate/m", body: oversized, hideLength: true, wantCode: 413, wantResult: "too_large", wantManager: "m"},
		{name: "not JSON", method: http.MethodPost, path: "/validate/m", body: []byte("hello"), wantCode: 400, wantResult: "bad_request", wantManager: "m"},
		{name: "empty body", method: http.MethodPost, path: "/validate/m", body: nil, wantCode: 400, wantResult: "bad_request", wantManager: "m"},
		{name: "no request", method: http.MethodPost, path: "/validate/m", body: withoutRequest, wantCode: 400, wantResult: "bad_request", wantManager: "m"},
		{name: "v1beta1 review", method: http.MethodPost, path: "/validate/m", body: v1beta1, wantCode: 400, wantResult: "bad_request", wantManager: "m"},
		{name: "wrong type of field", method: http.MethodPost, path: "/validate/m", body: []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":5}}`), wantCode: 400, wantResult: "bad_request", wantManager: "m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			m := NewMetrics(prometheus.NewRegistry())
			ov := &overflows{}
			h := NewHandler(rec, logr.Discard(), m).LimitInFlight(0, ov)
			var body io.Reader = bytes.NewReader(tt.body)
			if tt.hideLength {
				body = io.MultiReader(body) // not a *bytes.Reader: length unknown
			}
			req := httptest.NewRequest(tt.method, tt.path, body)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)

			if w.Code != tt.wantCode {
				t.Fatalf("code = %d, want %d (body %q)", w.Code, tt.wantCode, w.Body.String())
			}
			if tt.wantCode == 200 {
				var resp admissionv1.AdmissionReview
				if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
					t.Fatal(err)
				}
				if resp.APIVersion != "admission.k8s.io/v1" || resp.Kind != "AdmissionReview" {
					t.Errorf("answer type %q %q", resp.APIVersion, resp.Kind)
				}
				if resp.Response == nil || !resp.Response.Allowed || string(resp.Response.UID) != tt.wantUID {
					t.Errorf("answer %+v, want allowed with uid %s", resp.Response, tt.wantUID)
				}
				if ct := w.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("content type %q", ct)
				}
			} else if strings.TrimSpace(w.Body.String()) == "" {
				t.Error("error answer without a message")
			}
			if len(rec.got) != len(tt.wantEnqueue) {
				t.Fatalf("enqueued %+v, want %+v", rec.got, tt.wantEnqueue)
			}
			for i := range rec.got {
				if rec.got[i] != tt.wantEnqueue[i] {
					t.Errorf("enqueued %+v, want %+v", rec.got[i], tt.wantEnqueue[i])
				}
			}
			// A review too large to read is a change that may be lost:
			// its manager gets an overflow resync; nothing else asks one.
			var wantOverflow []string
			if tt.wantResult == "too_large" {
				wantOverflow = []string{tt.wantManager}
			}
			if !slices.Equal(ov.got, wantOverflow) {
				t.Errorf("overflow resyncs requested for %q, want %q", ov.got, wantOverflow)
			}
			if n := seriesCount(m.requests); n != 1 {
				t.Fatalf("%d metric series, want 1", n)
			}
			var op string
			if tt.wantCode == 200 {
				op = "UPDATE"
				if tt.wantUID == "b8c0335f-ce87-4da3-82bf-a6a6a55d088e" {
					op = "CREATE"
				}
			}
			if v := counterValue(t, m.requests.WithLabelValues(tt.wantManager, op, tt.wantResult)); v != 1 {
				t.Errorf("requests{%s,%s,%s} = %v, want 1", tt.wantManager, op, tt.wantResult, v)
			}
		})
	}
}

func TestMetricsBoundManagerLabels(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	for i := 0; i < MaxManagerLabels+10; i++ {
		m.observe("m"+strings.Repeat("x", i), "CREATE", "emitted", time.Now())
	}
	if n := seriesCount(m.requests); n != MaxManagerLabels+1 {
		t.Fatalf("%d series, want %d (+1 for _other)", n, MaxManagerLabels+1)
	}
	if v := counterValue(t, m.requests.WithLabelValues("_other", "CREATE", "emitted")); v != 10 {
		t.Fatalf("_other = %v, want 10", v)
	}
}

// FuzzHandler feeds arbitrary bodies to the handler: it must answer 200 or
// 400 and never panic; a 200 is always allowed: true.
func FuzzHandler(f *testing.F) {
	f.Add(readFixture(f, "admissionreview-mock-request-reference.json"))
	f.Add(readFixture(f, "admissionreview-mock-request-reference-status.json"))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"UPDATE","object":{"spec":1},"oldObject":{"spec":[]}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"DELETE","oldObject":null}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"UPDATE","object":7,"oldObject":"x"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		h := NewHandler(&recorder{}, logr.Discard(), nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/validate/m", bytes.NewReader(body)))
		switch w.Code {
		case 200:
			var resp admissionv1.AdmissionReview
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp.Response == nil || !resp.Response.Allowed {
				t.Fatalf("200 without allowed answer: %q", w.Body.String())
			}
		case 400:
		default:
			t.Fatalf("code %d", w.Code)
		}
	})
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func seriesCount(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 1024)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

// panicking is an Enqueuer whose Enqueue panics (a bug on the way to the
// queue).
type panicking struct{}

func (panicking) Enqueue(string, contract.WatchEvent) { panic("queue bug") }

// TestHandlerRecoversPanic (issue 43): a review whose handling panics is
// answered allowed with its uid — not a dropped connection the API server
// admits silently — counted with result "panic", and its manager gets an
// overflow resync, so the change it announced is not lost (§4.8).
func TestHandlerRecoversPanic(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	ov := &overflows{}
	h := NewHandler(panicking{}, logr.Discard(), m).LimitInFlight(0, ov)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/validate/m", bytes.NewReader(readFixture(t, "admissionreview-mock-request-reference.json"))))
	if w.Code != http.StatusOK {
		t.Fatalf("code = %d, want 200", w.Code)
	}
	var resp admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Response == nil || !resp.Response.Allowed || resp.Response.UID != "b8c0335f-ce87-4da3-82bf-a6a6a55d088e" {
		t.Errorf("answer %+v, want allowed with the review's uid", resp.Response)
	}
	if !slices.Equal(ov.got, []string{"m"}) {
		t.Errorf("overflow resyncs %q, want [m]", ov.got)
	}
	if v := counterValue(t, m.requests.WithLabelValues("m", "", "panic")); v != 1 {
		t.Errorf("requests{m,,panic} = %v, want 1", v)
	}
}
