package orchestrator

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

// MaxNonce bounds the nonce bound into evidence: Nitro's user data holds
// up to 512 bytes; 64 is what verifiers send.
const MaxNonce = 64

// Evidence is attestation evidence and its type (sim or nitro).
type Evidence struct {
	Type attest.Type
	Raw  []byte
}

// Attester produces the enclave's evidence binding a nonce (the
// document's nonce: freshness) and the applied manifest's SHA-256 (its
// user data). The host delivers the manifest and could change a plugin's
// command or environment in place, which the boot measurements (PCRs) do
// not cover: the user data makes every such change show in the evidence,
// and a verifier pins it (an identity's manifest).
type Attester interface {
	Attest(nonce, manifest []byte) (Evidence, error)
	// Extend records a manifest before it runs: the slot-th one applied
	// since boot extends PCR16+slot, which is then locked.
	Extend(slot int, manifest []byte) error
}

// simValidity is how long simulated evidence is valid.
const simValidity = 10 * time.Minute

// simAttester signs Nitro-shaped claims with a key of its own: nothing
// vouches for it, so the evidence is always insecure.
type simAttester struct {
	key    *ecdsa.PrivateKey
	claims attest.Claims
}

// NewSimAttester is the attester of a simulated enclave booted with m: its
// PCRs derive from m (enclave.Manifest.SimPCRs), its key is new.
func NewSimAttester(m *manifest.Manifest) (Attester, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pcrs := map[int]attest.Bytes{}
	for i, v := range m.SimPCRs() {
		pcrs[i] = v
	}
	return &simAttester{key: key, claims: attest.Claims{
		// As Nitro evidence that verifies: there are no TCB levels.
		TCBStatus: attest.TCBUpToDate,
		Debug:     m.Enclave.Debug,
		Nitro:     &attest.NitroIdentity{ModuleID: "sim-" + m.BootDigest()[:16], PCRs: pcrs},
	}}, nil
}

func (a *simAttester) Extend(slot int, manifest []byte) error {
	i := attest.NitroManifestPCR + slot
	if _, locked := a.claims.Nitro.PCRs[i]; locked || slot >= attest.NitroManifestSlots {
		return fmt.Errorf("PCR%d cannot be extended", i)
	}
	a.claims.Nitro.PCRs[i] = attest.NitroExtend(nil, manifest)
	return nil
}

func (a *simAttester) Attest(nonce, manifest []byte) (Evidence, error) {
	c := a.claims
	c.ReportData, c.Nonce = attest.Bytes(manifest), attest.Bytes(nonce)
	raw, err := sim.Generate(a.key, c, time.Now(), simValidity)
	return Evidence{Type: attest.Sim, Raw: raw}, err
}

// nsmAttester asks the Nitro Secure Module for an attestation document
// with the nonce and the manifest's digest (produce.Nitro, which refuses a
// document binding anything else). Untested on hardware: this machine has
// no /dev/nsm.
type nsmAttester struct{ p *produce.Nitro }

// NewNSMAttester is the attester of a Nitro Enclave.
func NewNSMAttester(*manifest.Manifest) (Attester, error) {
	return nsmAttester{p: &produce.Nitro{Path: produce.DefaultNSM}}, nil
}

// NSMAttester is the attester of the Nitro Secure Module m (tests: a
// fake one).
func NSMAttester(m produce.NSM) Attester { return nsmAttester{p: &produce.Nitro{Module: m}} }

func (a nsmAttester) Extend(slot int, manifest []byte) error {
	if slot >= attest.NitroManifestSlots {
		return fmt.Errorf("manifest %d: the enclave shows %d at most", slot+1, attest.NitroManifestSlots)
	}
	return a.p.ExtendAndLock(uint16(attest.NitroManifestPCR+slot), manifest) //nolint:gosec // below 32
}

func (a nsmAttester) Attest(nonce, manifest []byte) (Evidence, error) {
	ev, err := a.p.Attest(manifest, nonce)
	return Evidence{Type: ev.Type, Raw: ev.Raw}, err
}
