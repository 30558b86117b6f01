// Package enclave is cloister-enclave's command line: `supervise` (the enclave
// pod's container), `orchestrator` (inside the enclave, or its simulated
// process), and the two commands run in the pod: `probe` (its startup and
// readiness probes) and `evidence` (attestation evidence binding a nonce).
//
// Its folder is the Nitro Enclaves workload subsystem: manifest (what the
// enclave runs), supervisor (outside the enclave) and orchestrator
// (inside it).
package enclave

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mdlayher/vsock"

	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/enclave/channel"
	"github.com/cloister-cc/cloister/internal/enclave/logstream"
	enclavemanifest "github.com/cloister-cc/cloister/internal/enclave/manifest"
	"github.com/cloister-cc/cloister/internal/enclave/orchestrator"
	"github.com/cloister-cc/cloister/internal/enclave/supervisor"
)

// Defaults the enclave pod's chart relies on.
const (
	DefaultRunDir   = "/run/cloister-enclave"
	DefaultManifest = "/etc/cloister-enclave/manifest.json"
	DefaultEIFPath  = "/enclave/enclave.eif"
	// DefaultPluginSocket is where plugins inside an enclave ask the
	// orchestrator for evidence binding their report data.
	DefaultPluginSocket = "/run/cloister-enclave/plugins.sock"
	socketName          = "supervisor.sock"
)

// Backends of `supervise --backend`.
const (
	BackendNitro = "nitro"
	BackendSim   = "sim"
)

const usage = "usage: cloister-enclave supervise|orchestrator|probe|evidence [flags] (cloister-enclave COMMAND --help lists them)"

// Run runs the command args names.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		_, _ = fmt.Fprintln(stderr, usage)
		return flag.ErrHelp
	case "supervise":
		return supervise(ctx, args[1:], stdout, stderr)
	case "orchestrator":
		return orchestrate(ctx, args[1:], stderr)
	case "probe":
		return probe(ctx, args[1:], stdout, stderr)
	case "evidence":
		return evidence(ctx, args[1:], stdout, stderr)
	}
	return fmt.Errorf("unknown command %q; %s", args[0], usage)
}

func supervise(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cloister-enclave supervise", flag.ContinueOnError)
	fs.SetOutput(stderr)
	backend := fs.String("backend", BackendNitro, "nitro (a Nitro Enclave through nitro-cli) or sim (the enclave as a child process: insecure, for development)")
	manifest := fs.String("manifest", DefaultManifest, "the mounted enclave manifest")
	runDir := fs.String("run-dir", DefaultRunDir, "where the supervisor's socket (and a simulated enclave's) go")
	eif := fs.String("eif-path", DefaultEIFPath, "nitro: the enclave image file")
	cli := fs.String("nitro-cli", "nitro-cli", "nitro: nitro-cli's path")
	port := fs.Uint("vsock-port", supervisor.DefaultOrchestratorPort, "nitro: the orchestrator's vsock port")
	interval := fs.Duration("interval", 2*time.Second, "how often the enclave's health and the manifest are checked")
	listenHost := fs.String("listen-host", "", "where the plugins' ports are relayed from (empty: every address of the pod; in simulation the pod's address, the plugins having loopback)")
	log, err := startup.ParseFlags(fs, args, stderr)
	if err != nil {
		return err
	}
	log = log.With("component", "supervisor")
	s := &supervisor.Supervisor{Manifest: *manifest, Log: log, Interval: *interval, EnclaveLog: stdout, ListenHost: *listenHost,
		Signature: filepath.Join(filepath.Dir(*manifest), enclavemanifest.SignatureFile)}
	if *port == 0 || *port > math.MaxUint32 {
		return fmt.Errorf("--vsock-port %d: a vsock port is 1-%d", *port, uint32(math.MaxUint32))
	}
	switch *backend {
	case BackendNitro:
		s.Backend = &supervisor.Nitro{CLI: *cli, EIFPath: *eif, Port: uint32(*port), Console: stderr}
	case BackendSim:
		self, err := os.Executable()
		if err != nil {
			return err
		}
		log.Warn("simulated enclave: the orchestrator runs as a process of this pod, unisolated; its evidence is marked insecure")
		program := []string{self, "orchestrator", "--simulation"}
		// A simulated enclave has no image to carry the owner's key: the
		// pod hands it over (the host could change it; nothing here is
		// secure).
		if key := filepath.Join(filepath.Dir(*manifest), enclavemanifest.KeyFile); fileExists(key) {
			program = append(program, "--manifest-key", key)
		}
		s.Backend = &supervisor.Sim{Program: program, Dir: *runDir, Stdout: stderr, Stderr: stderr}
	default:
		return fmt.Errorf("--backend %q: use nitro or sim", *backend)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, filepath.Join(*runDir, socketName)) }()
	err = s.Run(ctx)
	cancel()
	if serr := <-served; err == nil {
		err = serr
	}
	return err
}

