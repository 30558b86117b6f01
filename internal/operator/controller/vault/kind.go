// Package vault is the Vault controller: the shared service reconciler
// with the Vault chart (a StatefulSet of confidential pods with raft
// storage on claims, attested to CAS by the initializer, which brings
// their certificates and Vault's configuration), the CAS policy its
// owners sign, and a status read from each replica's own API over TLS
// that only CAS's certificate for the Vault's service passes.
package vault

// ContainerName is the Vault server's container in each pod.
const ContainerName = "vault"
