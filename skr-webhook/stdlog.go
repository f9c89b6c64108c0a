package main

import (
	"log"
	"strings"

	"github.com/go-logr/logr"
)

// newStdLogger routes net/http's server errors (TLS handshake failures,
// broken connections) to logr at debug level: a client's bad handshake is
// not the webhook's failure.
func newStdLogger(l logr.Logger) *log.Logger {
	return log.New(logrWriter{l}, "", 0)
}

type logrWriter struct{ l logr.Logger }

func (w logrWriter) Write(p []byte) (int, error) {
	w.l.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
