package producetest

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/dev/testskip"
)

// GramineFS is Gramine's /dev/attestation as an SGX enclave sees it,
// served with FUSE, so the real producer's file I/O runs against it:
// attestation_type, user_report_data and target_info to write,
// my_target_info, report (a REPORT of the enclave's report body with the
// report data written) and quote (Signer's quote of it) to read, and the
// sealing keys keys/_sgx_mrenclave and keys/_sgx_mrsigner, derived from a
// secret of this fake CPU and the enclave's MRENCLAVE or MRSIGNER, as
// EGETKEY derives them. A REPORT's MAC is zeros: nothing here checks it.
type GramineFS struct {
	Signer *SGXSigner
	// Body is the enclave's report body (384 bytes: MRENCLAVE at 64,
	// MRSIGNER at 128, ATTRIBUTES at 48, ...); the report data is filled
	// in per request.
	Body []byte
	// RemoteAttestation is the manifest's sgx.remote_attestation: "dcap"
	// serves quote, "none" only report.
	RemoteAttestation string
	// CPU is the fake CPU's sealing secret: the same for every GramineFS
	// of one machine (NewCPU), so two enclaves on it derive keys as SGX
	// does.
	CPU []byte

	mu         sync.Mutex
	reportData []byte
	targetInfo []byte
}

// NewCPU is a fake CPU's sealing secret.
func NewCPU() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// MountGramine serves g at dir (made if missing) until the test ends;
// it skips the test, saying why, where FUSE cannot be mounted (not root,
// no /dev/fuse).
func MountGramine(tb testing.TB, dir string, g *GramineFS) {
	tb.Helper()
	if os.Geteuid() != 0 {
		testskip.Skipf(tb, "mounting a FUSE /dev/attestation needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testskip.Skipf(tb, "no /dev/fuse to mount a fake /dev/attestation: %v", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		tb.Fatal(err)
	}
	srv, err := g.Mount(dir)
	if err != nil {
		tb.Fatalf("mounting a fake /dev/attestation at %s: %v", dir, err)
	}
	tb.Cleanup(func() { _ = srv.Unmount() })
}

// Mount serves g at dir, readable and writable by every user (as in an
// enclave, where the application's user opens it); the caller unmounts.
func (g *GramineFS) Mount(dir string) (*fuse.Server, error) {
	return fs.Mount(dir, &gramineRoot{g: g}, &fs.Options{MountOptions: fuse.MountOptions{
		DirectMount: true, AllowOther: true, FsName: "cloister-test-gramine", Name: "gramine"}})
}

type gramineRoot struct {
	fs.Inode
	g *GramineFS
}

func (r *gramineRoot) OnAdd(ctx context.Context) {
	for _, name := range []string{"attestation_type", "user_report_data", "target_info", "my_target_info", "report", "quote"} {
		r.AddChild(name, r.NewPersistentInode(ctx, &gramineFile{g: r.g, name: name}, fs.StableAttr{}), false)
	}
	keys := r.NewPersistentInode(ctx, &fs.Inode{}, fs.StableAttr{Mode: syscall.S_IFDIR})
	r.AddChild("keys", keys, false)
	for _, name := range []string{"_sgx_mrenclave", "_sgx_mrsigner"} {
		keys.AddChild(name, r.NewPersistentInode(ctx, &gramineFile{g: r.g, name: "keys/" + name}, fs.StableAttr{}), false)
	}
}

// gramineFile is one pseudo-file; what a read returns is made at open.
type gramineFile struct {
	fs.Inode
	g    *GramineFS
	name string
}

var (
	_ fs.NodeOpener    = (*gramineFile)(nil)
	_ fs.NodeGetattrer = (*gramineFile)(nil)
	_ fs.FileReader    = (*gramineHandle)(nil)
	_ fs.FileWriter    = (*gramineHandle)(nil)
)

func (f *gramineFile) writable() bool { return f.name == "user_report_data" || f.name == "target_info" }

func (f *gramineFile) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o444
	if f.writable() {
		out.Mode = syscall.S_IFREG | 0o666
	}
	return 0
}

