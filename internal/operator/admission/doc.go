// Package admission owns the operator's admission webhooks: what CEL in the
// CRDs cannot check (policies that do not parse, malformed signatures and
// keys, CEXPlugin config sets sharing an APQN), defaults that depend on the
// cluster (the operator's namespace), and opt-in injection of TEE devices
// and the node's LAS address into pods. The checks are pure functions,
// tested without a cluster; setup.go serves them from the manager's
// webhook server.
//
// Pods are mutated only when they ask for it (the LabelInject label, which
// the webhook configuration's objectSelector matches) and with
// failurePolicy Ignore, so a stopped operator never blocks an unrelated
// workload; the webhooks on Cloister's own kinds fail closed.
package admission
