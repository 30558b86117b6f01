package cas

import (
	"flag"
	"strings"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/produce"
)

// AddFlags defines cloister-cas's command line on fs, into c. The CAS
// chart passes these flags; a test checks that it passes no other.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", DefaultListen, "address of the HTTPS API that workloads and the CLI call")
	fs.DurationVar(&c.DrainDelay, "drain-delay", 5*time.Second, "told to stop, how long CAS goes on serving while it reports not ready (clients that chose this replica just before move on)")
	fs.StringVar(&c.StateDir, "state-dir", "/var/lib/cloister-cas", "where CAS keeps its state (the CAS volume) with --store bolt; with a kubernetes store, its TLS certificate and collateral cache")
	fs.StringVar(&c.Store, "store", "bolt", "bolt (the state in --state-dir) or kubernetes:NAMESPACE/NAME (the state on the Kubernetes API, shared by the replicas of the CAS resource NAME; the pod's service account reaches it)")
	fs.StringVar(&c.Sealer, "sealer", "none", "none (owners recover after every restart), snp:PATH (in an SEV-SNP VM: the seed sealed in PATH under a key the firmware derives for this chip, image and policy) or file:PATH (development: the CAS root secret in a plain file)")
	fs.Func("tls-san", "extra DNS names / IPs of the TLS certificate, comma-separated", func(v string) error {
		for _, san := range strings.Split(v, ",") {
			if san != "" {
				c.TLSSANs = append(c.TLSSANs, san)
			}
		}
		return nil
	})
	fs.StringVar(&c.CollateralDir, "collateral-dir", "", "a folder of Intel PCS collateral and SEV-SNP VCEK or VLEK for hardware evidence (evidence verify --collateral's layout), read once and watched: a change to older Intel collateral is refused")
	fs.StringVar(&c.PCS, "pcs", "", "fetch Intel collateral (TCB info, QE identity, CRLs, then required) from Intel PCS (https://api.trustedservices.intel.com) or a PCCS at this URL, cached in --state-dir")
	fs.StringVar(&c.KDS, "kds", "", "fetch AMD collateral (VCEKs the evidence lacks, CRLs, then required) from AMD KDS (https://kdsintf.amd.com) or a mirror at this URL, cached in --state-dir")
	fs.StringVar(&c.DCAPKeyFile, "dcap-api-file", "", "a file holding the Intel DCAP API key sent to --pcs (the operator mounts its Secret there)")
	fs.StringVar(&c.InitTokenFile, "init-token-file", "", "file with the one-time init token (the operator mounts its Secret there); default: one CAS makes in --state-dir while uninitialised")
	fs.StringVar(&c.SimKeys, "sim-keys", "", "file, or folder of files, of PEM public keys: the only simulation keys (LAS nodes', a developer's) whose workload evidence CAS takes; default none: simulated workload evidence is refused")
	fs.StringVar(&c.SimulationKeyFile, "simulation-key-file", "", "with --simulation: the key CAS signs its own simulated evidence with, which clients pin (the operator mounts its Secret there); default "+SimulationKeyFile+" in --state-dir, made when missing, its public key in "+SimulationPubKeyFile)
	fs.StringVar(&c.Peers, "peers", "", "with a kubernetes store: CAS's Service, whose ready endpoints are the replicas that hand this one the root seed when it starts without it (each side proves by evidence that it is this CAS)")
	fs.BoolVar(&c.TEE, "tee", false, "CAS runs in a confidential VM (SEV-SNP, TDX) or an SGX enclave (Gramine): vouch for the TLS key with its own evidence; CAS does not start without it")
	fs.StringVar(&c.Node, "node", "", "the node CAS runs on (its pod's spec.nodeName): the slot of the state the sgx-node and sgx-signer-node sealers keep the sealed seed in")
	fs.BoolVar(&c.HostEnv, "host-env", false, "with --tee, in an enclave whose Gramine manifest fixes this command line: the flags the host may choose ("+strings.Join(HostChosen, ", ")+") come from "+HostEnvPrefix+"* environment variables (--tls-san from "+HostEnv("tls-san")+"), and only those")
	fs.StringVar(&c.Guest.Gramine, "gramine", produce.DefaultGramine, "with --tee: Gramine's attestation folder, inside an SGX enclave")
	fs.StringVar(&c.Guest.TSM, "tsm", produce.DefaultTSM, "with --tee: configfs-tsm's folder")
	fs.StringVar(&c.Guest.SEVGuest, "sev-guest", produce.DefaultSEVGuest, "with --tee: the SEV-SNP guest device (when configfs-tsm is missing)")
	fs.StringVar(&c.Guest.TDXGuest, "tdx-guest", produce.DefaultTDXGuest, "with --tee: the TDX guest device (when configfs-tsm is missing)")
	fs.StringVar(&c.TestRoots, "insecure-test-roots", "", "INSECURE, tests only: a PEM file of test roots (SEV-SNP ARK and ASK, a Nitro root) workload evidence may chain to")
	fs.StringVar(&c.WitnessPolicy, "witness-policy", "", "a witness policy file (Sigsum/Tessera format: witness NAME KEY URL, group, quorum): the witnesses CAS sends each new checkpoint of its transparency log to, for their cosignatures")
	fs.BoolVar(&c.Simulation, "simulation", false, "insecure, development only: vouch for the TLS key with simulated evidence and accept simulated evidence from workloads whose policy allows it (refused without this flag)")
}
