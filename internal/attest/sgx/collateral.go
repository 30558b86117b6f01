package sgx

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/google/go-tdx-guest/pcs"

	"github.com/cloister-cc/cloister/internal/attest"
)

// tcbInfo is the part of Intel's TCB info (v3) the verdict needs.
type tcbInfo struct {
	IssueDate  time.Time  `json:"issueDate"`
	NextUpdate time.Time  `json:"nextUpdate"`
	FMSPC      string     `json:"fmspc"`
	TCBLevels  []tcbLevel `json:"tcbLevels"`
}

type tcbLevel struct {
	TCB struct {
		SGXComponents []struct {
			SVN byte `json:"svn"`
		} `json:"sgxtcbcomponents"`
		PCESVN uint16 `json:"pcesvn"`
		ISVSVN uint16 `json:"isvsvn"`
	} `json:"tcb"`
	TCBStatus string `json:"tcbStatus"`
}

// qeIdentity is the part of Intel's QE identity (v2) the verdict needs.
type qeIdentity struct {
	IssueDate      time.Time  `json:"issueDate"`
	NextUpdate     time.Time  `json:"nextUpdate"`
	MiscSelect     string     `json:"miscselect"`
	MiscSelectMask string     `json:"miscselectMask"`
	Attributes     string     `json:"attributes"`
	AttributesMask string     `json:"attributesMask"`
	MRSIGNER       string     `json:"mrsigner"`
	ISVProdID      uint16     `json:"isvprodid"`
	TCBLevels      []tcbLevel `json:"tcbLevels"`
}

type tcbVerdict struct {
	status              string
	notBefore, notAfter time.Time
}

// judgeTCB checks the collateral and finds the TCB status of the PCK
// certificate's platform TCB and of the QE.
func judgeTCB(ext *pcs.PckExtensions, qeReport []byte, opts Options, root *x509.Certificate) (*tcbVerdict, error) {
	c := opts.Collateral
	if len(c.TCBInfo) == 0 || len(c.QEIdentity) == 0 || len(c.SigningChain) == 0 {
		return nil, attest.Reject(attest.CheckCollateral, "TCB info, QE identity and their signing chain are required (--collateral DIR)")
	}
	chain, err := parseChain("TCB signing chain", c.SigningChain)
	if err != nil {
		return nil, err
	}
	nb, na, err := attest.VerifyChain("TCB signing chain", chain, root, opts.At)
	if err != nil {
		return nil, err
	}
	signer, ok := chain[0].PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return nil, attest.Reject(attest.CheckCollateral, "the TCB signing key is %T, want ECDSA", chain[0].PublicKey)
	}
	var info tcbInfo
	if err := signedJSON("TCB info", c.TCBInfo, "tcbInfo", signer, &info); err != nil {
		return nil, err
	}
	var qe qeIdentity
	if err := signedJSON("QE identity", c.QEIdentity, "enclaveIdentity", signer, &qe); err != nil {
		return nil, err
	}
	for _, w := range []struct {
		what           string
		issued, update time.Time
	}{{"TCB info", info.IssueDate, info.NextUpdate}, {"QE identity", qe.IssueDate, qe.NextUpdate}} {
		if opts.At.Before(w.issued) || opts.At.After(w.update) {
			return nil, attest.Reject(attest.CheckValidity, "%s is issued %s with next update %s, not valid at %s",
				w.what, w.issued.UTC().Format(time.RFC3339), w.update.UTC().Format(time.RFC3339), opts.At.UTC().Format(time.RFC3339))
		}
		nb, na = attest.Later(nb, w.issued), attest.Earlier(na, w.update)
	}
	if !strings.EqualFold(info.FMSPC, ext.FMSPC) {
		return nil, attest.Reject(attest.CheckCollateral, "TCB info is for FMSPC %s, the platform's is %s", info.FMSPC, ext.FMSPC)
	}
	if err := matchQE(&qe, qeReport); err != nil {
		return nil, err
	}
	platform := levelStatus(info.TCBLevels, func(l *tcbLevel) bool {
		if len(l.TCB.SGXComponents) != len(ext.TCB.CPUSvnComponents) || ext.TCB.PCESvn < l.TCB.PCESVN {
			return false
		}
		for i, c := range l.TCB.SGXComponents {
			if ext.TCB.CPUSvnComponents[i] < c.SVN {
				return false
			}
		}
		return true
	})
	if platform == "" {
		return nil, attest.Reject(attest.CheckTCB, "the platform's TCB (PCESVN %d) is below every TCB level of FMSPC %s", ext.TCB.PCESvn, info.FMSPC)
	}
	qeSVN := binary.LittleEndian.Uint16(qeReport[offISVSVN:])
	qeStatus := levelStatus(qe.TCBLevels, func(l *tcbLevel) bool { return qeSVN >= l.TCB.ISVSVN })
	status := platform
	if qeStatus != attest.TCBUpToDate {
		// An outdated quoting enclave makes the whole quote out of date.
		status = attest.TCBOutOfDate
		if qeStatus == attest.TCBRevoked || qeStatus == "" {
			status = attest.TCBRevoked
		}
	}
	return &tcbVerdict{status: status, notBefore: nb, notAfter: na}, nil
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
	if err != nil || !verifyRS(signer, body, sig) {
		return attest.Reject(attest.CheckCollateral, "the %s signature does not verify with the TCB signing certificate", what)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return attest.Reject(attest.CheckCollateral, "%s: %v", what, err)
	}
	return nil
}

// matchQE checks the quoting enclave is Intel's.
func matchQE(qe *qeIdentity, report []byte) error {
	masked := func(value []byte, want, mask string) bool {
		w, err1 := hex.DecodeString(want)
		m, err2 := hex.DecodeString(mask)
		if err1 != nil || err2 != nil || len(w) != len(value) || len(m) != len(value) {
			return false
		}
		for i := range value {
			if value[i]&m[i] != w[i]&m[i] {
				return false
			}
		}
		return true
	}
	signer, err := hex.DecodeString(qe.MRSIGNER)
	switch {
	case err != nil || !bytes.Equal(signer, report[offMRSIGNER:offMRSIGNER+32]):
		return attest.Reject(attest.CheckCollateral, "the quoting enclave's MRSIGNER is not the QE identity's")
	case binary.LittleEndian.Uint16(report[offISVProdID:]) != qe.ISVProdID:
		return attest.Reject(attest.CheckCollateral, "the quoting enclave's ISVPRODID is not the QE identity's")
	case !masked(report[16:20], qe.MiscSelect, qe.MiscSelectMask):
		return attest.Reject(attest.CheckCollateral, "the quoting enclave's MISCSELECT does not match the QE identity")
	case !masked(report[offAttributes:offAttributes+16], qe.Attributes, qe.AttributesMask):
		return attest.Reject(attest.CheckCollateral, "the quoting enclave's ATTRIBUTES do not match the QE identity")
	}
	return nil
}
