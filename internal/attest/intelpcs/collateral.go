package intelpcs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-tdx-guest/pcs"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/memo"
)

// Collateral is Intel PCS data for a quote's platform: TCB info for its
// FMSPC, the QE identity, and the chain that signed both (PEM); and the
// CRLs of the PCK's CA and of the root CA (DER, PEM or hex), applied when
// given.
type Collateral struct {
	TCBInfo      []byte
	QEIdentity   []byte
	SigningChain []byte
	PCKCRL       []byte
	RootCRL      []byte
}

// Platform is what a verified quote says about the machine that made it.
type Platform struct {
	// PCK holds the FMSPC and platform TCB of the PCK certificate.
	PCK *pcs.PckExtensions
	// PCKChain is the PCK certificate and its CA (leaf first), for
	// revocation.
	PCKChain []*x509.Certificate
	// QE is the quoting enclave's report.
	QE Report
	// TDX is set for TDX quotes.
	TDX *TDXModule
}

// TDXModule is the TDX module's part of a TD report.
type TDXModule struct {
	TEETCBSVN []byte // 16 bytes: [0] module SVN, [1] module major version
	// TEETCBSVN2 (TD 1.5) is the running module's, when the TD was
	// launched under another (a TD-preserving update); nil for TD 1.0.
	TEETCBSVN2     []byte
	MRSIGNERSEAM   []byte // 48 bytes
	SEAMAttributes []byte // 8 bytes
}

// Verdict is the platform's TCB status and the window in which the
// collateral and its signing chain are valid.
type Verdict struct {
	Status              string
	NotBefore, NotAfter time.Time
}

// tcbInfo is the part of Intel's TCB info (v2, v3; SGX and TDX) the
// verdict needs.
type tcbInfo struct {
	ID                  string           `json:"id"` // v3: SGX or TDX
	Version             int              `json:"version"`
	IssueDate           time.Time        `json:"issueDate"`
	NextUpdate          time.Time        `json:"nextUpdate"`
	FMSPC               string           `json:"fmspc"`
	TCBEvaluation       int              `json:"tcbEvaluationDataNumber"`
	TCBLevels           []tcbLevel       `json:"tcbLevels"`
	TDXModule           *moduleIdentity  `json:"tdxModule"`
	TDXModuleIdentities []moduleIdentity `json:"tdxModuleIdentities"`
}

type svn struct {
	SVN byte `json:"svn"`
}

type tcbLevel struct {
	TCB struct {
		SGXComponents []svn  `json:"sgxtcbcomponents"`
		TDXComponents []svn  `json:"tdxtcbcomponents"`
		PCESVN        uint16 `json:"pcesvn"`
		ISVSVN        uint16 `json:"isvsvn"`
	} `json:"tcb"`
	TCBStatus string `json:"tcbStatus"`
}

// moduleIdentity is a TDX module's expected signer and attributes, with
// its own TCB levels (by module SVN) in TCB info v3.
type moduleIdentity struct {
	ID             string     `json:"id"`
	MRSIGNER       string     `json:"mrsigner"`
	Attributes     string     `json:"attributes"`
	AttributesMask string     `json:"attributesMask"`
	TCBLevels      []tcbLevel `json:"tcbLevels"`
}

// qeIdentity is the part of Intel's QE identity (v2) the verdict needs.
type qeIdentity struct {
	ID             string     `json:"id"` // QE (SGX) or TD_QE (TDX)
	IssueDate      time.Time  `json:"issueDate"`
	NextUpdate     time.Time  `json:"nextUpdate"`
	MiscSelect     string     `json:"miscselect"`
	MiscSelectMask string     `json:"miscselectMask"`
	Attributes     string     `json:"attributes"`
	AttributesMask string     `json:"attributesMask"`
	MRSIGNER       string     `json:"mrsigner"`
	ISVProdID      uint16     `json:"isvprodid"`
	TCBEvaluation  int        `json:"tcbEvaluationDataNumber"`
	TCBLevels      []tcbLevel `json:"tcbLevels"`
}

// Version is what says how recent verified collateral is: Intel's TCB
// evaluation data number of its TCB info (for an FMSPC) and of its QE
// identity (for a quoting enclave), which a TCB recovery raises.
type Version struct {
	// TEE is "SGX" or "TDX" (the TCB info's id); QE the QE identity's
	// ("QE", "TD_QE").
	TEE, FMSPC, QE      string
	TCBInfo, QEIdentity int
}

