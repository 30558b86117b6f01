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

// A workload secret derives from a seed for its policy and id alone: the same
// pair derives the same key, any other pair another, including pairs
// whose joined text is the same.
func TestWorkload(t *testing.T) {
	s := seed.New()
	a := Workload(s, "shop", "db")
	if a.Kind != policy.SymmetricKey || len(a.Raw) != WorkloadSecretSize || len(a.Fields()["Hex"]) != 2*WorkloadSecretSize {
		t.Fatalf("workload secret: %+v", a)
	}
	if b := Workload(s, "shop", "db"); string(b.Raw) != string(a.Raw) {
		t.Error("the same policy and id derived another key")
	}
	seen := map[string]string{}
	for _, p := range [][2]string{{"shop", "db"}, {"shop", "db2"}, {"mall", "db"}, {"shop/db", "x"}, {"shop", "db/x"}, {"a/1:b", "c"}, {"a", "1:b/c"}} {
		k := string(Workload(s, p[0], p[1]).Raw)
		if other, ok := seen[k]; ok {
			t.Errorf("(%s, %s) and %s derive the same key", p[0], p[1], other)
		}
		seen[k] = p[0] + ", " + p[1]
		if WorkloadLabel(p[0], p[1]) == WorkloadLabel("shop", "db") && p != [2]string{"shop", "db"} {
			t.Errorf("(%s, %s) has (shop, db)'s label", p[0], p[1])
		}
	}
	if string(Workload(seed.New(), "shop", "db").Raw) == string(a.Raw) {
		t.Error("another seed derived the same key")
	}
}
