package admission

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
)

// referenceEqual is the comparison jsonEqual replaces: decode both into
// `any` with UseNumber and DeepEqual, optionally without
// metadata.resourceVersion and metadata.managedFields.
func referenceEqual(t testing.TB, a, b []byte, ignoreBookkeeping bool) bool {
	t.Helper()
	decode := func(raw []byte) any {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("reference decode %q: %v", raw, err)
		}
		if m, ok := v.(map[string]any); ok && ignoreBookkeeping {
			if md, ok := m["metadata"].(map[string]any); ok {
				delete(md, "resourceVersion")
				delete(md, "managedFields")
			}
		}
		return v
	}
	return reflect.DeepEqual(decode(a), decode(b))
}

var equalCases = []struct{ a, b string }{
	{`{"a":1,"b":[1,2,{"c":"d"}]}`, `{"b":[1,2,{"c":"d"}],"a":1}`},
	{`{"a":1}`, `{"a":1.0}`},
	{`{"a":1e2}`, `{"a":100}`},
	{`{"a":"A"}`, `{"a":"\u0041"}`},
	{`{"\u0061":1}`, `{"a":1}`},
	{`{"a":1,"a":2}`, `{"a":2}`},
	{`{"a":2,"a":1}`, `{"a":2}`},
	{`{"a":null}`, `{}`},
	{`[1,2]`, `[2,1]`},
	{`[1,2]`, `[1,2,3]`},
	{`[]`, ` [ ] `},
	{`{ "a" : [ 1 , { } ] }`, `{"a":[1,{}]}`},
	{`"x"`, `"x"`},
	{`true`, `false`},
	{"{\"a\":\"\xff\"}", "{\"a\":\"\xfe\"}"}, // both invalid UTF-8: U+FFFD on decoding
	{`{"a":"\"}"}`, `{"a":"\"}"}`},
	{`{"a":{"b":"]"}}`, `{"a":{"b":"["}}`},
	{`{"metadata":{"resourceVersion":"1","name":"x"}}`, `{"metadata":{"name":"x","resourceVersion":"2"}}`},
	{`{"metadata":{"managedFields":[1]}}`, `{"metadata":{}}`},
	{`{"metadata":{"labels":{"resourceVersion":"1"}}}`, `{"metadata":{"labels":{"resourceVersion":"2"}}}`},
	{`{"spec":{"resourceVersion":"1"}}`, `{"spec":{"resourceVersion":"2"}}`},
	{`{"metadata":"x"}`, `{"metadata":"x"}`},
}

func TestJSONEqualMatchesDecodeAndDeepEqual(t *testing.T) {
	for _, c := range equalCases {
		for _, ignore := range []bool{false, true} {
			want := referenceEqual(t, []byte(c.a), []byte(c.b), ignore)
			if got := jsonEqual([]byte(c.a), []byte(c.b), ignore); got != want {
				t.Errorf("jsonEqual(%s, %s, %v) = %v, want %v", c.a, c.b, ignore, got, want)
			}
			if got := jsonEqual([]byte(c.b), []byte(c.a), ignore); got != want {
				t.Errorf("jsonEqual(%s, %s, %v) = %v, want %v", c.b, c.a, ignore, got, want)
			}
		}
	}
}

// FuzzJSONEqual: for any two valid JSON texts, jsonEqual agrees with
// decoding into `any` and reflect.DeepEqual.
func FuzzJSONEqual(f *testing.F) {
	for _, c := range equalCases {
		f.Add([]byte(c.a), []byte(c.b), false)
		f.Add([]byte(c.a), []byte(c.b), true)
	}
	f.Fuzz(func(t *testing.T, a, b []byte, ignore bool) {
		if !json.Valid(a) || !json.Valid(b) {
			t.Skip()
		}
		if got, want := jsonEqual(a, b, ignore), referenceEqual(t, a, b, ignore); got != want {
			t.Fatalf("jsonEqual(%q, %q, %v) = %v, reference %v", a, b, ignore, got, want)
		}
	})
}

func TestPeekUID(t *testing.T) {
	for body, want := range map[string]types.UID{
		`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u-1","object":{}}}`: "u-1",
		`{"request":{"kind":{"uid":"no"},"object":{"uid":"no"},"uid":"u-2"}}`:                               "u-2",
		`{"a":[{"request":{"uid":"no"}}],"uid":"no","request":{"uid":"u-3"}}`:                               "u-3",
		`{"request":{"name":"x"}}`:                           "",
		`[{"request":{"uid":"no"}}]`:                         "",
		`{"request":{"uid":7}}`:                              "",
		`{"request":{"uid"`:                                  "",
		`{"request":{"uid":"u-4"` + strings.Repeat(" ", 100): "u-4",
	} {
		if got := peekUID(strings.NewReader(body)); got != want {
			t.Errorf("peekUID(%s) = %q, want %q", body, got, want)
		}
	}
}