// VersionOf checks the collateral's signing chain to root and its
// signatures, and returns its version: a cache raises its marks only on
// collateral Intel signed. Whether Intel signed it does not depend on the
// time: the chain is checked when all of it was valid, and the verifier
// judges the dates.
func VersionOf(c Collateral, root *x509.Certificate) (Version, error) {
	if root == nil {
		root = Root()
	}
	chain, err := ParseChain("TCB signing chain", c.SigningChain)
	if err != nil {
		return Version{}, err
	}
	at := root.NotBefore
	for _, cert := range chain {
		at = attest.Later(at, cert.NotBefore)
	}
	s, _, _, err := verifyCollateral(c, root, at)
	if err != nil {
		return Version{}, err
	}
	return Version{TEE: orSGX(s.info.ID), FMSPC: strings.ToUpper(s.info.FMSPC), QE: orQE(s.qe.ID), TCBInfo: s.info.TCBEvaluation, QEIdentity: s.qe.TCBEvaluation}, nil
}

func orQE(id string) string {
	if id == "" {
		return "QE"
	}
	return id
}

// Judge checks the collateral (signatures, chain to root, validity at the
// given time, that it is for this platform and quoting enclave), applies
// its CRLs (which requireCRLs makes required) and returns the platform's
// TCB status, converged with the quoting enclave's and, for TDX, the TDX
// module's.
func Judge(p Platform, c Collateral, at time.Time, root *x509.Certificate, requireCRLs bool) (*Verdict, error) {
	if len(c.TCBInfo) == 0 || len(c.QEIdentity) == 0 || len(c.SigningChain) == 0 {
		return nil, attest.Reject(attest.CheckCollateral, "TCB info, QE identity and their signing chain are required (--collateral DIR)")
	}
	signed, nb, na, err := verifyCollateral(c, root, at)
	if err != nil {
		return nil, err
	}
	info, qe := &signed.info, &signed.qe
	crlNext, err := revocation(p.PCKChain, signed.chain, root, c, at, requireCRLs)
	if err != nil {
		return nil, err
	}
	na = attest.Earlier(na, crlNext)
	// Collateral for another TEE or platform is named as such, even when
	// its dates are also wrong.
	if err := forQuote(p, info, qe); err != nil {
		return nil, err
	}
	for _, w := range []struct {
		what           string
		issued, update time.Time
	}{{"TCB info", info.IssueDate, info.NextUpdate}, {"QE identity", qe.IssueDate, qe.NextUpdate}} {
		if at.Before(w.issued) || at.After(w.update) {
			return nil, attest.Reject(attest.CheckValidity, "%s is issued %s with next update %s, not valid at %s",
				w.what, w.issued.UTC().Format(time.RFC3339), w.update.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339))
		}
		nb, na = attest.Later(nb, w.issued), attest.Earlier(na, w.update)
	}
	if err := matchQE(qe, p.QE); err != nil {
		return nil, err
	}
	qeSVN := p.QE.ISVSVN()
	qeStatus := levelStatus(qe.TCBLevels, func(l *tcbLevel) bool { return qeSVN >= l.TCB.ISVSVN })
	status, err := tdStatus(p, info, qeStatus)
	if err != nil {
		return nil, err
	}
	return &Verdict{Status: status, NotBefore: nb, NotAfter: na}, nil
}

// tdStatus is the platform's TCB status, with a TD's module and the
// quoting enclave's converged in. A TD 1.5 report whose module was
// updated under the running TD (TEE_TCB_SVN2 not TEE_TCB_SVN) is judged
// by both: the module it was launched and measured under, and the one
// running now; a relaunch is advised when only the first is out of date
// (Intel's QVL, TDRelaunchCheck). A TEE_TCB_SVN2 of zeros is none.
func tdStatus(p Platform, info *tcbInfo, qeStatus string) (string, error) {
	if p.TDX == nil {
		return platformStatus(p, info, nil, qeStatus)
	}
	launch, err := platformStatus(p, info, p.TDX.TEETCBSVN, qeStatus)
	if err != nil || allZero(p.TDX.TEETCBSVN2) || bytes.Equal(p.TDX.TEETCBSVN2, p.TDX.TEETCBSVN) {
		return launch, err
	}
	current, err := platformStatus(p, info, p.TDX.TEETCBSVN2, qeStatus)
	if err != nil {
		return "", fmt.Errorf("the TDX module now running (TEE_TCB_SVN2 %x): %w", p.TDX.TEETCBSVN2, err)
	}
	return relaunch(launch, current), nil
}

// platformStatus is the platform's TCB status with the TDX module of
// TCB SVN tee (nil for SGX), converged with the module's and the quoting
// enclave's.
func platformStatus(p Platform, info *tcbInfo, tee []byte, qeStatus string) (string, error) {
	status, err := levelOf(p, info, tee)
	if err != nil {
		return "", err
	}
	if tee != nil {
		module, err := moduleStatus(p.TDX, tee, info)
		if err != nil {
			return "", err
		}
		status = converge(status, module)
	}
	if qeStatus == "" {
		return "", attest.Reject(attest.CheckTCB, "the quoting enclave's ISVSVN %d is below every TCB level of the QE identity", p.QE.ISVSVN())
	}
	return converge(status, qeStatus), nil
}

