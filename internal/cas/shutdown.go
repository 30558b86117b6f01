package cas

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// sweepEvery is how often shutdown asks HTTP/2 connections to go away.
const sweepEvery = 500 * time.Millisecond

// shutdown stops srv gracefully within limit. One http.Server.Shutdown
// sends HTTP/2 GOAWAY only to the connections registered when it starts:
// a connection whose TLS handshake finishes just after (a client that gave
// up on a request while still dialing) is never told to go, and holds
// Shutdown until its deadline (golang/go#81153). Calling Shutdown again
// each sweepEvery sends GOAWAY to those late connections too.
func shutdown(srv *http.Server, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), min(time.Until(deadline), sweepEvery))
		err := srv.Shutdown(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || !time.Now().Before(deadline) {
			return err
		}
	}
}