// blockingBody blocks the first Read until release is closed.
type blockingBody struct {
	reading chan struct{}
	release chan struct{}
	once    sync.Once
	r       io.Reader
}

func (b *blockingBody) Read(p []byte) (int, error) {
	b.once.Do(func() { close(b.reading); <-b.release })
	return b.r.Read(p)
}

type overflows struct {
	mu  sync.Mutex
	got []string
}

func (o *overflows) Overflow(m string) { o.mu.Lock(); o.got = append(o.got, m); o.mu.Unlock() }

// Past the in-flight bound a review is answered allowed with its uid at
// once, without being decoded, counted, and its manager gets an overflow
// resync request; once the slot is free, reviews are decoded again.
func TestLimitInFlight(t *testing.T) {
	review := readFixture(t, "admissionreview-mock-request-reference.json")
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(review, &in); err != nil {
		t.Fatal(err)
	}
	q := &recorder{}
	over := &overflows{}
	m := NewMetrics(prometheus.NewRegistry())
	h := NewHandler(q, logr.Discard(), m).LimitInFlight(1, over)

	blocked := &blockingBody{reading: make(chan struct{}), release: make(chan struct{}), r: bytes.NewReader(review)}
	first := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(first, httptest.NewRequest(http.MethodPost, "/validate/m1", blocked))
	}()
	<-blocked.reading // the first review holds the only slot

	second := httptest.NewRecorder()
	h.ServeHTTP(second, httptest.NewRequest(http.MethodPost, "/validate/m2", bytes.NewReader(review)))
	assertAllowed(t, second, in.Request.UID)
	if over.got == nil || over.got[0] != "m2" || len(over.got) != 1 {
		t.Fatalf("overflow requests %v, want [m2]", over.got)
	}
	if v := counterValue(t, m.requests.WithLabelValues("m2", "", "overflow")); v != 1 {
		t.Fatalf("overflow count %v, want 1", v)
	}
	if len(q.got) != 0 {
		t.Fatalf("the unread review was enqueued: %v", q.got)
	}

	close(blocked.release)
	<-done
	assertAllowed(t, first, in.Request.UID)
	third := httptest.NewRecorder()
	h.ServeHTTP(third, httptest.NewRequest(http.MethodPost, "/validate/m3", bytes.NewReader(review)))
	assertAllowed(t, third, in.Request.UID)
	if len(q.got) != 2 || q.got[0].manager != "m1" || q.got[1].manager != "m3" {
		t.Fatalf("enqueued %v, want events of m1 and m3", q.got)
	}
}

func assertAllowed(t *testing.T, w *httptest.ResponseRecorder, uid types.UID) {
	t.Helper()
	var out admissionv1.AdmissionReview
	if w.Code != http.StatusOK {
		t.Fatalf("code %d: %s", w.Code, w.Body.String())
	}
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Response == nil || !out.Response.Allowed || out.Response.UID != uid {
		t.Fatalf("answer %s (err %v), want allowed for uid %q", w.Body.String(), err, uid)
	}
}

// BenchmarkHandlerLargeUpdate reports the bytes allocated per review of a
// 6.5 MiB UPDATE whose spec changed with keys in another order (the
// comparison has to walk both sides).
func BenchmarkHandlerLargeUpdate(b *testing.B) {
	spec := func(reverse bool) string {
		var sb strings.Builder
		sb.WriteString("{")
		const n = 20000
		for i := range n {
			k := i
			if reverse {
				k = n - 1 - i
			}
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString(`"key-` + strings.Repeat("x", 8) + string(rune('a'+k%26)) + `-` + strconv.Itoa(k) + `":"` + strings.Repeat("v", 150) + `"`)
		}
		sb.WriteString("}")
		return sb.String()
	}
	body := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"g","version":"v","kind":"K"},"operation":"UPDATE","name":"x","namespace":"n",` +
		`"object":{"metadata":{"name":"x"},"spec":` + spec(false) + `},"oldObject":{"metadata":{"name":"x"},"spec":` + spec(true) + `}}}`)
	h := NewHandler(&recorder{}, logr.Discard(), nil)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/validate/m", bytes.NewReader(body)))
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}
