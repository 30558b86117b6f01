// Package supervisor is the enclave pod's job: it boots the enclave
// through a Backend (a Nitro Enclave with nitro-cli, or a simulated one
// as a child process), syncs the mounted manifest into the orchestrator
// inside and again whenever it changes, checks the enclave's health
// (logging what it finds), and serves that health on a unix socket for the
// pod's startup and readiness probes: an unhealthy enclave's pod is taken
// out of the ready ones, so no traffic reaches it.
package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cloister-cc/cloister/internal/enclave/manifest"
	"github.com/cloister-cc/cloister/internal/enclave/orchestrator"
)

// Supervisor runs one enclave for its pod.
type Supervisor struct {
	Backend Backend
	// Manifest is the mounted manifest's path.
	Manifest string
	// Signature is its owner's signature's path (sent with it, if there).
	Signature string
	Log       *slog.Logger
	// Interval paces health checks and manifest reads.
	Interval time.Duration
	// BootTimeout bounds how long the orchestrator may take to answer.
	BootTimeout time.Duration
	// RemindEvery repeats an unhealthy finding in the log while it lasts.
	RemindEvery time.Duration
	// ListenHost is the pod's address the plugins' ports are relayed from
	// (empty: every address).
	ListenHost string
	// EnclaveLog gets the enclave's log (the orchestrator's records, the
	// plugins' lines among them), followed over the orchestrator's API:
	// the pod's log, without debug mode. Nil: not followed.
	EnclaveLog io.Writer

	logMu   sync.Mutex // one enclave record written at a time
	mu      sync.Mutex
	health  Health
	enc     Enclave
	client  *http.Client
	applied []byte
}

// Health is what the last check found.
type Health struct {
	// Started: the enclave booted, runs the synced manifest and started
	// every plugin once.
	Started bool
	Ready   bool
	Message string
	Checked time.Time
	Status  *manifest.Status
}

func (s *Supervisor) interval() time.Duration {
	if s.Interval <= 0 {
		return 2 * time.Second
	}
	return s.Interval
}

// Run boots the enclave and keeps it until ctx ends (then stops it) or it
// stops by itself (an error: the container restarts, and with it the
// enclave).
func (s *Supervisor) Run(ctx context.Context) error {
	data, m, err := s.readManifest()
	if err != nil {
		return err
	}
	s.Log.Info("booting the enclave", "cpus", m.Enclave.CPUs, "memoryMiB", m.Enclave.MemoryMiB, "debug", m.Enclave.Debug,
		"plugins", len(m.Plugins), "bootDigest", m.BootDigest())
	enc, err := s.Backend.Boot(ctx, m)
	if err != nil {
		return fmt.Errorf("booting the enclave: %w", err)
	}
	s.mu.Lock()
	s.enc = enc
	s.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return enc.Dial(ctx) },
	}}
	s.mu.Unlock()
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := enc.Stop(stopCtx); err != nil {
			s.Log.Error("stopping the enclave", "enclave", enc.ID(), "error", err.Error())
		}
	}()
	if err := s.waitOrchestrator(ctx, enc); err != nil {
		return err
	}
	go s.followLogs(ctx, enc)
	s.Log.Info("enclave booted; syncing the manifest", "enclave", enc.ID())
	if err := s.sync(ctx, data, m); err != nil {
		return err
	}
	s.relay(ctx, enc, m)
	return s.loop(ctx, enc, m.BootDigest())
}

func (s *Supervisor) readManifest() ([]byte, *manifest.Manifest, error) {
	data, err := os.ReadFile(s.Manifest)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the manifest: %w", err)
	}
	m, err := manifest.Parse(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", s.Manifest, err)
	}
	return data, m, nil
}

// waitOrchestrator waits for the orchestrator to answer.
func (s *Supervisor) waitOrchestrator(ctx context.Context, enc Enclave) error {
	timeout := s.BootTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	deadline := time.Now().Add(timeout)
	for {
		_, err := s.status(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-enc.Done():
			return fmt.Errorf("the enclave stopped while booting: %w", enc.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the enclave's orchestrator did not answer within %s: %w", timeout, err)
		}
	}
}

// sync puts the manifest into the enclave.
func (s *Supervisor) sync(ctx context.Context, data []byte, m *manifest.Manifest) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://enclave"+orchestrator.PathManifest, bytes.NewReader(data))
	if err != nil {
		return err
	}
	if s.Signature != "" {
		if sig, err := os.ReadFile(s.Signature); err == nil {
			req.Header.Set(orchestrator.HeaderManifestSignature, strings.TrimSpace(string(sig)))
		}
	}
	res, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("syncing the manifest into the enclave: %w", err)
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return fmt.Errorf("syncing the manifest into the enclave: %s: %s", res.Status, bytes.TrimSpace(body))
	}
	s.mu.Lock()
	s.applied = data
	s.mu.Unlock()
	s.Log.Info("manifest synced into the enclave", "manifest", m.ManifestDigest())
	return nil
}

