package las

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/las/aesm"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
)

// Config is cloister-las's command line.
type Config struct {
	Port          int
	DevRoot       string
	ProbeInterval time.Duration
	Simulation    bool
	KeyFile       string
	// PodIdentity: in simulation, name the calling pod's policy, read
	// from the API server (in-cluster) for pods of Node.
	PodIdentity bool
	Node        string
	// AESMSocket is the node's AESM, which quotes enclaves without
	// simulation; empty: none.
	AESMSocket string
}

// Run serves until ctx ends, probing the SGX device (and AESM, when it
// quotes through it) every ProbeInterval and logging each change of the
// verdict.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.Port < 1 || cfg.Port > 65535 {
		return fmt.Errorf("--port %d: use 1..65535 (the default hostPort is %d)", cfg.Port, laswire.DefaultPort)
	}
	if cfg.ProbeInterval < time.Second {
		return fmt.Errorf("--probe-interval %v is too short: use 1s or more", cfg.ProbeInterval)
	}
	s := &Server{Probe: &Probe{DevRoot: cfg.DevRoot}, Log: log}
	if cfg.PodIdentity {
		if !cfg.Simulation || cfg.Node == "" {
			return errors.New("--pod-identity needs --simulation (on hardware the evidence names the pod's policy itself) and NODE_NAME")
		}
		rc, err := rest.InClusterConfig()
		if err != nil {
			return fmt.Errorf("--pod-identity: %w", err)
		}
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("--pod-identity: %w", err)
		}
		pods := &Pods{Client: cs, Node: cfg.Node}
		if err := pods.Start(ctx); err != nil {
			return fmt.Errorf("--pod-identity: %w", err)
		}
		s.Pods = pods
	}
	if cfg.Simulation {
		k, err := keyfile.LoadOrCreate(cfg.KeyFile)
		if err != nil {
			return fmt.Errorf("--key-file: %w", err)
		}
		s.Quoter = &sim.Quoter{Key: k}
		log.Warn("simulation mode: evidence is signed by this node's key and marked insecure; CAS accepts it only where the policy allows simulation")
	} else if cfg.AESMSocket != "" {
		s.DCAP = &DCAP{Client: &aesm.Client{Socket: cfg.AESMSocket, Timeout: 10 * time.Second}}
	} else {
		log.Warn("not ready: " + laswire.NoEvidence)
	}
	lis, err := net.Listen("tcp", fmt.Sprintf(":%d", cfg.Port))
	if err != nil {
		return fmt.Errorf("--port: %w", err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	defer func() { _ = srv.Close() }()
	log.Info("serving local attestation", "address", lis.Addr().String(), "simulation", cfg.Simulation)

	var last laswire.Status
	probe := func() {
		_ = s.Probe.Check()
		if s.DCAP != nil {
			_ = s.DCAP.Check(ctx)
		}
		st := s.Status()
		if st == last {
			return
		}
		if st.Ready {
			log.Info("ready", "evidence", st.Evidence)
		} else {
			log.Warn("not ready", "evidence", st.Evidence, "check", st.Check, "reason", st.Reason)
		}
		last = st
	}
	probe()
	t := time.NewTicker(cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			probe()
		}
	}
}
