package cas

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/cas/gramine"
	"github.com/cloister-cc/cloister/internal/cas/seal"
)

var errSealerSpec = errors.New("use none (owners recover after every restart), snp:PATH (in an SEV-SNP VM of CAS's own, no pod's: the seed in PATH, sealed under a key the firmware derives for this chip, image and policy), " +
	"snp-node:NODE (the same key, the sealed seed in NODE's slot of a kubernetes store), sgx:PATH (in an SGX enclave: the seed in PATH, sealed under the enclave's key for its MRENCLAVE, which no other enclave derives), " +
	"sgx-signer:PATH (the same, under the key of its MRSIGNER: later versions of the enclave by its signer open it too), " +
	"sgx-node[:NODE] and sgx-signer-node[:NODE] (the same keys, the sealed seed in NODE's slot of a kubernetes store; without NODE, --node's), sim-node:NODE (simulation, insecure: a key from the simulation key and NODE, the sealed seed in NODE's slot of a kubernetes store) " +
	"or file:PATH (development: the CAS root secret in a plain file)")

// ParseSealer reads --sealer; guest holds the SEV-SNP guest device that
// derives the snp sealers' key and Gramine's folder that gives the sgx
// sealers'.
func ParseSealer(spec string, guest produce.Paths) (seal.Sealer, error) {
	sevGuest := guest.SEVGuest
	switch {
	case spec == "" || spec == "none":
		return seal.NoSealer{}, nil
	case strings.HasPrefix(spec, "file:") && len(spec) > len("file:"):
		return seal.FileSealer{Path: strings.TrimPrefix(spec, "file:")}, nil
	case strings.HasPrefix(spec, "snp-node:") && len(spec) > len("snp-node:"):
		dev := &produce.SEVGuest{Path: cmp.Or(sevGuest, produce.DefaultSEVGuest)}
		return seal.SlotSealer{Node: strings.TrimPrefix(spec, "snp-node:"), Key: dev.SealingKey, What: derivedKeySealer}, nil
	case strings.HasPrefix(spec, "snp:") && len(spec) > len("snp:"):
		dev := &produce.SEVGuest{Path: cmp.Or(sevGuest, produce.DefaultSEVGuest)}
		return seal.KeySealer{Path: strings.TrimPrefix(spec, "snp:"), Key: dev.SealingKey, What: derivedKeySealer}, nil
	case strings.HasPrefix(spec, "sgx:") && len(spec) > len("sgx:"):
		return seal.KeySealer{Path: strings.TrimPrefix(spec, "sgx:"), Key: sgxKey(guest, produce.SealToMRENCLAVE), What: sgxKeyMRENCLAVE}, nil
	case strings.HasPrefix(spec, "sgx-signer:") && len(spec) > len("sgx-signer:"):
		return seal.KeySealer{Path: strings.TrimPrefix(spec, "sgx-signer:"), Key: sgxKey(guest, produce.SealToMRSIGNER), What: sgxKeyMRSIGNER}, nil
	case strings.HasPrefix(spec, sgxNodeSealer+":") && len(spec) > len(sgxNodeSealer+":"):
		return seal.SlotSealer{Node: strings.TrimPrefix(spec, sgxNodeSealer+":"), Key: sgxKey(guest, produce.SealToMRENCLAVE), What: sgxKeyMRENCLAVE}, nil
	case strings.HasPrefix(spec, sgxSignerNodeSealer+":") && len(spec) > len(sgxSignerNodeSealer+":"):
		return seal.SlotSealer{Node: strings.TrimPrefix(spec, sgxSignerNodeSealer+":"), Key: sgxKey(guest, produce.SealToMRSIGNER), What: sgxKeyMRSIGNER}, nil
	case strings.HasPrefix(spec, "sim-node:") && len(spec) > len("sim-node:"):
		// The key comes from the simulation key, once Run knows it.
		return seal.SlotSealer{Node: strings.TrimPrefix(spec, "sim-node:"), What: "simulated sealing key", Simulated: true}, nil
	}
	return nil, fmt.Errorf("--sealer %q: %w", spec, errSealerSpec)
}

