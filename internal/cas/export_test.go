package cas

import "github.com/cloister-cc/cloister/internal/attest"

// What the package's external tests (package cas_test, which start CAS
// processes through castest) use of its unexported parts.
var (
	DerivedKeyFits    = derivedKeyFits
	GuestEvidenceOver = guestEvidenceOver
	NewSelfQuoter     = newSelfQuoter
	MustKey           = mustKey
	SimKeyFile        = simKeyFile
)

const (
	TLSKeyFile   = tlsKeyFile
	PeerInterval = peerInterval
)

// EvidenceOver is the quoter's evidence binding binding.
func (q *selfQuoter) EvidenceOver(binding []byte) (*attest.Evidence, error) {
	return q.evidenceOver(binding)
}
