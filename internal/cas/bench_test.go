package cas_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/base/proc"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// benchCAS is a ready CAS in this process with policy "bench" and a pool
// of attestation requests (each its own key, CSR and sim evidence).
func benchCAS(b *testing.B, n int) (*casclient.Client, []*wire.AttestRequest) {
	c := readyCAS(b)
	owner, _ := policy.NewKey()
	if _, err := c.RegisterPolicy(context.Background(), signedPolicy(b, "bench", owner)); err != nil {
		b.Fatal(err)
	}
	return c, attestRequests(b, n)
}

// attestRequests are n requests for policy bench, service web: each its
// own key, CSR and sim evidence binding it.
func attestRequests(b *testing.B, n int) []*wire.AttestRequest {
	las := castest.LASKey()
	var reqs []*wire.AttestRequest
	for range n {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
		csr, _ := x509.ParseCertificateRequest(der)
		binding, _ := wire.KeyBinding(csr.PublicKey)
		ev, _ := sim.Generate(las, attest.Claims{TCBStatus: attest.TCBUpToDate, ReportData: binding}, time.Now(), time.Hour)
		reqs = append(reqs, &wire.AttestRequest{Policy: "bench", Service: "web", Evidence: attest.Evidence{Type: attest.Sim, Raw: ev},
			CSR: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})})
	}
	return reqs
}

// BenchmarkAttest: attestations with certificate issuance over HTTPS on
// loopback, keep-alive, as many in parallel as GOMAXPROCS*4 clients.
func BenchmarkAttest(b *testing.B) {
	c, reqs := benchCAS(b, 256)
	b.SetParallelism(4)
	var i int64
	var mu sync.Mutex
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			r := reqs[i%int64(len(reqs))]
			i++
			mu.Unlock()
			if _, err := c.AttestRaw(context.Background(), r); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "attestations/s")
}

// BenchmarkAttestNewConnection: one attestation per new client, so each
// pays its TLS handshake, as a pod's initializer does.
func BenchmarkAttestNewConnection(b *testing.B) {
	c, url, ca := readyCASAt(b)
	owner, _ := policy.NewKey()
	if _, err := c.RegisterPolicy(context.Background(), signedPolicy(b, "bench", owner)); err != nil {
		b.Fatal(err)
	}
	reqs := attestRequests(b, 64)
	i := 0
	for b.Loop() {
		fresh, err := casclient.New(url, ca, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fresh.AttestRaw(context.Background(), reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		fresh.CloseIdleConnections()
		i++
	}
}

// BenchmarkAttestFreshRequest: each attestation with a key, CSR and
// evidence made for it, as every pod start makes them.
func BenchmarkAttestFreshRequest(b *testing.B) {
	c, _ := benchCAS(b, 0)
	for b.Loop() {
		if _, err := c.AttestRaw(context.Background(), attestRequests(b, 1)[0]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAttestLatencyAt500: attestations sent at 500 per second; the
// p50 and p99 of their latency.
func BenchmarkAttestLatencyAt500(b *testing.B) {
	c, reqs := benchCAS(b, 256)
	const rate = 500
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	b.ResetTimer()
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for n := range b.N {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			if _, err := c.AttestRaw(context.Background(), reqs[n%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			lat = append(lat, time.Since(start))
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}

// procCPU is a process's user+system CPU time from /proc (Linux).
func procCPU(b *testing.B, pid int) time.Duration {
	d, err := proc.CPU(pid)
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	return d
}

// BenchmarkAttestServerCPU runs cloister-cas as its own process and
// reports the CPU it spends per attestation, so the load generator's CPU
// is not counted: server-capacity is what 2 cores of it would serve.
func BenchmarkAttestServerCPU(b *testing.B) {
	dir := b.TempDir()
	cmd, c := child(b, dir)
	owner, _ := policy.NewKey()
	if _, err := c.Init(context.Background(), []string{string(policy.MarshalPublicKey(&owner.PublicKey))}, 1, castest.InitToken(b, dir), castest.BoardPEM()); err != nil {
		b.Fatal(err)
	}
	if _, err := c.RegisterPolicy(context.Background(), signedPolicy(b, "bench", owner)); err != nil {
		b.Fatal(err)
	}
	reqs := attestRequests(b, 256)
	before := procCPU(b, cmd.Process.Pid)
	b.ResetTimer()
	var next atomic.Int64
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.AttestRaw(context.Background(), reqs[next.Add(1)%int64(len(reqs))]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	perAttest := (procCPU(b, cmd.Process.Pid) - before) / time.Duration(b.N)
	b.ReportMetric(float64(perAttest.Microseconds()), "server-cpu-µs/attestation")
	if perAttest > 0 {
		b.ReportMetric(2*float64(time.Second)/float64(perAttest), "server-capacity-2cores/s")
	}
}