// sealerFor is the sealer --sealer names, with its key where it needs one
// from the rest of the configuration (simulated sealing: the simulation
// key), saying when it is insecure.
func sealerFor(cfg Config, log *slog.Logger) (seal.Sealer, error) {
	spec := cfg.Sealer
	if spec == sgxNodeSealer || spec == sgxSignerNodeSealer {
		// An enclave's manifest fixes the sealer; the host names the node.
		if cfg.Node == "" {
			return nil, fmt.Errorf("--sealer %s keeps the sealed seed in this node's slot of the state: give --node (the pod's spec.nodeName)", spec)
		}
		spec += ":" + cfg.Node
	}
	sealer, err := ParseSealer(spec, cfg.Guest)
	if err != nil {
		return nil, err
	}
	if slot, ok := sealer.(seal.SlotSealer); ok {
		// From the host in an enclave (--node): a node's name, nothing else.
		if errs := validation.IsDNS1123Subdomain(slot.Node); len(errs) > 0 {
			return nil, fmt.Errorf("--sealer %s: node %q is not a node's name: %s", cfg.Sealer, slot.Node, strings.Join(errs, "; "))
		}
		if cfg.Store == "" || cfg.Store == "bolt" {
			return nil, fmt.Errorf("--sealer %s keeps the sealed seed in a slot of the state that replicas share: give --store kubernetes:NAMESPACE/NAME", cfg.Sealer)
		}
		if slot.Simulated {
			if !cfg.Simulation {
				return nil, fmt.Errorf("--sealer %s is simulated sealing: it needs --simulation", cfg.Sealer)
			}
			keyFile := cfg.SimulationKeyFile
			if keyFile == "" {
				if keyFile, _, err = ownSimulationKey(cfg.StateDir); err != nil {
					return nil, err
				}
			}
			slot.Key = simulatedSealingKey(keyFile, slot.Node)
			sealer = slot
		}
	}
	if slot, ok := sealer.(seal.SlotSealer); ok && slot.Simulated {
		log.Warn("simulated sealing: the CAS root secret is sealed in this node's slot of the state under a key derived from the simulation key; whoever reads that key has every secret of this CAS (development only)", "node", slot.Node)
	} else if sealer.Insecure() {
		log.Warn("insecure sealer: the CAS root secret is kept in a plain file; whoever reads it has every secret of this CAS (development only)")
	}
	return sealer, nil
}

// sgxKey derives an SGX sealer's key from Gramine's sealing key to.
func sgxKey(guest produce.Paths, to string) func() ([]byte, error) {
	g := &produce.Gramine{Dir: cmp.Or(guest.Gramine, produce.DefaultGramine)}
	return func() ([]byte, error) { return g.SealingKey(to) }
}

// The SGX sealers' keys, as errors and logs name them.
const (
	sgxKeyMRENCLAVE = "SGX sealing key (MRENCLAVE)"
	sgxKeyMRSIGNER  = "SGX sealing key (MRSIGNER)"
)

// The SGX node sealers, which a manifest fixes without a node: --node
// names it.
const (
	sgxNodeSealer       = gramine.NodeSealer
	sgxSignerNodeSealer = gramine.SignerNodeSealer
)

// derivedKeySealer names the SEV-SNP sealers: their key is derived from
// the launch measurement and guest policy, never the host data.
const derivedKeySealer = "SEV-SNP derived key"

// derivedKeyFits refuses an SEV-SNP sealer in a VM that carries host data:
// a pod's VM of a confidential runtime class (its initdata), which every
// pod of that class measures alike. Any of them would derive the same key
// and open the sealed seed; only a VM whose launch measurement is CAS's
// own (a VM image of CAS) may seal with it.
func derivedKeyFits(ctx context.Context, cfg Config, sealer seal.Sealer, testRoots []*x509.Certificate) error {
	what := ""
	switch s := sealer.(type) {
	case seal.KeySealer:
		what = s.What
	case seal.SlotSealer:
		what = s.What
	}
	if what != derivedKeySealer {
		return nil
	}
	ev, err := guestEvidenceOver(ctx, cfg.Guest, make([]byte, 64))
	if err != nil {
		return fmt.Errorf("--sealer %s: this VM's evidence: %w", cfg.Sealer, err)
	}
	claims, err := verify.Evidence(*ev, verify.Options{At: time.Now(), TestRoots: testRoots})
	if err != nil {
		return fmt.Errorf("--sealer %s: this VM's evidence: %w", cfg.Sealer, err)
	}
	if claims.SNP == nil {
		return fmt.Errorf("--sealer %s: this VM makes %s evidence, not SEV-SNP", cfg.Sealer, claims.Type)
	}
	for _, b := range claims.SNP.HostData {
		if b != 0 {
			return fmt.Errorf("--sealer %s: this VM carries host data (a pod's policy), so it is a VM of a runtime class other pods share: "+
				"the firmware's derived key covers the launch measurement, not the host data, and any of them would open the seed; use --sealer none (peers and owners recover CAS)", cfg.Sealer)
		}
	}
	return nil
}
