package common

// Labels users put on their own objects to ask something of the operator.
const (
	// LabelPullSecretRequest on a namespace names the pull secret of the
	// operator's namespace it wants a copy of.
	LabelPullSecretRequest = "cloister.dev/pull-secret" //nolint:gosec // a label name, not a credential
	// LabelShareable on a secret in the operator's namespace allows copies
	// of it into the namespaces that ask.
	LabelShareable = "cloister.dev/shareable"
	// LabelManagedNamespace=true on a namespace lets the operator deploy
	// there (its home namespace needs none). An administrator sets it: the
	// chart's admission policy refuses the operator's writes in any other
	// namespace, so a stolen operator token cannot start a pod in a
	// tenant's namespace, and never in kube-system.
	LabelManagedNamespace = "cloister.dev/managed"
)

// The label the operator puts on every object it writes outside its own
// namespace (not app.kubernetes.io/managed-by, which Helm sets to "Helm").
// The chart's ValidatingAdmissionPolicy lets the operator's service account
// create, change and delete there only objects that carry it (or, for
// objects an older operator made, a controller reference to a Cloister
// resource): the operator cannot be made to overwrite or delete what is
// not its own.
const (
	LabelManagedBy    = "cloister.dev/managed-by"
	ManagedByOperator = "cloister-operator"
)
