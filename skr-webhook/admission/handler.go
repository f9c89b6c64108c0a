package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Enqueuer takes an emitted event for asynchronous delivery. It must return
// at once: the admission answer waits for it.
type Enqueuer interface {
	Enqueue(manager string, ev contract.WatchEvent)
}

// Handler serves POST /validate/<manager>. Mount it at
// contract.ValidatePathPrefix.
type Handler struct {
	queue   Enqueuer
	log     logr.Logger
	metrics *Metrics
}

// NewHandler returns the admission handler. metrics may be nil.
func NewHandler(queue Enqueuer, log logr.Logger, metrics *Metrics) *Handler {
	return &Handler{queue: queue, log: log, metrics: metrics}
}

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
)

// ServeHTTP answers an AdmissionReview with allowed: true and its request's
// UID, after handing any emitted event to the queue. Wrong paths get 404,
// other methods 405, bodies over contract.MaxAdmissionBodyBytes 413 and
// anything that is not an admission.k8s.io/v1 AdmissionReview with a request
// 400 with a message.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	manager, ok := contract.ManagerFromValidatePath(r.URL.Path)
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
		h.reject(w, manager, "", resultTooLarge, http.StatusRequestEntityTooLarge, tooLargeMessage, start)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, contract.MaxAdmissionBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.reject(w, manager, "", resultTooLarge, http.StatusRequestEntityTooLarge, tooLargeMessage, start)
			return
		}
		h.reject(w, manager, "", resultBadRequest, http.StatusBadRequest, "reading body: "+err.Error(), start)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		h.reject(w, manager, "", resultBadRequest, http.StatusBadRequest, "body is not an AdmissionReview: "+err.Error(), start)
		return
	}
	if review.APIVersion != reviewAPIVersion || review.Kind != reviewKind {
		h.reject(w, manager, "", resultBadRequest, http.StatusBadRequest,
			fmt.Sprintf("expected %s %s, got %q %q", reviewAPIVersion, reviewKind, review.APIVersion, review.Kind), start)
		return
	}
	ev, outcome, err := Decide(review.Request)
	if err != nil {
		op := ""
		if review.Request != nil {
			op = string(review.Request.Operation)
		}
		h.reject(w, manager, op, resultBadRequest, http.StatusBadRequest, err.Error(), start)
		return
	}
	req := review.Request
	if ev != nil {
		h.queue.Enqueue(manager, *ev)
	}
	out, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: review.TypeMeta,
		Response: &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true},
	})
	if err != nil { // cannot happen for this type; answer rather than panic
		h.reject(w, manager, string(req.Operation), resultBadRequest, http.StatusInternalServerError, err.Error(), start)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
	h.metrics.observe(manager, string(req.Operation), string(outcome), start)
	if h.log.V(1).Enabled() {
		h.log.V(1).Info("admission", "manager", manager, "operation", req.Operation, "kind", req.Kind.Kind,
			"namespace", req.Namespace, "name", req.Name, "subResource", req.SubResource, "outcome", outcome)
	}
}

const tooLargeMessage = "admission review larger than 7 MiB"

func (h *Handler) reject(w http.ResponseWriter, manager, op, result string, code int, msg string, start time.Time) {
	http.Error(w, msg, code)
	h.metrics.observe(manager, op, result, start)
	h.log.V(1).Info("admission request rejected", "manager", manager, "code", code, "reason", msg)
}
