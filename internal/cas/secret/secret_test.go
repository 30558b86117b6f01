package secret

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/pki"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seed"
)

// Each kind of secret gets material of its kind and size, a certificate
// one issued by the authority for the policy's name, and material stays
// only while the secret is as it was.
func TestMake(t *testing.T) {
	a, err := pki.New(seed.New(), "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range []*policy.Secret{
		{Name: "k", Kind: policy.SymmetricKey, Size: 16},
		{Name: "p", Kind: policy.Plain, Value: []byte("v")},
		{Name: "e", Kind: policy.ECDSACert, Size: 384},
	} {
		m, err := Make(a, "shop", sec, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", sec.Name, err)
		}
		f := m.Fields()
		switch sec.Kind {
		case policy.SymmetricKey:
			if len(m.Raw) != 16 || len(f["Hex"]) != 32 {
				t.Errorf("symmetric key: %d bytes, hex %q", len(m.Raw), f["Hex"])
			}
		case policy.Plain:
			if f["Raw"] != "v" {
				t.Errorf("plain: %q", f["Raw"])
			}
		case policy.ECDSACert:
			block, _ := pem.Decode([]byte(f["Cert"]))
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil || cert.Subject.CommonName != "shop/e" || f["Key"] == "" {
				t.Errorf("certificate: %v, %v", cert, err)
			}
		}
		raw, _ := json.Marshal(m)
		if !Keeps(raw, sec) {
			t.Errorf("%s: material for the same secret is not kept", sec.Name)
		}
		changed := *sec
		changed.Size = 32
		if sec.Kind == policy.Plain {
			changed.Value = []byte("w")
		}
		if Keeps(raw, &changed) {
			t.Errorf("%s: material for a changed secret is kept", sec.Name)
		}
	}
}