func (s *Supervisor) status(ctx context.Context) (*manifest.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://enclave"+orchestrator.PathStatus, nil)
	if err != nil {
		return nil, err
	}
	res, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("enclave status: %s", res.Status)
	}
	var st manifest.Status
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("enclave status: %w", err)
	}
	return &st, nil
}

// loop checks the enclave's health and re-syncs a changed manifest.
func (s *Supervisor) loop(ctx context.Context, enc Enclave, boot string) error {
	t := time.NewTicker(s.interval())
	defer t.Stop()
	var lastMsg string
	var lastLogged time.Time
	warnedBoot := ""
	for {
		s.check(ctx, &lastMsg, &lastLogged)
		select {
		case <-ctx.Done():
			s.Log.Info("stopping the enclave", "enclave", enc.ID())
			return nil
		case <-enc.Done():
			return fmt.Errorf("the enclave stopped: %w", enc.Err())
		case <-t.C:
		}
		data, m, err := s.readManifest()
		s.mu.Lock()
		same := bytes.Equal(data, s.applied)
		s.mu.Unlock()
		switch {
		case err != nil:
			s.Log.Error("the mounted manifest cannot be read; the enclave keeps the one it has", "error", err.Error())
		case same:
		case m.BootDigest() != boot:
			if warnedBoot != m.BootDigest() {
				warnedBoot = m.BootDigest()
				s.Log.Warn("the manifest changed what the enclave boots with: new pods bring new enclaves; this one keeps the previous manifest",
					"bootDigest", m.BootDigest(), "running", boot)
			}
		default:
			if err := s.sync(ctx, data, m); err != nil {
				s.Log.Error("re-syncing the changed manifest", "error", err.Error())
			}
		}
	}
}

// check asks the orchestrator and records the enclave's health, logging
// a change at once and an unhealthy finding again every RemindEvery.
func (s *Supervisor) check(ctx context.Context, lastMsg *string, lastLogged *time.Time) {
	h := Health{Checked: time.Now()}
	st, err := s.status(ctx)
	if err != nil {
		h.Message = "the enclave's orchestrator does not answer: " + err.Error()
	} else {
		h.Status = st
		h.Ready, h.Message = st.Ready()
	}
	s.mu.Lock()
	h.Started = s.health.Started || (st != nil && st.Booted())
	s.health = h
	s.mu.Unlock()
	remind := s.RemindEvery
	if remind <= 0 {
		remind = 30 * time.Second
	}
	switch {
	case h.Message != *lastMsg && h.Ready:
		s.Log.Info("health check: enclave healthy", "detail", h.Message)
	case h.Message != *lastMsg || (!h.Ready && time.Since(*lastLogged) >= remind):
		s.Log.Warn("health check: enclave unhealthy", "detail", h.Message)
	default:
		return
	}
	*lastMsg, *lastLogged = h.Message, time.Now()
}

// Health is the last check's finding. A finding older than three
// intervals is not trusted: the checks stopped.
func (s *Supervisor) Health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.health
	if !h.Checked.IsZero() && time.Since(h.Checked) > 3*s.interval()+30*time.Second {
		h.Ready, h.Message = false, fmt.Sprintf("no health check since %s", h.Checked.Format(time.RFC3339))
	}
	if h.Checked.IsZero() {
		h.Message = "the enclave is booting"
	}
	return h
}

// Evidence asks the enclave for evidence binding nonce.
func (s *Supervisor) Evidence(ctx context.Context, nonceHex string) (orchestrator.Evidence, error) {
	s.mu.Lock()
	c := s.client
	s.mu.Unlock()
	if c == nil {
		return orchestrator.Evidence{}, errors.New("the enclave is booting")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://enclave"+orchestrator.PathEvidence+"?nonce="+nonceHex, nil)
	if err != nil {
		return orchestrator.Evidence{}, err
	}
	res, err := c.Do(req)
	if err != nil {
		return orchestrator.Evidence{}, err
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return orchestrator.Evidence{}, err
	}
	if res.StatusCode != http.StatusOK {
		return orchestrator.Evidence{}, fmt.Errorf("the enclave refused: %s: %s", res.Status, bytes.TrimSpace(body))
	}
	return orchestrator.Evidence{Type: attestType(res.Header.Get(orchestrator.HeaderEvidenceType)), Raw: body}, nil
}
