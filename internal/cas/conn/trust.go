package conn

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"fmt"
	"io"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
)

// Trust is how a client outside the cluster trusts CAS: by a pinned
// certificate, or by CAS's evidence binding its TLS key.
type Trust struct {
	// CA is a pinned certificate (CAS's own, or a CA that issued it); with
	// it, evidence is not asked for.
	CA []byte
	// Expect is what CAS's evidence must meet (identities, TCB).
	Expect attest.Policy
	// InsecureSimulated trusts simulated evidence signed by SimKey (PEM):
	// development only.
	InsecureSimulated bool
	SimKey            string
	// TestRoots are test roots the evidence may chain to: tests only.
	TestRoots []*x509.Certificate
	// Warn is told when the trust taken is insecure.
	Warn io.Writer
}

// Client connects to CAS at url (over dial, when given) and trusts it as t
// says.
func (t Trust) Client(ctx context.Context, url string, dial casclient.DialFunc) (*casclient.Client, error) {
	if t.CA != nil {
		return casclient.New(url, t.CA, dial)
	}
	expect, err := t.expect()
	if err != nil {
		return nil, err
	}
	c, att, err := casclient.NewAttested(ctx, url, expect, dial)
	if err != nil {
		return nil, err
	}
	t.warn(att.Claims)
	return c, nil
}

// Vouched connects to CAS at url through a TLS-terminating proxy (whose
// certificate CA pins, or the system's roots) and trusts CAS by its
// statement over a fresh nonce and the evidence binding the key that
// signed it.
func (t Trust) Vouched(ctx context.Context, url string, dial casclient.DialFunc) (*casclient.Client, error) {
	expect, err := t.expect()
	if err != nil {
		return nil, err
	}
	c, v, _, err := casclient.NewVouched(ctx, url, t.CA, expect, dial)
	if err != nil {
		return nil, err
	}
	t.warn(v.Claims)
	return c, nil
}

func (t Trust) expect() (casclient.Expect, error) {
	expect := casclient.Expect{Policy: t.Expect}
	expect.Policy.AllowSimulation = t.InsecureSimulated
	expect.Verify.TestRoots = t.TestRoots
	if t.InsecureSimulated && t.SimKey != "" {
		k, err := keyfile.ParsePublic([]byte(t.SimKey))
		if err != nil {
			return expect, fmt.Errorf("CAS's simulation key: %w", err)
		}
		expect.Verify.SimKeys = []*ecdsa.PublicKey{k}
	}
	return expect, nil
}

func (t Trust) warn(claims *attest.Claims) {
	if claims.Insecure {
		_, _ = fmt.Fprintln(t.Warn, "warning: CAS is trusted by simulated evidence, which no TEE vouches for: insecure, for development only")
	}
	if claims.TestRoot {
		_, _ = fmt.Fprintf(t.Warn, "warning: CAS is trusted by %s evidence that chains to a test root, which no vendor vouches for: INSECURE, for tests only\n", claims.Type)
	}
}
