package producetest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-tdx-guest/pcs"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
	"github.com/cloister-cc/cloister/internal/attest/sgx"
)

// SGXSigner is a platform's quoting enclave under a test root: it turns
// an enclave's report body into an SGX DCAP quote (v3, ECDSA-P256, PCK
// chain) as Intel's QE does, and gives the Intel PCS collateral (TCB info,
// QE identity) that judges the platform, all signed under a test root
// named as such, never Intel's.
type SGXSigner struct {
	root, pckCA, pck, tcbSigning *x509.Certificate
	pckKey, tcbKey, attKey       *ecdsa.PrivateKey
	now                          time.Time

	// FMSPC, PCESVN and CPUSVN are the platform's, in its PCK certificate.
	FMSPC  [6]byte
	PCESVN uint16
	CPUSVN [16]byte
	// QESVN is the quoting enclave's ISVSVN.
	QESVN uint16
}

// The test QE's identity: Intel's QE is ISVPRODID 1; its MRSIGNER here is
// a test value.
var testQESigner = sha256.Sum256([]byte("cloister test quoting enclave signer"))

// qeVendorIntel is the QE vendor id of Intel's quoting enclave.
var qeVendorIntel = mustHex("939a7233f79c4ca9940a0db3957f0607")

// NewSGXSigner makes a platform whose certificates are valid from an hour
// before now for a year.
func NewSGXSigner(now time.Time) (*SGXSigner, error) {
	s := &SGXSigner{now: now, FMSPC: [6]byte{0x00, 0x90, 0x6e, 0xd5, 0x00, 0x00}, PCESVN: 13, QESVN: 8}
	for i := range s.CPUSVN {
		s.CPUSVN[i] = 4
	}
	keys := make([]*ecdsa.PrivateKey, 5)
	for i := range keys {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	rootKey, pckCAKey := keys[0], keys[1]
	s.pckKey, s.tcbKey, s.attKey = keys[2], keys[3], keys[4]
	var err error
	if s.root, err = s.cert("Cloister test SGX Root CA (INSECURE)", true, nil, nil, rootKey, rootKey, nil); err != nil {
		return nil, err
	}
	// Intel PCS names the PCK's CA by this name (intelpcs.CAOf).
	if s.pckCA, err = s.cert("Intel SGX PCK Platform CA", true, s.root, rootKey, pckCAKey, nil, nil); err != nil {
		return nil, err
	}
	sgxExt, err := s.pckExtension()
	if err != nil {
		return nil, err
	}
	if s.pck, err = s.cert("Intel SGX PCK Certificate", false, s.pckCA, pckCAKey, s.pckKey, nil, []pkix.Extension{{Id: pcs.OidSgxExtension, Value: sgxExt}}); err != nil {
		return nil, err
	}
	if s.tcbSigning, err = s.cert("Intel SGX TCB Signing", false, s.root, rootKey, s.tcbKey, nil, nil); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *SGXSigner) cert(cn string, ca bool, parent *x509.Certificate, parentKey, key, self *ecdsa.PrivateKey, ext []pkix.Extension) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn, Organization: []string{"Cloister tests (INSECURE)"}},
		NotBefore: s.now.Add(-time.Hour), NotAfter: s.now.Add(365 * 24 * time.Hour),
		BasicConstraintsValid: true, IsCA: ca, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageContentCommitment,
		ExtraExtensions: ext,
	}
	if ca {
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	} else {
		// A PCK certificate has six extensions (go-tdx-guest counts them):
		// these, key usage, basic constraints and the SGX extension.
		id := sha256.Sum256(elliptic.MarshalCompressed(elliptic.P256(), key.X, key.Y))
		tmpl.SubjectKeyId = id[:20]
		tmpl.CRLDistributionPoints = []string{"https://crl.invalid/pck"}
	}
	if self != nil {
		parent, parentKey = tmpl, self
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// pckExtension is the SGX extension of a PCK certificate: PPID, TCB
// (sixteen component SVNs, PCESVN, CPUSVN), PCE-ID, FMSPC, SGX type.
func (s *SGXSigner) pckExtension() ([]byte, error) {
	oid := func(arcs ...int) asn1.ObjectIdentifier {
		return append(asn1.ObjectIdentifier{1, 2, 840, 113741, 1, 13, 1}, arcs...)
	}
	pair := func(id asn1.ObjectIdentifier, v any) (asn1.RawValue, error) {
		val, err := asn1.Marshal(v)
		if err != nil {
			return asn1.RawValue{}, err
		}
		b, err := asn1.Marshal(struct {
			ID  asn1.ObjectIdentifier
			Val asn1.RawValue
		}{id, asn1.RawValue{FullBytes: val}})
		return asn1.RawValue{FullBytes: b}, err
	}
	var tcb []asn1.RawValue
	for i, svn := range s.CPUSVN {
		p, err := pair(oid(2, i+1), int(svn))
		if err != nil {
			return nil, err
		}
		tcb = append(tcb, p)
	}
	pce, err := pair(oid(2, 17), int(s.PCESVN))
	if err != nil {
		return nil, err
	}
	cpu, err := pair(oid(2, 18), s.CPUSVN[:])
	if err != nil {
		return nil, err
	}
	tcb = append(tcb, pce, cpu)
	var out []asn1.RawValue
	for _, p := range []struct {
		id asn1.ObjectIdentifier
		v  any
	}{{oid(1), bytes.Repeat([]byte{0x5a}, 16)}, {oid(2), tcb}, {oid(3), []byte{0, 0}}, {oid(4), s.FMSPC[:]}, {oid(5), asn1.Enumerated(0)}} {
		r, err := pair(p.id, p.v)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return asn1.Marshal(out)
}

// Root is the test root every quote and collateral chains to.
func (s *SGXSigner) Root() *x509.Certificate { return s.root }

// RootPEM is Root as PEM, for a verifier's test roots.
func (s *SGXSigner) RootPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.root.Raw})
}

