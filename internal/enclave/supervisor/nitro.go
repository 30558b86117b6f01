package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/mdlayher/vsock"

	"github.com/cloister-cc/cloister/internal/enclave/channel"
	"github.com/cloister-cc/cloister/internal/enclave/eif"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

// DefaultOrchestratorPort is the vsock port the orchestrator listens on
// inside a Nitro Enclave.
const DefaultOrchestratorPort = channel.API

// Nitro boots Nitro Enclaves with nitro-cli and reaches the orchestrator
// over vsock. Tested against a fake nitro-cli only: this machine has no
// Nitro hardware (and its kernel no vsock loopback).
type Nitro struct {
	// CLI is nitro-cli's path.
	CLI string
	// EIFPath is the enclave image file (the orchestrator and the
	// plugins' images, built with nitro-cli build-enclave).
	EIFPath string
	// Port is the orchestrator's vsock port.
	Port uint32
	// Console gets a debug-mode enclave's console (its orchestrator's
	// log); production enclaves have none.
	Console io.Writer
	// Poll is how often it checks that the enclave runs.
	Poll time.Duration
}

// runResult is what nitro-cli run-enclave prints (after lines of
// progress).
type runResult struct {
	EnclaveID  string `json:"EnclaveID"`
	EnclaveCID uint32 `json:"EnclaveCID"`
}

type nitroEnclave struct {
	n    *Nitro
	res  runResult
	done once
	stop context.CancelFunc
}

// Boot runs nitro-cli run-enclave with the manifest's size, once the
// image file measures as the manifest's PCRs say.
func (n *Nitro) Boot(ctx context.Context, m *manifest.Manifest) (Enclave, error) {
	if err := n.checkPCRs(m.Enclave.PCRs); err != nil {
		return nil, err
	}
	args := []string{"run-enclave", "--eif-path", n.EIFPath,
		"--cpu-count", strconv.Itoa(int(m.Enclave.CPUs)), "--memory", strconv.Itoa(int(m.Enclave.MemoryMiB))}
	if m.Enclave.Debug {
		args = append(args, "--debug-mode")
	}
	out, err := n.run(ctx, args...)
	if err != nil {
		return nil, err
	}
	var res runResult
	start := bytes.IndexByte(out, '{')
	if start < 0 || json.Unmarshal(out[start:], &res) != nil || res.EnclaveID == "" || res.EnclaveCID == 0 {
		return nil, fmt.Errorf("nitro-cli run-enclave printed no enclave ID and CID: %q", out)
	}
	watch, cancel := context.WithCancel(context.Background())
	e := &nitroEnclave{n: n, res: res, done: once{done: make(chan struct{})}, stop: cancel}
	go e.watch(watch)
	if m.Enclave.Debug && n.Console != nil {
		go e.console(watch)
	}
	return e, nil
}

// checkPCRs measures the image file (in one pass: it is hundreds of
// megabytes) and refuses it unless it measures as want says. Without
// PCRs in the manifest nothing is checked here: the enclave's verifier
// still pins what it boots.
func (n *Nitro) checkPCRs(want *manifest.PCRs) error {
	if want == nil {
		return nil
	}
	f, err := os.Open(n.EIFPath)
	if err != nil {
		return fmt.Errorf("measuring the enclave image file: %w", err)
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	pcrs, err := eif.MeasureFile(bufio.NewReaderSize(f, 1<<20), info.Size())
	if err != nil {
		return fmt.Errorf("measuring %s: %w", n.EIFPath, err)
	}
	p0, p1, p2 := pcrs.Hex()
	if p0 != want.PCR0 || p1 != want.PCR1 || p2 != want.PCR2 {
		return fmt.Errorf("%s measures PCR0 %s, PCR1 %s, PCR2 %s, not the PCRs of spec.enclave.pcrs (PCR0 %s): the pod's image does not carry the enclave image built for this resource; build it again (cloister enclave build --update)",
			n.EIFPath, p0, p1, p2, want.PCR0)
	}
	return nil
}

func (n *Nitro) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, n.CLI, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("nitro-cli %s: %w: %s", args[0], err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

func (e *nitroEnclave) ID() string { return e.res.EnclaveID }

func (e *nitroEnclave) Dial(context.Context) (net.Conn, error) {
	return vsock.Dial(e.res.EnclaveCID, e.n.Port, nil)
}

func (e *nitroEnclave) Done() <-chan struct{} { return e.done.done }

// Channel is vsock to the enclave's CID.
func (e *nitroEnclave) Channel() channel.Outside { return channel.Vsock{CID: e.res.EnclaveCID} }

func (e *nitroEnclave) Err() error {
	select {
	case <-e.done.done:
		return e.done.err
	default:
		return nil
	}
}

// watch asks nitro-cli describe-enclaves until the enclave no longer runs.
func (e *nitroEnclave) watch(ctx context.Context) {
	poll := e.n.Poll
	if poll <= 0 {
		poll = pollEvery
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		out, err := e.n.run(ctx, "describe-enclaves")
		if err != nil {
			continue // nitro-cli itself failing says nothing of the enclave
		}
		var list []struct {
			EnclaveID string `json:"EnclaveID"`
			State     string `json:"State"`
		}
		if json.Unmarshal(out, &list) != nil {
			continue
		}
		state := "gone"
		for _, d := range list {
			if d.EnclaveID == e.res.EnclaveID {
				state = d.State
			}
		}
		if state != "RUNNING" {
			e.done.close(fmt.Errorf("nitro enclave %s is %s", e.res.EnclaveID, state))
			return
		}
	}
}

// console copies a debug-mode enclave's console.
func (e *nitroEnclave) console(ctx context.Context) {
	cmd := exec.CommandContext(ctx, e.n.CLI, "console", "--enclave-id", e.res.EnclaveID)
	cmd.Stdout, cmd.Stderr = e.n.Console, e.n.Console
	_ = cmd.Run()
}

// Stop runs nitro-cli terminate-enclave.
func (e *nitroEnclave) Stop(ctx context.Context) error {
	e.stop()
	_, err := e.n.run(ctx, "terminate-enclave", "--enclave-id", e.res.EnclaveID)
	e.done.close(fmt.Errorf("nitro enclave %s terminated", e.res.EnclaveID))
	return err
}
