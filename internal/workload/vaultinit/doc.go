// Package vaultinit initialises a confidential Vault from inside its own
// pod's TEE, so no unseal key, recovery key or root token exists outside
// it: the first replica's bootstrap sidecar runs `operator init` against
// its local Vault, seals each recovery key to one owner (HPKE, the
// owners' policy keys) and keeps only that bundle (on the replica's claim,
// served to the operator, which stores it), configures the KV engine and
// the certificate login for the attested workloads of the Vault's
// namespace with the root token, then revokes it. Owners make a new root
// token, when they need one, with a quorum of their recovery keys.
package vaultinit
