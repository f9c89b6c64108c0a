package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/kyma-project/runtime-watcher/listener/pkg/v2/event"
)

// BenchmarkKymaHandler is Kyma's listener's handler alone, as its server
// calls it, with one goroutine taking the events from its channel — the
// counterpart of the listener's BenchmarkHandler, for a CPU profile of
// where Kyma's listener's cost per event goes (docs/performance.md).
func BenchmarkKymaHandler(b *testing.B) {
	l := event.NewSKREventListener("", "bench-manager")
	h := l.RequestSizeLimitingMiddleware(l.HandleSKREvent())
	go func() {
		for range l.ReceivedEvents() {
		}
	}()
	xfcc := `Hash=00;Cert="` + url.QueryEscape(string(selfSignedB(b, "runtime-a"))) + `";Subject="CN=runtime-a";URI=;DNS=skr-a.kyma.example.com`
	const body = `{"watched":{"namespace":"kyma-system","name":"default"},"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}`
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := httptest.NewRequest(http.MethodPost, "/v2/bench-manager/event", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("X-Forwarded-Client-Cert", xfcc)
			w := httptest.NewRecorder()
			h(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
}
