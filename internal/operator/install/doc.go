// Package install is `cloister install`: it checks that the operator and
// what it needs are in place in a cluster (namespace, CRDs at this
// version, the operator's release and Deployment with the expected image,
// the webhooks serving with a valid caBundle, pull secrets, the default
// SGXPlugin and LAS HEALTHY), says what is wrong one line per problem, and
// on request repairs it by installing or upgrading the embedded operator
// chart with the Helm SDK. Checking is separate from repairing: Check only
// reads.
package install
