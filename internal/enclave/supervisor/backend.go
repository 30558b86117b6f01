package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cloister-cc/cloister/internal/enclave/channel"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

// Backend boots enclaves.
type Backend interface {
	// Boot starts an enclave sized by m. The orchestrator inside may
	// take a moment more to answer Dial.
	Boot(ctx context.Context, m *manifest.Manifest) (Enclave, error)
}

// Enclave is a booted enclave.
type Enclave interface {
	// ID names it in logs.
	ID() string
	// Dial reaches its orchestrator.
	Dial(ctx context.Context) (net.Conn, error)
	// Done is closed when it stopped; Err then says why.
	Done() <-chan struct{}
	Err() error
	// Stop terminates it.
	Stop(ctx context.Context) error
	// Channel reaches its ports and serves its egresses.
	Channel() channel.Outside
}

// Sim boots a simulated enclave: the orchestrator as a child process,
// reached over a unix socket. Nothing isolates it; its evidence says so.
type Sim struct {
	// Program runs the orchestrator; it gets --listen <socket> appended.
	Program []string
	// Dir holds the socket.
	Dir string
	// Stdout and Stderr get the orchestrator's console in debug mode, as
	// a Nitro Enclave's; otherwise its log reaches the pod only as a
	// Nitro Enclave's does, through the supervisor (Supervisor.EnclaveLog).
	Stdout, Stderr io.Writer
}

// SocketName is the simulated enclave's socket in Sim.Dir.
const SocketName = "enclave.sock"

type simEnclave struct {
	cmd    *exec.Cmd
	socket string
	done   chan struct{}
	err    error
}

// Boot starts the orchestrator process.
func (s *Sim) Boot(_ context.Context, m *manifest.Manifest) (Enclave, error) {
	if len(s.Program) == 0 {
		return nil, errors.New("no orchestrator program to run")
	}
	socket := filepath.Join(s.Dir, SocketName)
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing a previous enclave's socket: %w", err)
	}
	argv := append(append([]string{}, s.Program...), "--listen", socket)
	cmd := exec.Command(argv[0], argv[1:]...)
	if m.Enclave.Debug {
		cmd.Stdout, cmd.Stderr = s.Stdout, s.Stderr
	}
	// Its own group, so Stop can end the plugins with it. (No parent-death
	// signal: Go ties it to the forking thread, not the process; the
	// container's end kills the child anyway.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the simulated enclave: %w", err)
	}
	e := &simEnclave{cmd: cmd, socket: socket, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if err == nil {
			err = errors.New("the orchestrator exited")
		}
		e.err = fmt.Errorf("simulated enclave (pid %d): %w", cmd.Process.Pid, err)
		close(e.done)
	}()
	return e, nil
}

func (e *simEnclave) ID() string { return fmt.Sprintf("sim-%d", e.cmd.Process.Pid) }

func (e *simEnclave) Dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", e.socket)
}

func (e *simEnclave) Done() <-chan struct{} { return e.done }

// Channel is the folder of the enclave's sockets.
func (e *simEnclave) Channel() channel.Outside { return channel.Unix{Dir: filepath.Dir(e.socket)} }

func (e *simEnclave) Err() error {
	select {
	case <-e.done:
		return e.err
	default:
		return nil
	}
}

// Stop sends SIGTERM to the orchestrator (which stops its plugins) and
// SIGKILL to the whole group if it has not ended when ctx does.
func (e *simEnclave) Stop(ctx context.Context) error {
	select {
	case <-e.done:
		return nil // reaped: its pid may be another process's by now
	default:
	}
	_ = syscall.Kill(e.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-e.done:
	case <-ctx.Done():
		_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
		<-e.done
	}
	return nil
}

// once guards a done channel closed from more than one place.
type once struct {
	o    sync.Once
	done chan struct{}
	err  error
}

func (c *once) close(err error) {
	c.o.Do(func() { c.err = err; close(c.done) })
}

// pollEvery is how often the Nitro backend asks whether its enclave still
// runs.
const pollEvery = 5 * time.Second
