package conn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	casclient "github.com/cloister-cc/cloister/internal/cas/client"
)

// Answers says whether a TLS server is behind dial: the kubelet accepts a
// forwarded connection before it knows whether the pod listens, and a
// replica that has not bound its port yet closes it at once. A completed
// handshake, or any alert the server sends, is an answer; nothing is
// trusted by it (the attestation that follows decides that).
func Answers(ctx context.Context, dial casclient.DialFunc) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", "cas")
	if err != nil {
		return err
	}
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // liveness only: no byte of this connection is trusted
	defer func() { _ = tc.Close() }()
	err = tc.HandshakeContext(ctx)
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("nothing answers on CAS's port: %w", err)
	}
	return nil // the server spoke TLS, refusing this client
}
