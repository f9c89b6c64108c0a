package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Outcome classifies one delivery attempt.
type Outcome string

// Outcomes of Send.
const (
	// Delivered: the KCP answered 2xx.
	Delivered Outcome = "delivered"
	// Retriable: connection error, timeout, 429 or 5xx.
	Retriable Outcome = "retry"
	// Rejected: any other answer (4xx, 3xx); retrying would not help.
	Rejected Outcome = "rejected"
)

// Result of one delivery attempt.
type Result struct {
	Outcome    Outcome
	Status     int           // HTTP status; 0 when none was received
	RetryAfter time.Duration // from a Retry-After header in seconds, if any
	Err        error         // transport error or a description of the answer
}

// HTTPSender posts WatchEvents to https://<kcp-addr>/v2/<manager>/event.
type HTTPSender struct {
	base   url.URL
	client func() *http.Client
}

// maxAnswerBytes bounds how much of an answer is read (to reuse the
// connection and to quote it in logs).
const maxAnswerBytes = 4 << 10

// ParseKCPAddr checks a host[:port] address (no scheme, path or user).
func ParseKCPAddr(addr string) (url.URL, error) {
	u, err := url.Parse("https://" + addr)
	if err != nil {
		return url.URL{}, fmt.Errorf("kcp address %q: %w", addr, err)
	}
	if addr == "" || u.Host != addr || u.Hostname() == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return url.URL{}, fmt.Errorf("kcp address %q: want host[:port]", addr)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return url.URL{}, fmt.Errorf("kcp address %q: bad port", addr)
		}
	}
	return url.URL{Scheme: "https", Host: addr}, nil
}

// NewHTTPSender sends to kcpAddr (host[:port]) with the client client()
// returns at each attempt, so a rebuilt client (new certificate) is used at
// once.
func NewHTTPSender(kcpAddr string, client func() *http.Client) (*HTTPSender, error) {
	base, err := ParseKCPAddr(kcpAddr)
	if err != nil {
		return nil, err
	}
	return &HTTPSender{base: base, client: client}, nil
}

// Send posts one event; ctx bounds the attempt.
func (s *HTTPSender) Send(ctx context.Context, manager string, ev contract.WatchEvent) Result {
	if !contract.ValidManager(manager) {
		return Result{Outcome: Rejected, Err: fmt.Errorf("invalid manager %q", manager)}
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return Result{Outcome: Rejected, Err: err}
	}
	u := s.base
	u.Path = contract.EventPath(manager)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return Result{Outcome: Rejected, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client().Do(req)
	if err != nil {
		return Result{Outcome: Retriable, Err: err}
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	r := Result{Status: resp.StatusCode}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		r.Outcome = Delivered
		return r
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		r.Outcome = Retriable
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			r.RetryAfter = time.Duration(s) * time.Second
		}
	default:
		r.Outcome = Rejected
	}
	r.Err = fmt.Errorf("kcp answered %d: %q", resp.StatusCode, answer)
	return r
}
