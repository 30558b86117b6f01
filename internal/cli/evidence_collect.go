package cli

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/produce"
)

type evidenceCollect struct {
	reportData, nonce, output string
	paths                     produce.Paths
	timeout                   time.Duration
}

// detect finds this machine's producer; tests replace it to reach the
// guest devices' and the NSM's in-process fakes.
var detect = produce.Detect

func newEvidenceCollect(s Streams) *cobra.Command {
	o := &evidenceCollect{}
	cmd := &cobra.Command{
		Use:   "collect [--report-data HEX] [-o FILE]",
		Short: "Print this machine's attestation evidence",
		Long: "Asks this machine's TEE for evidence over the report data given: a confidential VM's\n" +
			"SEV-SNP report or TDX quote through configfs-tsm (or /dev/sev-guest, /dev/tdx_guest),\n" +
			"a Nitro Enclave's attestation document through its Nitro Secure Module. Evidence over\n" +
			"other report data than asked for is refused. Writes the raw evidence to FILE, or\n" +
			"prints it in base64; `cloister evidence verify` takes either.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), s) },
	}
	f := cmd.Flags()
	f.StringVar(&o.reportData, "report-data", "", "report data to bind, hex, up to 64 bytes (e.g. a key's digest and a verifier's nonce; default: none)")
	f.StringVar(&o.nonce, "nonce", "", "Nitro only: the document's nonce, hex (its user data is --report-data)")
	f.StringVarP(&o.output, "output", "o", "", "write the raw evidence to FILE instead of base64 to standard output")
	f.StringVar(&o.paths.TSM, "tsm", produce.DefaultTSM, "configfs-tsm's folder")
	f.StringVar(&o.paths.SEVGuest, "sev-guest", produce.DefaultSEVGuest, "the SEV-SNP guest device (when configfs-tsm is missing)")
	f.StringVar(&o.paths.TDXGuest, "tdx-guest", produce.DefaultTDXGuest, "the TDX guest device (when configfs-tsm is missing)")
	f.StringVar(&o.paths.NSM, "nsm", produce.DefaultNSM, "the Nitro Secure Module's device")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the evidence")
	return cmd
}

func (o *evidenceCollect) run(ctx context.Context, s Streams) error {
	rd, err := hex.DecodeString(o.reportData)
	if err != nil || len(rd) > produce.ReportDataSize {
		return fmt.Errorf("invalid --report-data %q: give up to %d bytes in hex", o.reportData, produce.ReportDataSize)
	}
	nonce, err := hex.DecodeString(o.nonce)
	if err != nil || len(nonce) > produce.MaxNitroField {
		return fmt.Errorf("invalid --nonce %q: give up to %d bytes in hex", o.nonce, produce.MaxNitroField)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	p, err := detect(ctx, o.paths)
	if err != nil {
		return err
	}
	var ev attest.Evidence
	switch n, isNitro := p.(*produce.Nitro); {
	case isNitro:
		ev, err = n.Attest(rd, nonce)
	case len(nonce) > 0:
		return errors.New("--nonce is for Nitro documents: for SEV-SNP and TDX put the nonce into --report-data")
	default:
		ev, err = p.Quote(ctx, rd)
	}
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(s.Err, "%s evidence, %d bytes\n", ev.Type, len(ev.Raw))
	if o.output != "" {
		return os.WriteFile(o.output, ev.Raw, 0o644) //nolint:gosec // evidence is public
	}
	_, err = fmt.Fprintln(s.Out, base64.StdEncoding.EncodeToString(ev.Raw))
	return err
}
