// Package gramine owns the Gramine manifest that runs cloister-cas in an
// SGX enclave, shipped in the CAS image, and the names the CAS chart and
// the operator share with it: which manifest seals how, where the image
// keeps it, the enclave's size.
package gramine

import _ "embed"

// Template is the manifest's template (gramine-manifest renders it with
// sealer set to one of Sealings' sealers).
//
//go:embed cloister-cas.manifest.template
var Template []byte

// TemplateName is the template's file name, in Dir of the CAS image.
const TemplateName = "cloister-cas.manifest.template"

// Dir is where the CAS image keeps the template, and where an SGX build
// of it puts the signed manifests (NAME.manifest.sgx, NAME.sig): the CAS
// container's working folder when it runs in an enclave.
const Dir = "/usr/local/lib/cloister/gramine"

// StateDir is CAS's state folder in the enclave: the manifest mounts only
// this one, so the CAS volume must be mounted there.
const StateDir = "/etc/cas/db"

// EnclaveSize is the manifest's sgx.enclave_size in bytes: the EPC a CAS
// pod requests.
const EnclaveSize = 1 << 30

// Sealing is one signed manifest of the template: its name (gramine-sgx's
// argument) and the sealer it fixes.
type Sealing struct{ Manifest, Sealer string }

// The two signed manifests: the root seed sealed to the enclave's
// MRENCLAVE (a new version recovers from a peer or its owners), or to its
// MRSIGNER and product ID (a new version by the same signer unseals it).
var (
	SealToMRENCLAVE = Sealing{Manifest: "cloister-cas", Sealer: NodeSealer}
	SealToMRSIGNER  = Sealing{Manifest: "cloister-cas-signer", Sealer: SignerNodeSealer}
)

// cloister-cas's SGX sealers that keep the sealed seed in the slot of the
// node its --node names, under the enclave's MRENCLAVE or MRSIGNER key.
const (
	NodeSealer       = "sgx-node"
	SignerNodeSealer = "sgx-signer-node"
)