func orchestrate(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("cloister-enclave orchestrator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "vsock:"+strconv.Itoa(supervisor.DefaultOrchestratorPort), "a unix socket path, or vsock:PORT inside a Nitro Enclave")
	simulation := fs.Bool("simulation", false, "simulated attestation (insecure): no Nitro Secure Module here")
	manifestKey := fs.String("manifest-key", "", "the owner's public key (PEM) every manifest must be signed by; a Nitro Enclave's image carries it (the resource's spec.manifestKey, which cloister enclave build puts there)")
	uidBase := fs.Uint("plugin-uid-base", 0, "run the plugin at index i as user PluginUIDBase+i (default: 10000 in a Nitro Enclave; a simulated one runs them as itself)")
	pluginSocket := fs.String("plugin-socket", "", "the plugins' evidence socket (default: "+DefaultPluginSocket+"; a simulated enclave's beside --listen)")
	// The log goes to the console (read in debug mode only) and into the
	// buffer the pod's supervisor follows.
	logs := &logstream.Buffer{}
	log, err := startup.ParseFlags(fs, args, io.MultiWriter(stderr, logs))
	if err != nil {
		return err
	}
	log = log.With("component", "enclave-orchestrator")
	o := &orchestrator.Orchestrator{Log: log, NewAttester: orchestrator.NewNSMAttester, Logs: logs}
	if !strings.HasPrefix(*listen, "vsock:") {
		// A simulated enclave: its channel is the folder of its socket.
		o.Channel = channel.Unix{Dir: filepath.Dir(*listen)}
	}
	if *simulation {
		o.NewAttester = orchestrator.NewSimAttester
	} else {
		// The plugins are never root, and only root opens the module:
		// no plugin extends a PCR or asks for a document but through
		// the orchestrator.
		o.PluginUIDBase = 10000
	}
	if *uidBase != 0 {
		if *uidBase > math.MaxUint32-64 {
			return fmt.Errorf("--plugin-uid-base %d: too high", *uidBase)
		}
		o.PluginUIDBase = uint32(*uidBase)
	}
	ln, err := listener(*listen)
	if err != nil {
		return err
	}
	if o.ManifestKey, err = manifestKeyOf(*manifestKey, *simulation, log); err != nil {
		_ = ln.Close()
		return err
	}
	if o.Channel == nil {
		// Its egress ports on the parent are numbered by its context ID.
		cid, err := vsock.ContextID()
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("the enclave's vsock context ID: %w", err)
		}
		o.Channel = channel.Vsock{CID: cid}
	}
	if !*simulation {
		if err := os.Chmod(produce.DefaultNSM, 0o600); err != nil {
			_ = ln.Close()
			return fmt.Errorf("keeping the Nitro Secure Module to the orchestrator: %w", err)
		}
	}
	srv := &http.Server{Handler: o.Handler(), ReadHeaderTimeout: 5 * time.Second}
	plugins, err := pluginListener(*pluginSocket, *listen)
	if err != nil {
		return err
	}
	psrv := &http.Server{Handler: o.PluginHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = psrv.Serve(plugins) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
		_ = psrv.Close()
	}()
	log.Info("orchestrator serving", "listen", *listen, "simulation", *simulation)
	err = srv.Serve(ln)
	o.Stop()
	if errors.Is(err, http.ErrServerClosed) {
		log.Info("orchestrator stopped; its plugins with it")
		return nil
	}
	return err
}

