package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Enqueuer takes an emitted event for asynchronous delivery. It must return
// at once: the admission answer waits for it.
type Enqueuer interface {
	Enqueue(manager string, ev contract.WatchEvent)
}

// OverflowRequester is told when a review of a manager was answered without
// being read (more than the in-flight bound): the change it announced may be
// lost, so the manager needs an "overflow" resync (docs/architecture.md §4.8,
// §3.10). It must return at once. (*delivery.Dispatcher).Overflow fits.
type OverflowRequester interface {
	Overflow(manager string)
}

// Handler serves POST /validate/<manager>. Mount it at
// contract.ValidatePathPrefix.
type Handler struct {
	queue   Enqueuer
	log     logr.Logger
	metrics *Metrics

	inFlight chan struct{} // nil: unbounded
	overflow OverflowRequester
}

// NewHandler returns the admission handler. metrics may be nil.
func NewHandler(queue Enqueuer, log logr.Logger, metrics *Metrics) *Handler {
	return &Handler{queue: queue, log: log, metrics: metrics}
}

// LimitInFlight bounds the reviews read and decoded at the same time to max
// (memory: each holds its body, at most contract.MaxAdmissionBodyBytes).
// A review beyond the bound is answered allowed at once from at most
// OverflowPeekBytes of its body (enough for request.uid, which the API
// server writes first), counted with result "overflow", and overflow is
// asked for a resync of its manager. max <= 0 leaves it unbounded. Call it
// before serving.
func (h *Handler) LimitInFlight(max int, overflow OverflowRequester) *Handler {
	if max > 0 {
		h.inFlight = make(chan struct{}, max)
	}
	h.overflow = overflow
	return h
}

// OverflowPeekBytes is how much of a review's body is read, at most, to find
// its request.uid when it is answered without being decoded.
const OverflowPeekBytes = 16 << 10

// AdmissionReview type meta of requests and answers.
const (
	reviewAPIVersion = "admission.k8s.io/v1"
	reviewKind       = "AdmissionReview"
)

// Result labels for requests rejected before the rules run.
const (
	resultNotFound         = "not_found"
	resultMethodNotAllowed = "method_not_allowed"
	resultTooLarge         = "too_large"
	resultBadRequest       = "bad_request"
	resultOverflow         = "overflow"
	resultPanic            = "panic"
)

// ServeHTTP answers an AdmissionReview with allowed: true and its request's
// UID, after handing any emitted event to the queue. Wrong paths get 404,
// other methods 405, bodies over contract.MaxAdmissionBodyBytes 413 and
// anything that is not an admission.k8s.io/v1 AdmissionReview with a request
// 400 with a message.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var (
		manager string
		uid     types.UID
		ok      bool
	)
	// A panic would make net/http drop the connection and count nothing;
	// the API server then admits the change (failurePolicy Ignore) and it
	// is lost. It is answered allowed instead, counted, logged, and its
	// manager gets an overflow resync (docs/architecture.md §4.8).
	defer func() {
		if p := recover(); p != nil {
			h.recovered(w, manager, uid, p, start)
		}
	}()
	manager, ok = contract.ManagerFromValidatePath(r.URL.Path)
	if !ok {
		h.reject(w, "", "", resultNotFound, http.StatusNotFound, "no such webhook path", start)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.reject(w, manager, "", resultMethodNotAllowed, http.StatusMethodNotAllowed, "only POST is allowed", start)
		return
	}
	if r.ContentLength > contract.MaxAdmissionBodyBytes {
		h.rejectTooLarge(w, manager, start)
		return
	}
	if h.inFlight != nil {
		select {
		case h.inFlight <- struct{}{}:
			defer func() { <-h.inFlight }()
		default:
			h.answerOverflow(w, r, manager, start)
			return
		}
	}
	body, err := readBody(w, r)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.rejectTooLarge(w, manager, start)
			return
		}
		h.reject(w, manager, "", resultBadRequest, http.StatusBadRequest, "reading body: "+err.Error(), start)
		return
	}
	// The view keeps object and oldObject as slices of body: one copy of
	// the review in memory, plus what the comparison indexes.
	var review reviewView
	if err := json.Unmarshal(body, &review); err != nil {
		h.reject(w, manager, "", resultBadRequest, http.StatusBadRequest, "body is not an AdmissionReview: "+err.Error(), start)
		return
	}
	if review.APIVersion != reviewAPIVersion || review.Kind != reviewKind {
		h.reject(w, manager, "", resultBadRequest, http.StatusBadRequest,
			fmt.Sprintf("expected %s %s, got %q %q", reviewAPIVersion, reviewKind, review.APIVersion, review.Kind), start)
		return
	}
	ev, outcome, err := decide(review.Request)
	if err != nil {
		op := ""
		if review.Request != nil {
			op = string(review.Request.Operation)
		}
		h.reject(w, manager, op, resultBadRequest, http.StatusBadRequest, err.Error(), start)
		return
	}
	req := review.Request
	uid = req.UID
	if ev != nil {
		h.queue.Enqueue(manager, *ev)
	}
	if !h.allow(w, req.UID) {
		h.reject(w, manager, string(req.Operation), resultBadRequest, http.StatusInternalServerError, "cannot encode the answer", start)
		return
	}
	h.metrics.observe(manager, string(req.Operation), string(outcome), start)
	if h.log.V(1).Enabled() {
		h.log.V(1).Info("admission", "manager", manager, "operation", req.Operation, "kind", req.Kind.Kind,
			"namespace", req.Namespace, "name", req.Name, "subResource", req.SubResource, "outcome", outcome)
	}
}

