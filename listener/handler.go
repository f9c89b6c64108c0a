package listener

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

var bufPool = sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, 1024)) }}

// ServeHTTP implements http.Handler; Start serves it. It can also be mounted
// on another server, in which case that server's timeouts apply.
func (l *Listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	status := l.serve(w, r)
	l.metrics.request(status)
}

func (l *Listener) serve(w http.ResponseWriter, r *http.Request) int {
	// Any other path, including another or an invalid manager's, is 404
	// and never becomes an event.
	if r.URL.Path != l.path {
		return plainError(w, http.StatusNotFound, "not found")
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return plainError(w, http.StatusMethodNotAllowed, r.Method+" is not allowed, use POST")
	}

	// A replica that cannot hand events to a running consumer (it is not
	// the leader) sends the sender on at once: it retries and, through the
	// Service, reaches the leader (docs/architecture.md §4.8).
	if !l.ConsumerRunning() {
		w.Header().Set("Retry-After", l.retryAfter)
		l.metrics.noConsumer.Inc()
		return plainError(w, http.StatusServiceUnavailable, "no event consumer on this replica (not the leader), retry")
	}

	runtimeID, rej := l.cfg.auth.authenticate(r)
	if rej == nil {
		rej = l.checkSignature(r, runtimeID)
	}
	if rej != nil {
		l.log.V(1).Info("event refused", "status", rej.status, "reason", rej.reason, "message", rej.message)
		return l.reject(w, rej)
	}

	if r.ContentLength > contract.MaxEventBodyBytes {
		return plainError(w, http.StatusRequestEntityTooLarge, "event body over 16 KiB")
	}
	buf := bufPool.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 4*contract.MaxEventBodyBytes {
			buf.Reset()
			bufPool.Put(buf)
		}
	}()
	buf.Reset()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, contract.MaxEventBodyBytes)); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return plainError(w, http.StatusRequestEntityTooLarge, "event body over 16 KiB")
		}
		return plainError(w, http.StatusBadRequest, "cannot read the event body")
	}
	var we contract.WatchEvent
	if err := decodeWatchEvent(buf.Bytes(), &we); err != nil {
		return plainError(w, http.StatusBadRequest, "malformed event: "+jsonErrorText(err))
	}
	switch {
	case we.Resync != "":
		if !validResyncReason(string(we.Resync)) {
			return plainError(w, http.StatusBadRequest, "malformed event: resync reason is not a DNS-1123 label")
		}
	case we.Heartbeat:
		// A heartbeat is never a controller event: it only proves the
		// watch path works.
		l.seen.touch(runtimeID)
		l.metrics.heartbeats.Inc()
		l.log.V(1).Info("heartbeat", "runtimeID", runtimeID)
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	default:
		if msg := missingFields(&we); msg != "" {
			return plainError(w, http.StatusBadRequest, "malformed event: "+msg)
		}
	}

	if l.cfg.owns != nil && !l.cfg.owns(r.Context(), runtimeID) {
		w.Header().Set("Retry-After", l.retryAfter)
		l.metrics.notOwner.Inc()
		return plainError(w, http.StatusServiceUnavailable, "another replica owns this runtime, retry")
	}
	traceparent, linked, span := l.receiveSpan(r, runtimeID)
	if span != nil {
		defer span.End()
	}
	ev := event.GenericEvent{Object: newEventObject(runtimeID, &we, traceparent, linked)}
	if !l.enqueue(ev) {
		w.Header().Set("Retry-After", l.retryAfter)
		l.log.V(1).Info("event buffer full", "runtimeID", runtimeID)
		return plainError(w, http.StatusServiceUnavailable, "event buffer full, retry later")
	}
	l.metrics.delivered.Inc()
	l.seen.touch(runtimeID)
	if we.Resync != "" {
		l.metrics.resync(string(we.Resync))
		l.log.Info("resync event accepted: the runtime must be re-read", "runtimeID", runtimeID, "reason", we.Resync)
	} else if v := l.log.V(1); v.Enabled() {
		v.Info("event accepted", "runtimeID", runtimeID,
			"watched", we.Watched.Namespace+"/"+we.Watched.Name, "gvk", we.WatchedGvk.Group+"/"+we.WatchedGvk.Version+"/"+we.WatchedGvk.Kind)
	}
	w.WriteHeader(http.StatusOK)
	return http.StatusOK
}

// enqueue puts ev in the buffer, waiting at most the enqueue timeout (and
// not at all once the listener is stopping).
func (l *Listener) enqueue(ev event.GenericEvent) bool {
	select {
	case l.events <- ev:
		return true
	default:
	}
	if l.cfg.enqueueTimeout <= 0 {
		return false
	}
	t := time.NewTimer(l.cfg.enqueueTimeout)
	defer t.Stop()
	select {
	case l.events <- ev:
		return true
	case <-t.C:
		return false
	case <-l.stopped:
		return false
	}
}

func (l *Listener) reject(w http.ResponseWriter, rej *rejection) int {
	if rej.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", l.retryAfter)
	}
	if rej.reason == "" {
		return plainError(w, rej.status, rej.message)
	}
	body, err := json.Marshal(contract.DenyBody{Reason: rej.reason, Message: rej.message})
	if err != nil { // cannot happen for two strings; fail with the status anyway
		body = nil
	}
	h := w.Header()
	h.Set(contract.HeaderDenyReason, string(rej.reason))
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(rej.status)
	_, _ = w.Write(body)
	return rej.status
}

func plainError(w http.ResponseWriter, status int, msg string) int {
	http.Error(w, msg, status)
	return status
}

// missingFields names the first required field the event lacks: the
// watched object's name, the GVK's version and kind. Namespace (cluster
// scoped objects) and group (core group) may be empty.
func missingFields(we *contract.WatchEvent) string {
	switch {
	case we.Watched.Name == "":
		return "watched.name is missing"
	case we.WatchedGvk.Version == "":
		return "watchedGvk.version is missing"
	case we.WatchedGvk.Kind == "":
		return "watchedGvk.kind is missing"
	}
	return ""
}

// validResyncReason: reasons are short lower-case words (contract.Resync*);
// unknown ones from a newer sender are accepted, bounded like a DNS label.
func validResyncReason(r string) bool {
	if len(r) == 0 || len(r) > 63 {
		return false
	}
	for i := 0; i < len(r); i++ {
		c := r[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && (c != '-' || i == 0 || i == len(r)-1) {
			return false
		}
	}
	return true
}

// jsonErrorText describes a decode error without echoing the body.
func jsonErrorText(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return "invalid JSON"
	case errors.As(err, &te):
		return "field " + te.Field + " has the wrong type"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	return "invalid JSON"
}