// manifestKeyOf reads the owner's key; only a simulated enclave goes
// without one.
func manifestKeyOf(path string, simulation bool, log *slog.Logger) (*ecdsa.PublicKey, error) {
	if path == "" {
		if !simulation {
			return nil, errors.New("an enclave takes manifests signed by its owner only: its image must carry the owner's key (the resource's spec.manifestKey, which cloister enclave build puts there)")
		}
		log.Warn("simulated enclave without a manifest key: it takes any manifest the pod sends")
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := keyfile.ParsePublic(data)
	if err != nil {
		return nil, fmt.Errorf("--manifest-key %s: %w", path, err)
	}
	return key, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// pluginListener listens where the plugins (which run as other users)
// ask for evidence.
func pluginListener(path, listen string) (net.Listener, error) {
	if path == "" {
		path = DefaultPluginSocket
		if !strings.HasPrefix(listen, "vsock:") {
			path = filepath.Join(filepath.Dir(listen), "plugins.sock")
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // the plugins, other users, reach the socket in it
		return nil, err
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o666); err != nil { //nolint:gosec // every plugin asks here
		_ = ln.Close()
		return nil, err
	}
	return ln, nil
}

func listener(addr string) (net.Listener, error) {
	if p, ok := strings.CutPrefix(addr, "vsock:"); ok {
		port, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--listen %q: vsock:PORT takes a port number", addr)
		}
		return vsock.Listen(uint32(port), nil)
	}
	return net.Listen("unix", addr)
}

// probe asks the supervisor whether the enclave started or is ready,
// printing its finding: the kubelet puts it in the probe's event.
func probe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cloister-enclave probe started|ready", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runDir := fs.String("run-dir", DefaultRunDir, "where the supervisor's socket is")
	if len(args) == 0 || (args[0] != "started" && args[0] != "ready") {
		return errors.New("usage: cloister-enclave probe started|ready [--run-dir DIR]")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	path := supervisor.PathReady
	if args[0] == "started" {
		path = supervisor.PathStarted
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	code, body, _, err := supervisor.Get(ctx, filepath.Join(*runDir, socketName), path)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprint(stdout, string(body))
	if code != http.StatusOK {
		return exitCode(1)
	}
	return nil
}

// evidence writes the enclave's evidence binding --nonce to stdout, its
// type to stderr.
func evidence(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cloister-enclave evidence", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runDir := fs.String("run-dir", DefaultRunDir, "where the supervisor's socket is")
	nonce := fs.String("nonce", "", "the nonce to bind, 1 to 64 bytes in hex (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, err := orchestrator.ParseNonce(*nonce); err != nil {
		return fmt.Errorf("--nonce: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	code, body, h, err := supervisor.Get(ctx, filepath.Join(*runDir, socketName), supervisor.PathEvidence+"?nonce="+*nonce)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("no evidence: %s", strings.TrimSpace(string(body)))
	}
	_, _ = fmt.Fprintf(stderr, "evidence type: %s (verify with: cloister evidence verify --type %s)\n",
		h.Get(orchestrator.HeaderEvidenceType), h.Get(orchestrator.HeaderEvidenceType))
	_, err = stdout.Write(body)
	return err
}

type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitCode) ExitCode() int { return int(e) }

var _ startup.ExitCoder = exitCode(0)