// allow writes the allowed answer for uid.
func (h *Handler) allow(w http.ResponseWriter, uid types.UID) bool {
	out, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: reviewAPIVersion, Kind: reviewKind},
		Response: &admissionv1.AdmissionResponse{UID: uid, Allowed: true},
	})
	if err != nil { // cannot happen for this type; answer rather than panic
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
	return true
}

// answerOverflow answers a review past the in-flight bound: allowed, with the
// uid found in the first OverflowPeekBytes of the body (empty when it is not
// there; the API server then counts a failed call, which the webhook's
// failurePolicy Ignore admits), and asks for the manager's overflow resync.
func (h *Handler) answerOverflow(w http.ResponseWriter, r *http.Request, manager string, start time.Time) {
	uid := peekUID(io.LimitReader(r.Body, OverflowPeekBytes))
	if h.overflow != nil {
		h.overflow.Overflow(manager)
	}
	h.allow(w, uid)
	h.metrics.observe(manager, "", resultOverflow, start)
	h.log.V(1).Info("admission review answered unread: too many in flight", "manager", manager, "uid", uid)
}

// recovered answers a review whose handling panicked with p: allowed (with
// its uid when it was read), counted with result "panic", logged with the
// stack, and its manager's change covered by an overflow resync.
func (h *Handler) recovered(w http.ResponseWriter, manager string, uid types.UID, p any, start time.Time) {
	if h.overflow != nil && manager != "" {
		h.overflow.Overflow(manager)
	}
	h.allow(w, uid)
	h.metrics.observe(manager, "", resultPanic, start)
	h.log.Error(fmt.Errorf("panic: %v", p), "admission review answered allowed after a panic; the manager gets an overflow resync",
		"manager", manager, "uid", uid, "stack", string(debug.Stack()))
}

// rejectTooLarge answers a review over contract.MaxAdmissionBodyBytes 413.
// The change it describes is not read, so it could be lost silently (the
// webhook's failurePolicy is Ignore): the manager gets an overflow resync
// instead (docs/architecture.md §4.8).
func (h *Handler) rejectTooLarge(w http.ResponseWriter, manager string, start time.Time) {
	if h.overflow != nil {
		h.overflow.Overflow(manager)
	}
	h.reject(w, manager, "", resultTooLarge, http.StatusRequestEntityTooLarge, tooLargeMessage, start)
}

// peekUID reads JSON tokens until request.uid and returns it, decoding no
// value other than the keys and scalars on the way; it gives up ("") at the
// end of r or on a syntax error.
func peekUID(r io.Reader) types.UID {
	type level struct {
		object    bool
		expectKey bool
		key       string // the key this level's value is under in its parent
	}
	d := json.NewDecoder(r)
	var stack []level
	lastKey := ""
	// value marks a value seen in the current level: an object then expects a key.
	value := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].expectKey = true
		}
	}
	for {
		tok, err := d.Token()
		if err != nil {
			return ""
		}
		n := len(stack)
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				stack = append(stack, level{object: t == '{', expectKey: true, key: lastKey})
			default:
				stack = stack[:n-1]
				value()
			}
		case string:
			if n > 0 && stack[n-1].object && stack[n-1].expectKey {
				lastKey = t
				stack[n-1].expectKey = false
				if n == 2 && stack[0].object && t == "uid" && stack[1].key == "request" {
					next, err := d.Token()
					if s, ok := next.(string); ok && err == nil {
						return types.UID(s)
					}
					return ""
				}
				continue
			}
			value()
		default:
			value()
		}
	}
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, contract.MaxAdmissionBodyBytes)
	if r.ContentLength > 0 {
		// Exactly sized: io.ReadAll's doubling would hold up to twice the body.
		buf := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(body, buf); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("body shorter than its Content-Length %d", r.ContentLength)
			}
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(body)
}

const tooLargeMessage = "admission review larger than 7 MiB"

func (h *Handler) reject(w http.ResponseWriter, manager, op, result string, code int, msg string, start time.Time) {
	http.Error(w, msg, code)
	h.metrics.observe(manager, op, result, start)
	h.log.V(1).Info("admission request rejected", "manager", manager, "code", code, "reason", msg)
}