// relaunch is the status of a TD launched under a module of status launch
// and now running one of status current: a relaunch is advised when the
// first is out of date and the second is not.
func relaunch(launch, current string) string {
	if launch != attest.TCBOutOfDate && launch != attest.TCBOutOfDateConfigurationNeeded {
		return launch
	}
	switch current {
	case attest.TCBUpToDate, attest.TCBSWHardeningNeeded:
		if launch == attest.TCBOutOfDateConfigurationNeeded {
			return attest.TCBTDRelaunchAdvisedConfigurationNeeded
		}
		return attest.TCBTDRelaunchAdvised
	case attest.TCBConfigurationNeeded, attest.TCBConfigurationAndSWHardeningNeeded:
		return attest.TCBTDRelaunchAdvisedConfigurationNeeded
	}
	return launch
}

// signedCollateral is collateral whose signatures verified, decoded.
type signedCollateral struct {
	chain []*x509.Certificate
	info  tcbInfo
	qe    qeIdentity
}

// verifiedCollateral holds collateral (by its bytes and the root) whose
// chain and signatures verified: every quote of a platform is judged by
// the same until the next update.
var verifiedCollateral = memo.New[*signedCollateral](256)

// verifyCollateral checks the signing chain to root at the given time and
// the TCB info's and QE identity's signatures (once per collateral and
// root), and returns them decoded with the chain's validity window.
func verifyCollateral(c Collateral, root *x509.Certificate, at time.Time) (*signedCollateral, time.Time, time.Time, error) {
	if s, ok := verifiedCollateral.Find(c.TCBInfo, c.QEIdentity, c.SigningChain, root.Raw); ok {
		nb, na, err := attest.ValidAt("TCB signing chain", append(s.chain[:len(s.chain):len(s.chain)], root), at)
		return s, nb, na, err
	}
	chain, err := ParseChain("TCB signing chain", c.SigningChain)
	if err != nil {
		return nil, time.Time{}, time.Time{}, err
	}
	nb, na, err := attest.VerifyChain("TCB signing chain", chain, root, at)
	if err != nil {
		return nil, nb, na, err
	}
	signer, ok := chain[0].PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return nil, nb, na, attest.Reject(attest.CheckCollateral, "the TCB signing key is %T, want ECDSA", chain[0].PublicKey)
	}
	s := &signedCollateral{chain: chain}
	if err := signedJSON("TCB info", c.TCBInfo, "tcbInfo", signer, &s.info); err != nil {
		return nil, nb, na, err
	}
	if err := signedJSON("QE identity", c.QEIdentity, "enclaveIdentity", signer, &s.qe); err != nil {
		return nil, nb, na, err
	}
	verifiedCollateral.Keep(s, c.TCBInfo, c.QEIdentity, c.SigningChain, root.Raw)
	return s, nb, na, nil
}

// forQuote checks the collateral is for the quote's kind of TEE and its
// platform: SGX TCB info cannot judge a TD, nor one FMSPC another.
func forQuote(p Platform, info *tcbInfo, qe *qeIdentity) error {
	wantInfo, wantQE := "SGX", "QE"
	if p.TDX != nil {
		wantInfo, wantQE = "TDX", "TD_QE"
	}
	if info.ID != wantInfo && (info.ID != "" || p.TDX != nil) { // v2 SGX TCB info has no id
		return attest.Reject(attest.CheckCollateral, "the TCB info is for %s, the quote is %s: give the %s TCB info", orSGX(info.ID), wantInfo, wantInfo)
	}
	if qe.ID != "" && qe.ID != wantQE {
		return attest.Reject(attest.CheckCollateral, "the QE identity is %s's, the quote's quoting enclave is %s: give the %s identity", qe.ID, wantQE, wantQE)
	}
	if !strings.EqualFold(info.FMSPC, p.PCK.FMSPC) {
		return attest.Reject(attest.CheckCollateral, "TCB info is for FMSPC %s, the platform's is %s", info.FMSPC, p.PCK.FMSPC)
	}
	return nil
}

func orSGX(id string) string {
	if id == "" {
		return "SGX"
	}
	return id
}

