package cas_test

import (
	"context"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/mlkem"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// loadClients is how many initializers attest at once in
// BenchmarkAttestLoad: a rollout's pods starting together (docs/cas.md,
// Performance).
const loadClients = 32

// BenchmarkAttestLoad is the attestation load of many pods starting:
// loadClients clients, each attestation what an initializer does (a new
// key, its CSR, simulated evidence binding it, the request, then the
// certificate chain checked against CAS's root, the leaf's key compared
// and the sealed secret opened). CAS runs as its own process, so its CPU
// is measured apart from the clients': "fresh" dials a new TLS connection
// for every attestation, "keep-alive" keeps one per client.
func BenchmarkAttestLoad(b *testing.B) {
	dir := b.TempDir()
	cmd, admin := childWith(b, dir, castest.LASPubFile(b))
	owner, _ := policy.NewKey()
	if _, err := admin.Init(context.Background(), []string{string(policy.MarshalPublicKey(&owner.PublicKey))}, 1, castest.InitToken(b, dir), castest.BoardPEM()); err != nil {
		b.Fatal(err)
	}
	if _, err := admin.RegisterPolicy(context.Background(), signedPolicy(b, "bench", owner)); err != nil {
		b.Fatal(err)
	}
	quoter := &sim.Quoter{Key: castest.LASKey()}
	ca, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name  string
		fresh bool
	}{{"fresh", true}, {"keep-alive", false}} {
		b.Run(mode.name, func(b *testing.B) {
			clients := make([]*casclient.Client, loadClients)
			for i := range clients {
				if clients[i], err = casclient.New(admin.URL(), ca, nil); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			serverBefore, selfBefore := procCPU(b, cmd.Process.Pid), selfCPU(b)
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, c := range clients {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if mode.fresh {
							c.CloseIdleConnections()
						}
						if err := attestLikeAnInitializer(c, quoter); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			server := (procCPU(b, cmd.Process.Pid) - serverBefore) / time.Duration(b.N)
			client := (selfCPU(b) - selfBefore) / time.Duration(b.N)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "attestations/s")
			b.ReportMetric(float64(server.Microseconds()), "server-cpu-µs/op")
			b.ReportMetric(float64(client.Microseconds()), "client-cpu-µs/op")
		})
	}
}

// attestLikeAnInitializer attests as the initializer does (its key, CSR
// and evidence made; the owners, the certificate's key and the seal
// checked), with simulated evidence.
func attestLikeAnInitializer(c *casclient.Client, quoter casclient.Quoter) error {
	res, _, err := c.Attested(context.Background(), "bench", "web", nil, quoter)
	if err == nil && len(res.Secrets["k"]) == 0 {
		err = errors.New("the sealed content has no secret k")
	}
	return err
}

// selfCPU is this process's user+system CPU time.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAttestFloor is the cryptography one attestation cannot do
// without, timed on this machine in one goroutine: the floor
// BenchmarkAttestLoad's CPU per attestation is read against. CAS verifies
// the evidence's and the CSR's signatures, signs the certificate and seals
// the content (HPKE: an ephemeral key and one ECDH); a fresh connection
// adds its TLS 1.3 handshake's signature and X25519MLKEM768 key exchange.
// The client makes its key, signs the CSR (and, simulated, the evidence)
// and opens the seal; a fresh connection adds the check of CAS's
// handshake signature and its half of the key exchange.
func BenchmarkAttestFloor(b *testing.B) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	msg := make([]byte, 600)
	digest := sha256.Sum256(msg)
	sig, _ := ecdsa.SignASN1(rand.Reader, key, digest[:])
	verify := func() {
		d := sha256.Sum256(msg)
		if !ecdsa.VerifyASN1(&key.PublicKey, d[:], sig) {
			b.Fatal("verify")
		}
	}
	sign := func() {
		d := sha256.Sum256(msg)
		if _, err := ecdsa.SignASN1(rand.Reader, key, d[:]); err != nil {
			b.Fatal(err)
		}
	}
	ecdhKey, _ := key.ECDH()
	seal := func() { // HPKE's DHKEM: an ephemeral key and its ECDH
		eph, _ := ecdh.P256().GenerateKey(rand.Reader)
		if _, err := eph.ECDH(ecdhKey.PublicKey()); err != nil {
			b.Fatal(err)
		}
	}
	open := func() {
		if _, err := ecdhKey.ECDH(ecdhKey.PublicKey()); err != nil {
			b.Fatal(err)
		}
	}
	keygen := func() {
		if _, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			b.Fatal(err)
		}
	}
	dk, _ := mlkem.GenerateKey768()
	x, _ := ecdh.X25519().GenerateKey(rand.Reader)
	serverShare := func() { // encapsulate to the client's ML-KEM key; X25519
		_, ct := dk.EncapsulationKey().Encapsulate()
		_ = ct
		eph, _ := ecdh.X25519().GenerateKey(rand.Reader)
		if _, err := eph.ECDH(x.PublicKey()); err != nil {
			b.Fatal(err)
		}
	}
	_, ct := dk.EncapsulationKey().Encapsulate()
	clientShare := func() { // make both keys; decapsulate; X25519
		d, _ := mlkem.GenerateKey768()
		_ = d.EncapsulationKey().Bytes()
		if _, err := dk.Decapsulate(ct); err != nil {
			b.Fatal(err)
		}
		eph, _ := ecdh.X25519().GenerateKey(rand.Reader)
		if _, err := eph.ECDH(x.PublicKey()); err != nil {
			b.Fatal(err)
		}
	}
	for _, f := range []struct {
		name string
		ops  []func()
	}{
		{"server/keep-alive", []func(){verify, verify, sign, seal}},
		{"server/fresh", []func(){verify, verify, sign, seal, sign, serverShare}},
		{"client/keep-alive", []func(){keygen, sign, sign, open}},
		{"client/fresh", []func(){keygen, sign, sign, open, verify, clientShare}},
	} {
		b.Run(f.name, func(b *testing.B) {
			for b.Loop() {
				for _, op := range f.ops {
					op()
				}
			}
		})
	}
}
