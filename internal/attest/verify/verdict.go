package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
)

// Verdict is the outcome of verifying evidence and judging its claims, as
// cloister evidence verify prints it.
type Verdict struct {
	Accepted bool           `json:"accepted"`
	Rejected *Rejection     `json:"rejected,omitempty"`
	Claims   *attest.Claims `json:"claims,omitempty"`
}

// Rejection is the check that refused the evidence, and why.
type Rejection struct {
	Check  attest.Check `json:"check"`
	Reason string       `json:"reason"`
}

// WriteVerdict writes the verdict on claims (err is the verifier's or the
// policy's refusal, nil when accepted), as JSON or as lines for people.
func WriteVerdict(w io.Writer, c *attest.Claims, err error, asJSON bool) error {
	v := Verdict{Accepted: err == nil, Claims: c}
	var r *attest.Rejection
	if errors.As(err, &r) {
		v.Rejected = &Rejection{Check: r.Check, Reason: r.Reason}
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	var b strings.Builder
	if v.Rejected != nil {
		fmt.Fprintf(&b, "rejected: %s: %s\n", v.Rejected.Check, v.Rejected.Reason)
	} else {
		fmt.Fprintf(&b, "accepted: %s evidence\n", c.Type)
	}
	if c != nil {
		writeClaims(&b, c)
	}
	_, werr := io.WriteString(w, b.String())
	return werr
}

// writeClaims writes the claims a person checks, one per line.
func writeClaims(b *strings.Builder, c *attest.Claims) {
	line := func(k string, v any) { fmt.Fprintf(b, "  %-13s %v\n", k+":", v) }
	line("type", c.Type)
	if c.Insecure {
		line("insecure", "true (simulated: no TEE vouches for this evidence)")
	}
	if c.TestRoot {
		line("testRoot", "true (INSECURE: it chains to a test root, not a vendor's)")
	}
	line("debug", c.Debug)
	line("tcbStatus", c.TCBStatus)
	if s := c.SGX; s != nil {
		line("mrenclave", s.MRENCLAVE)
		line("mrsigner", s.MRSIGNER)
		line("isvProdID", s.ISVProdID)
		line("isvSVN", s.ISVSVN)
	}
	if x := c.TDX; x != nil {
		line("mrtd", x.MRTD)
		for i, r := range x.RTMR {
			line(fmt.Sprintf("rtmr%d", i), r)
		}
		line("mrseam", x.MRSEAM)
		line("tdAttributes", x.TDAttributes)
		line("teeTCBSVN", x.TEETCBSVN)
		if x.TEETCBSVN2 != nil {
			line("teeTCBSVN2", x.TEETCBSVN2)
			line("mrServiceTD", x.MRServiceTD)
		}
	}
	if p := c.SNP; p != nil {
		line("measurement", p.Measurement)
		line("hostData", p.HostData)
		line("version", p.Version)
		line("guestPolicy", fmt.Sprintf("%#x (%s)", p.GuestPolicy, strings.Join(p.PolicyFlags, ", ")))
		fmc := ""
		if p.TCB.FMC != 0 {
			fmc = fmt.Sprintf("fmc %d, ", p.TCB.FMC)
		}
		line("reportedTCB", fmt.Sprintf("%#x (%sbootloader %d, tee %d, snp %d, microcode %d)", p.ReportedTCB, fmc, p.TCB.Bootloader, p.TCB.TEE, p.TCB.SNP, p.TCB.Microcode))
	}
	if n := c.Nitro; n != nil {
		line("moduleID", n.ModuleID)
		for _, i := range []int{0, 1, 2, 3, 4, 8} {
			if v, ok := n.PCRs[i]; ok {
				line(fmt.Sprintf("pcr%d", i), v)
			}
		}
	}
	if len(c.ReportData) > 0 {
		line("reportData", c.ReportData)
	}
	if !c.NotBefore.IsZero() {
		line("valid", c.NotBefore.UTC().Format(time.RFC3339)+" to "+c.NotAfter.UTC().Format(time.RFC3339))
	}
}
