package common

// Labels users put on their own objects to ask something of the operator.
const (
	// LabelPullSecretRequest on a namespace names the pull secret of the
	// operator's namespace it wants a copy of.
	LabelPullSecretRequest = "cloister.dev/pull-secret" //nolint:gosec // a label name, not a credential
	// LabelShareable on a secret in the operator's namespace allows copies
	// of it into the namespaces that ask.
	LabelShareable = "cloister.dev/shareable"
)
