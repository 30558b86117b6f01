package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/cloister-cc/cloister/internal/cas/tlog"
	"github.com/cloister-cc/cloister/internal/cas/witness"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

// cloister witness serve cosigns a checkpoint of the log it is given,
// with the key cloister witness key printed, and refuses another log's.
func TestWitnessServe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "witness")
	vkey, _, err := run(t, "witness", "key", "--dir", dir, "--name", "witness.example")
	if err != nil {
		t.Fatal(err)
	}
	_, logKey, _ := ed25519.GenerateKey(rand.Reader)
	logVKey, _ := tlog.VerifierKey("cas.example", logKey.Public().(ed25519.PublicKey))
	ctx, cancel := context.WithCancel(context.Background())
	var errOut testenv.Buffer
	root := NewRoot(Streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &errOut})
	root.SetArgs([]string{"witness", "serve", "--dir", dir, "--name", "witness.example", "--listen", "127.0.0.1:0", "--log", logVKey})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("witness serve: %v", err)
		}
	}()
	var addr string
	for deadline := time.Now().Add(time.Minute); addr == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the witness did not say where it listens: %s", errOut.String())
		}
		for _, line := range strings.Split(errOut.String(), "\n") {
			var l struct{ Address, Key string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Address != "" {
				addr = l.Address
				if l.Key != strings.TrimSpace(vkey) {
					t.Errorf("serving with key %q, cloister witness key printed %q", l.Key, vkey)
				}
			}
		}
	}
	v, err := witness.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		t.Fatal(err)
	}
	ep := witness.Endpoint{URL: "http://" + addr, Verifier: v}
	text := "cas.example/log\n1\n" + strings.Repeat("A", 43) + "=\n"
	cp, _ := note.Sign(&note.Note{Text: text}, tlog.NewSigner("cas.example", logKey))
	if _, err := witness.Ask(ctx, http.DefaultClient, ep, witness.Request{Checkpoint: cp}); err != nil {
		t.Fatalf("the log's checkpoint: %v", err)
	}
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	forged, _ := note.Sign(&note.Note{Text: text}, tlog.NewSigner("cas.example", other))
	if _, err := witness.Ask(ctx, http.DefaultClient, ep, witness.Request{Checkpoint: forged}); err == nil {
		t.Error("a checkpoint another key signed was cosigned")
	}
	if _, err := os.Stat(filepath.Join(dir, witness.KeyFile)); err != nil {
		t.Error(err)
	}
}