func (f *gramineFile) Open(_ context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 && !f.writable() {
		return nil, 0, syscall.EACCES
	}
	h := &gramineHandle{f: f}
	if flags&syscall.O_WRONLY == 0 {
		data, errno := f.g.content(f.name)
		if errno != 0 {
			return nil, 0, errno
		}
		h.data = data
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

type gramineHandle struct {
	f    *gramineFile
	data []byte
}

func (h *gramineHandle) Read(_ context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(h.data)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(h.data[off:min(int64(len(h.data)), off+int64(len(dest)))]), 0
}

// Write takes a whole value in one write, as Gramine does.
func (h *gramineHandle) Write(_ context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	g := h.f.g
	size := map[string]int{"user_report_data": 64, "target_info": 512}[h.f.name]
	if off != 0 || len(data) != size {
		return 0, syscall.EINVAL
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if h.f.name == "user_report_data" {
		g.reportData = append([]byte(nil), data...)
	} else {
		g.targetInfo = append([]byte(nil), data...)
	}
	return uint32(size), 0 //nolint:gosec // 64 or 512
}

// content is what reading name returns now.
func (g *GramineFS) content(name string) ([]byte, syscall.Errno) {
	g.mu.Lock()
	defer g.mu.Unlock()
	body := append([]byte(nil), g.Body...)
	copy(body[320:384], g.reportData)
	switch name {
	case "attestation_type":
		return []byte(g.RemoteAttestation), 0
	case "user_report_data":
		return append(make([]byte, 0, 64), g.reportData...), 0
	case "target_info":
		return append([]byte(nil), g.targetInfo...), 0
	case "my_target_info":
		ti := make([]byte, 512)
		copy(ti[0:], body[64:96])  // MRENCLAVE
		copy(ti[32:], body[48:64]) // ATTRIBUTES
		return ti, 0
	case "report":
		if g.targetInfo == nil {
			return nil, syscall.EINVAL // Gramine needs a target first
		}
		return append(body, make([]byte, 48)...), 0 // key id and MAC: zeros
	case "quote":
		if g.RemoteAttestation != "dcap" {
			return nil, syscall.ENOENT
		}
		q, err := g.Signer.Quote(body)
		if err != nil {
			return nil, syscall.EIO
		}
		return q, 0
	case "keys/_sgx_mrenclave":
		return g.sealKey("MRENCLAVE", body[64:96]), 0
	case "keys/_sgx_mrsigner":
		return g.sealKey("MRSIGNER", body[128:160]), 0
	}
	return nil, syscall.ENOENT
}

// sealKey is EGETKEY's seal key as the fake CPU derives it: 16 bytes
// from its secret and the enclave's identity under the policy.
func (g *GramineFS) sealKey(policy string, id []byte) []byte {
	m := hmac.New(sha256.New, g.CPU)
	m.Write([]byte(policy))
	m.Write(id)
	return m.Sum(nil)[:16]
}

// SGXMachine is an SGX machine for tests: its quoting enclave, the
// Intel-shaped collateral that judges its quotes, laid out in Collateral
// with the test root in Roots, and its CPU's secret.
type SGXMachine struct {
	*SGXSigner
	Collateral, Roots string
	CPU               []byte
}

// NewSGXMachine makes one, its collateral in dir/collateral.
func NewSGXMachine(tb testing.TB, dir string) *SGXMachine {
	tb.Helper()
	s, err := NewSGXSigner(time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	m := &SGXMachine{SGXSigner: s, Collateral: filepath.Join(dir, "collateral"), CPU: NewCPU()}
	if m.Roots, err = s.WriteCollateral(m.Collateral); err != nil {
		tb.Fatal(err)
	}
	return m
}

// EnclavePaths mounts, at dir, an enclave of mrenclave and mrsigner
// (EnclaveBody) that Gramine quotes itself, on the machine's CPU, and
// returns the producer paths that find it: every other interface at a
// path that does not exist, so Detect takes Gramine on any machine.
func (m *SGXMachine) EnclavePaths(tb testing.TB, dir string, mrenclave, mrsigner byte) produce.Paths {
	tb.Helper()
	MountGramine(tb, dir, &GramineFS{Signer: m.SGXSigner, Body: EnclaveBody(mrenclave, mrsigner), RemoteAttestation: "dcap", CPU: m.CPU})
	missing := filepath.Join(filepath.Dir(dir), "no-such-interface")
	return produce.Paths{TSM: missing, SEVGuest: missing, TDXGuest: missing, NSM: missing, Gramine: dir}
}