// levelOf is the status of the first (highest) TCB level the platform's
// SVNs (and a TD's module's, tee) all reach.
func levelOf(p Platform, info *tcbInfo, tee []byte) (string, error) {
	status := levelStatus(info.TCBLevels, func(l *tcbLevel) bool {
		if !reaches(p.PCK.TCB.CPUSvnComponents, l.TCB.SGXComponents, 0) || p.PCK.TCB.PCESvn < l.TCB.PCESVN {
			return false
		}
		if tee == nil {
			return true
		}
		// With module identities (v3) and a module major version, the
		// module's SVNs (bytes 0 and 1) are judged by its identity's
		// levels, not here.
		from := 0
		if info.Version >= 3 && tee[1] > 0 {
			from = 2
		}
		return reaches(tee, l.TCB.TDXComponents, from)
	})
	if status == "" {
		return "", attest.Reject(attest.CheckTCB, "the platform's TCB (PCESVN %d) is below every TCB level of FMSPC %s", p.PCK.TCB.PCESvn, info.FMSPC)
	}
	return status, nil
}

// reaches says whether every SVN from index from on is at least the
// level's.
func reaches(have []byte, level []svn, from int) bool {
	if len(level) != len(have) {
		return false
	}
	for i := from; i < len(level); i++ {
		if have[i] < level[i].SVN {
			return false
		}
	}
	return true
}

// levelStatus is the status of the first (highest) level that matches.
func levelStatus(levels []tcbLevel, match func(*tcbLevel) bool) string {
	for i := range levels {
		if match(&levels[i]) {
			return levels[i].TCBStatus
		}
	}
	return ""
}

// converge folds a component's status (quoting enclave, TDX module) into
// the platform's, as Intel's Quote Verification Library does: an outdated
// component makes the platform out of date, a revoked one revoked.
func converge(platform, component string) string {
	switch component {
	case attest.TCBOutOfDate:
		switch platform {
		case attest.TCBUpToDate, attest.TCBSWHardeningNeeded:
			return attest.TCBOutOfDate
		case attest.TCBConfigurationNeeded, attest.TCBConfigurationAndSWHardeningNeeded:
			return attest.TCBOutOfDateConfigurationNeeded
		}
	case attest.TCBRevoked:
		return attest.TCBRevoked
	}
	return platform
}

// signedJSON verifies Intel's signature (raw r||s, hex) over the exact
// bytes of the field's JSON value and decodes it into out.
func signedJSON(what string, doc []byte, field string, signer *ecdsa.PublicKey, out any) error {
	var env map[string]json.RawMessage
	if err := json.Unmarshal(doc, &env); err != nil {
		return attest.Reject(attest.CheckCollateral, "%s: %v", what, err)
	}
	body, sigHex := env[field], env["signature"]
	var sigStr string
	if body == nil || json.Unmarshal(sigHex, &sigStr) != nil {
		return attest.Reject(attest.CheckCollateral, "%s: want the fields %q and \"signature\"", what, field)
	}
	sig, err := hex.DecodeString(sigStr)
	if err != nil || !VerifyRS(signer, body, sig) {
		return attest.Reject(attest.CheckCollateral, "the %s signature does not verify with the TCB signing certificate", what)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return attest.Reject(attest.CheckCollateral, "%s: %v", what, err)
	}
	return nil
}

// Source finds the collateral for a platform, given its TEE ("sgx" or
// "tdx"), its FMSPC (hex) and the CA that issued its PCK ("processor" or
// "platform"). What it returns is checked like any collateral: a source
// can deny a quote, never admit one.
type Source interface {
	Collateral(tee, fmspc, ca string) (Collateral, error)
}

// For is the collateral for a platform: the source's when there is one,
// else fixed.
func For(src Source, fixed Collateral, tee string, pck *PCK) (Collateral, error) {
	if src == nil {
		return fixed, nil
	}
	ca, err := CAOf(pck.Certs)
	if err != nil {
		return Collateral{}, err
	}
	c, err := src.Collateral(tee, pck.Ext.FMSPC, ca)
	if err != nil {
		return Collateral{}, attest.Reject(attest.CheckCollateral, "collateral for %s FMSPC %s (PCK %s CA): %v", strings.ToUpper(tee), pck.Ext.FMSPC, ca, err)
	}
	return c, nil
}

// CAOf names the CA that issued a PCK certificate as Intel PCS does.
func CAOf(pck []*x509.Certificate) (string, error) {
	if len(pck) < 2 {
		return "", attest.Reject(attest.CheckChain, "the PCK certificate chain has no issuing CA")
	}
	switch cn := pck[1].Subject.CommonName; cn {
	case "Intel SGX PCK Processor CA":
		return "processor", nil
	case "Intel SGX PCK Platform CA":
		return "platform", nil
	default:
		return "", attest.Reject(attest.CheckChain, "the PCK certificate is issued by %q, not a PCK CA Intel PCS names", cn)
	}
}