// TargetInfo is the quoting enclave's TARGETINFO (512 bytes): the
// MRENCLAVE, ATTRIBUTES and MISCSELECT an enclave targets its REPORT at.
func (s *SGXSigner) TargetInfo() []byte {
	ti := make([]byte, 512)
	mr := sha256.Sum256([]byte("cloister test quoting enclave"))
	copy(ti[0:], mr[:])
	copy(ti[32:], qeAttributes)
	return ti
}

// qeAttributes: INIT and MODE64BIT, XFRM x87 and SSE; no DEBUG.
var qeAttributes = mustHex("15000000000000000300000000000000")

// Quote is a v3 quote over an enclave's 384-byte report body, signed by
// the attestation key the test QE certifies with its PCK.
func (s *SGXSigner) Quote(body []byte) ([]byte, error) {
	if len(body) != intelpcs.ReportLen {
		return nil, fmt.Errorf("report body of %d bytes, want %d", len(body), intelpcs.ReportLen)
	}
	header := make([]byte, 48)
	binary.LittleEndian.PutUint16(header[0:], 3) // version
	binary.LittleEndian.PutUint16(header[2:], 2) // ECDSA-P256
	binary.LittleEndian.PutUint16(header[8:], s.QESVN)
	binary.LittleEndian.PutUint16(header[10:], s.PCESVN)
	copy(header[12:], qeVendorIntel)
	signed := append(header, body...)
	sig, err := signRS(s.attKey, signed)
	if err != nil {
		return nil, err
	}
	attKey := append(s.attKey.X.FillBytes(make([]byte, 32)), s.attKey.Y.FillBytes(make([]byte, 32))...)
	qeAuth := []byte("cloister test QE authentication data")
	qeReport := make([]byte, intelpcs.ReportLen)
	copy(qeReport[48:], qeAttributes)
	copy(qeReport[128:], testQESigner[:])
	binary.LittleEndian.PutUint16(qeReport[256:], 1) // ISVPRODID
	binary.LittleEndian.PutUint16(qeReport[258:], s.QESVN)
	bind := sha256.Sum256(append(append([]byte(nil), attKey...), qeAuth...))
	copy(qeReport[320:], bind[:])
	qeSig, err := signRS(s.pckKey, qeReport)
	if err != nil {
		return nil, err
	}
	var chain []byte
	for _, c := range []*x509.Certificate{s.pck, s.pckCA, s.root} {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	var sd bytes.Buffer
	sd.Write(sig)
	sd.Write(attKey)
	sd.Write(qeReport)
	sd.Write(qeSig)
	_ = binary.Write(&sd, binary.LittleEndian, uint16(len(qeAuth))) //nolint:gosec // a constant of 37 bytes
	sd.Write(qeAuth)
	_ = binary.Write(&sd, binary.LittleEndian, uint16(5))
	_ = binary.Write(&sd, binary.LittleEndian, uint32(len(chain))) //nolint:gosec // three certificates, a few KiB
	sd.Write(chain)
	out := append(signed, binary.LittleEndian.AppendUint32(nil, uint32(sd.Len()))...) //nolint:gosec // a few KiB
	return append(out, sd.Bytes()...), nil
}

// Collateral is the platform's TCB info and the QE identity, both
// UpToDate for its SVNs, valid from an hour before now for thirty days,
// and their signing chain.
func (s *SGXSigner) Collateral() (intelpcs.Collateral, error) {
	issued, next := s.now.Add(-time.Hour).UTC().Format(time.RFC3339), s.now.Add(30*24*time.Hour).UTC().Format(time.RFC3339)
	comps := make([]map[string]int, 16)
	for i, v := range s.CPUSVN {
		comps[i] = map[string]int{"svn": int(v)}
	}
	info, err := s.signedJSON("tcbInfo", map[string]any{
		"id": "SGX", "version": 3, "issueDate": issued, "nextUpdate": next, "fmspc": hex.EncodeToString(s.FMSPC[:]),
		"pceId": "0000", "tcbType": 0, "tcbEvaluationDataNumber": 17,
		"tcbLevels": []any{map[string]any{"tcb": map[string]any{"sgxtcbcomponents": comps, "pcesvn": s.PCESVN}, "tcbDate": issued, "tcbStatus": "UpToDate"}},
	})
	if err != nil {
		return intelpcs.Collateral{}, err
	}
	qe, err := s.signedJSON("enclaveIdentity", map[string]any{
		"id": "QE", "version": 2, "issueDate": issued, "nextUpdate": next, "tcbEvaluationDataNumber": 17,
		"miscselect": "00000000", "miscselectMask": "FFFFFFFF",
		"attributes": "11000000000000000000000000000000", "attributesMask": "FBFFFFFFFFFFFFFF0000000000000000",
		"mrsigner": hex.EncodeToString(testQESigner[:]), "isvprodid": 1,
		"tcbLevels": []any{map[string]any{"tcb": map[string]any{"isvsvn": s.QESVN}, "tcbDate": issued, "tcbStatus": "UpToDate"}},
	})
	if err != nil {
		return intelpcs.Collateral{}, err
	}
	var chain []byte
	for _, c := range []*x509.Certificate{s.tcbSigning, s.root} {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return intelpcs.Collateral{TCBInfo: info, QEIdentity: qe, SigningChain: chain}, nil
}

// signedJSON wraps body as Intel PCS does: {field: body, "signature":
// hex r||s over body's exact bytes}.
func (s *SGXSigner) signedJSON(field string, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	sig, err := signRS(s.tcbKey, b)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{field: json.RawMessage(b), "signature": hex.EncodeToString(sig)})
}

// signRS signs SHA-256(msg) as r||s, the form of quote signatures.
func signRS(k *ecdsa.PrivateKey, msg []byte) ([]byte, error) {
	d := sha256.Sum256(msg)
	r, sv, err := ecdsa.Sign(rand.Reader, k, d[:])
	if err != nil {
		return nil, err
	}
	return append(r.FillBytes(make([]byte, 32)), sv.FillBytes(make([]byte, 32))...), nil
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// WriteCollateral lays out Collateral in dir as the CLI's --collateral
// and CAS's --collateral-dir read it, and the test root beside dir as
// sgx-test-roots.pem; it returns the roots file.
func (s *SGXSigner) WriteCollateral(dir string) (string, error) {
	col, err := s.Collateral()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{"tcb_info.json": col.TCBInfo, "qe_identity.json": col.QEIdentity, "tcb_signing_certs.pem": col.SigningChain} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return "", err
		}
	}
	roots := filepath.Join(filepath.Dir(dir), "sgx-test-roots.pem")
	return roots, os.WriteFile(roots, s.RootPEM(), 0o600)
}

// Verify verifies a quote as CAS would with this platform's collateral,
// trusting the test root.
func (s *SGXSigner) Verify(quote []byte, at time.Time) (*attest.Claims, error) {
	col, err := s.Collateral()
	if err != nil {
		return nil, err
	}
	return sgx.Verify(quote, sgx.Options{At: at, Collateral: col, TestRoots: []*x509.Certificate{s.root}})
}

// EnclaveBody is an enclave's report body: a 64-bit release enclave
// (MODE64BIT; XFRM x87 and SSE) whose MRENCLAVE and MRSIGNER are the bytes
// given, repeated; its report data is zeros.
func EnclaveBody(mrenclave, mrsigner byte) []byte {
	b := make([]byte, intelpcs.ReportLen)
	copy(b[48:], []byte{0x04, 0, 0, 0, 0, 0, 0, 0, 0x03})
	copy(b[64:], bytes.Repeat([]byte{mrenclave}, 32))
	copy(b[128:], bytes.Repeat([]byte{mrsigner}, 32))
	return b
}
