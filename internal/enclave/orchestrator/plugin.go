package orchestrator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/cloister-cc/cloister/internal/base/proc"
	"github.com/cloister-cc/cloister/internal/enclave/logstream"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

// pluginPath is the PATH plugins see: an enclave has no host environment
// to inherit.
const pluginPath = "/usr/local/bin:/usr/bin:/bin"

// plugin is one user plugin and the goroutine that keeps it as its
// restart policy says.
type plugin struct {
	spec   manifest.Plugin
	index  int // in the manifest: its user is PluginUIDBase+index
	o      *Orchestrator
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	status manifest.PluginStatus
}

func (p *plugin) snapshot() manifest.PluginStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

func (p *plugin) set(f func(*manifest.PluginStatus)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.status)
	p.status.Since = time.Now()
}

// stop ends the plugin and waits for its process.
func (p *plugin) stop() {
	p.cancel()
	<-p.done
}

// run starts the plugin, and again after each exit its restart policy
// restarts, pausing as the backoff says.
func (p *plugin) run(ctx context.Context) {
	defer close(p.done)
	log := p.o.log().With("plugin", p.spec.Name)
	bo := p.o.backoff()
	delay := bo.Initial
	for {
		started := time.Now()
		code, err := p.once(ctx)
		if ctx.Err() != nil {
			log.Info("plugin stopped")
			return
		}
		restart := p.spec.RestartPolicy == string(corev1.RestartPolicyAlways) ||
			(p.spec.RestartPolicy == string(corev1.RestartPolicyOnFailure) && (err != nil || code != 0))
		why := fmt.Sprintf("exited with code %d", code)
		if err != nil {
			why = err.Error()
		}
		if !restart {
			final := manifest.PluginFailed
			if err == nil && code == 0 {
				final = manifest.PluginSucceeded
			}
			log.Warn("plugin ended; its restart policy keeps it stopped", "reason", why, "restartPolicy", p.spec.RestartPolicy, "state", final)
			p.set(func(s *manifest.PluginStatus) {
				s.State, s.Message = final, why+"; restartPolicy "+p.spec.RestartPolicy+" keeps it stopped"
				s.ExitCode = exitCode(code, err)
			})
			return
		}
		if time.Since(started) >= bo.Reset {
			delay = bo.Initial
		}
		log.Warn("plugin ended; restarting", "reason", why, "restartPolicy", p.spec.RestartPolicy, "backoff", delay.String())
		p.set(func(s *manifest.PluginStatus) {
			s.State, s.Message = manifest.PluginWaiting, fmt.Sprintf("%s; restarting in %s", why, delay)
			s.ExitCode = exitCode(code, err)
		})
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, bo.Max)
		p.set(func(s *manifest.PluginStatus) { s.Restarts++ })
	}
}

func exitCode(code int, err error) *int {
	if err != nil {
		return nil
	}
	return &code
}

// once runs the plugin's process until it exits or ctx ends it. err is set
// when it could not start.
func (p *plugin) once(ctx context.Context) (int, error) {
	argv := append(append([]string{}, p.spec.Command...), p.spec.Args...)
	if len(p.spec.Command) == 0 {
		// Without the image's entrypoint (not pulled here) only an
		// explicit command says what to run.
		return 0, errors.New("no command: name the program in the plugin's command")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + pluginPath}
	for _, e := range p.spec.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.Dir = "/"
	// Its own process group, so stopping it stops what it started; with
	// a user of its own, also what left the group (setsid).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	uid, own := p.uid()
	if own {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: uid, NoSetGroups: true}
		defer killUser(uid)
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = p.o.stopGrace()
	log := p.o.log().With("plugin", p.spec.Name)
	stdout, stderr := lineLogger(log, "stdout"), lineLogger(log, "stderr")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	defer func() { _ = stdout.Close() }()
	defer func() { _ = stderr.Close() }()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	log.Info("plugin started", "pid", cmd.Process.Pid, "restartPolicy", p.spec.RestartPolicy)
	p.set(func(s *manifest.PluginStatus) { s.State, s.Message = manifest.PluginRunning, "" })
	err := cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	default:
		return 0, err
	}
}

// uid is the plugin's own user, if it has one.
func (p *plugin) uid() (uint32, bool) {
	if p.o.PluginUIDBase == 0 {
		return 0, false
	}
	return p.o.PluginUIDBase + uint32(p.index), true //nolint:gosec // at most 32 plugins
}

// killUser ends every process of uid: what a plugin left behind when it
// stopped, in its process group or out of it.
func killUser(uid uint32) {
	for range 3 {
		pids := proc.OfUser(uid)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lineLogger logs each line written to it as one record of the plugin; a
// line longer than logstream.MaxLine is logged cut, marked so, and the
// rest of it skipped, so no plugin output grows the orchestrator's memory.
func lineLogger(log interface{ Info(string, ...any) }, stream string) io.WriteCloser {
	r, w := io.Pipe()
	go func() {
		br := bufio.NewReaderSize(r, logstream.MaxLine)
		skipping := false
		for {
			line, err := br.ReadSlice('\n')
			switch {
			case errors.Is(err, bufio.ErrBufferFull):
				if !skipping {
					log.Info(string(line), "stream", stream, "cut", true)
				}
				skipping = true
				continue
			case len(line) > 0 && !skipping:
				log.Info(strings.TrimSuffix(string(line), "\n"), "stream", stream)
			}
			skipping = false
			if err != nil {
				_, _ = io.Copy(io.Discard, r)
				return
			}
		}
	}()
	return w
}
