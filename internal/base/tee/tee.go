// Package tee names, once, the extended resources and node labels of every
// trusted execution environment Cloister serves. The device plugins
// register these names, the controllers count them, the dev cluster's
// simulated nodes carry them and the metrics are keyed by them: a rename
// here reaches all of them, and a name spelled elsewhere does not compile
// against it.
package tee

import "strings"

// LabelTEE names a node's trusted execution environment (sgx, snp, tdx,
// nitro, cex); each also has a label of its own, LabelPrefix+<tee>=true.
const (
	LabelTEE    = "cloister.dev/tee"
	LabelPrefix = "cloister.dev/"
)

// The dev cluster's nodes: LabelSimulatedNode marks a node that only looks
// like a TEE host (a kwok node), whose pods run nothing, so that nothing
// dials their addresses; LabelRealNode marks its one real node, where
// Cloister's own pods run.
const (
	LabelSimulatedNode = LabelPrefix + "simulated-node"
	LabelRealNode      = LabelPrefix + "real-node"
)

// SGX: the plugin offers enclave and provisioning devices and labels the
// nodes where it found SGX.
const (
	SGXPrefix    = "sgx.cloister.dev/"
	SGXEnclave   = SGXPrefix + "enclave"
	SGXProvision = SGXPrefix + "provision"
	// SGXEPC is the node's SGX enclave page cache in bytes: an extended
	// resource of the node's status, which pods request by their
	// enclaves' size.
	SGXEPC   = SGXPrefix + "epc"
	LabelSGX = LabelPrefix + "sgx"
)

// AWS Nitro Enclaves: the names AWS's own device plugin uses, so workloads
// written for it run unchanged.
const (
	NitroPrefix   = "aws.ec2.nitro/"
	NitroEnclaves = NitroPrefix + "nitro_enclaves"
	NitroCPUs     = NitroPrefix + "nitro_enclaves_cpus"
	LabelNitro    = LabelPrefix + "nitro"
)

// IBM CryptoExpress: adapters exist on s390x (IBM Z, LinuxONE) only.
const (
	CEXPrefix = "ibm.com/cex-"
	ArchS390X = "s390x"
)

// CEXResource is the resource of a CryptoExpress queue type (ep11, cca,
// accel), or of one of its config sets: ibm.com/cex-<type>[-<set>].
func CEXResource(cexType, set string) string {
	if set == "" {
		return CEXPrefix + cexType
	}
	return CEXPrefix + cexType + "-" + set
}

// IsDevice says whether a resource is one of the TEE devices Cloister's
// plugins offer (or AWS's Nitro plugin, whose names it shares).
func IsDevice(name string) bool {
	return strings.HasPrefix(name, SGXPrefix) || strings.HasPrefix(name, CEXPrefix) || strings.HasPrefix(name, NitroPrefix)
}

// The DRA drivers' names: each ResourceSlice's spec.driver, the domain of
// its devices' attributes and capacity, and the CDI vendor of what a
// claim's containers get. The DeviceClasses of the same names select
// every device of a driver.
const (
	SGXDRADriver   = "sgx.cloister.dev"
	CEXDRADriver   = "cex.cloister.dev"
	NitroDRADriver = "nitro.cloister.dev"
)
