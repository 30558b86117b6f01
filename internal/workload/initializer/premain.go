package initializer

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"

	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/las/lasclient"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

// enclaveQuoter is the SGX enclave the initializer runs in: Gramine's
// /dev/attestation, with the node's LAS quoting the enclave's REPORT
// where Gramine does not quote.
func enclaveQuoter(cfg Config) *produce.Gramine {
	g := &produce.Gramine{Dir: cfg.Guest.Gramine}
	if g.Dir == "" {
		g.Dir = produce.DefaultGramine
	}
	if cfg.LAS != "" {
		g.LAS = &lasclient.Client{URL: cfg.LAS}
	}
	return g
}

// execve replaces the process; tests replace it.
var execve = syscall.Exec

// execApp becomes the application: argv with the process's environment
// and the policy's env (which wins), minus the initializer's own
// settings, which the application has no use for.
func execApp(argv []string, env map[string]string, log *slog.Logger) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("--exec %s: %w", argv[0], err)
	}
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if _, set := env[name]; set || strings.HasPrefix(name, initenv.EnvPrefix) {
			continue
		}
		out = append(out, kv)
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	log.Info("starting the application in this enclave", "program", path, "env", len(env))
	if err := execve(path, argv, out); err != nil {
		return fmt.Errorf("--exec %s: %w", path, err)
	}
	return nil
}

// ExecArgs is the application a premain becomes (--exec and the
// arguments after --), refusing arguments without --exec: the
// initializer runs no program unless told to become it.
func ExecArgs(premain bool, args []string) ([]string, error) {
	switch {
	case premain && len(args) == 0:
		return nil, errors.New("--exec: name the application after --, e.g. --exec -- /app/server --port 8443")
	case !premain && len(args) > 0:
		return nil, fmt.Errorf("arguments %q without --exec: the initializer runs no program unless told to become it", args)
	case premain:
		return args, nil
	}
	return nil, nil
}
