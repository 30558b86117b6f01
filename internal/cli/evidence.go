package cli

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"

	"github.com/spf13/cobra"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/collateral"
	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/base/startup"
)

// ExitError ends the command with Code, the command having said why.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// ExitCode makes the process exit with Code and print nothing more.
func (e *ExitError) ExitCode() int { return e.Code }

var _ startup.ExitCoder = (*ExitError)(nil)

func newEvidence(s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "evidence", Short: "Work with attestation evidence"}
	cmd.AddCommand(newEvidenceVerify(s), newEvidenceCollect(s))
	return cmd
}

type evidenceVerify struct {
	typ, file, collateral, at, policy, output, nonce string
	testRoots, pcs, kds, dcapFile                    string
	allowDebug, allowSimulation                      bool
	acceptTCB                                        []string
}

func newEvidenceVerify(s Streams) *cobra.Command {
	o := &evidenceVerify{}
	cmd := &cobra.Command{
		Use:   "verify --type sgx|tdx|snp|nitro|sim --evidence FILE",
		Short: "Verify attestation evidence offline and judge it by a policy",
		Long: "Verifies evidence against the vendor roots built into cloister and the collateral\n" +
			"given, at the time given, then checks the claims against the policy. Prints the\n" +
			"claims and exits 0 when accepted; prints 'rejected: <check>: <reason>' and the\n" +
			"claims that could be read, and exits 1, otherwise.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(s) },
	}
	f := cmd.Flags()
	f.StringVar(&o.typ, "type", "", "evidence type: sgx, tdx, snp, nitro or sim")
	f.StringVar(&o.file, "evidence", "", "evidence file, raw or base64")
	f.StringVar(&o.collateral, "collateral", "", "directory with the collateral (sgx, tdx: tcb_info*.json, qe_identity*.json, *certs*.pem, optionally pck_crl*, root*crl*; snp: *vcek* or *vlek*)")
	f.StringVar(&o.pcs, "pcs", "", "fetch SGX and TDX collateral (with the CRLs, then required) from Intel PCS (https://api.trustedservices.intel.com) or a PCCS at this URL, instead of --collateral")
	f.StringVar(&o.kds, "kds", "", "fetch SEV-SNP collateral (the VCEK a report lacks, the CRL, then required) from AMD KDS (https://kdsintf.amd.com) or a mirror at this URL")
	f.StringVar(&o.dcapFile, "dcap-api-file", "", "a file holding the Intel DCAP API key, sent to --pcs on every request")
	f.StringVar(&o.at, "at", "", "verification time, RFC 3339 or Unix seconds (default: now)")
	f.StringVar(&o.policy, "policy", "", "policy file (YAML or JSON): identities, acceptTCB, allowDebug, reportData, nonce, allowSimulation")
	f.StringVar(&o.nonce, "nonce", "", "the nonce (hex) the evidence must carry: the challenge it was made for")
	f.BoolVar(&o.allowDebug, "allow-debug", false, "accept debug-mode workloads")
	f.BoolVar(&o.allowSimulation, "allow-simulation", false, "accept simulated (insecure) evidence")
	f.StringSliceVar(&o.acceptTCB, "accept-tcb", nil, "accepted TCB statuses (default UpToDate), e.g. UpToDate,SWHardeningNeeded")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&o.testRoots, verify.TestRootsFlag, "", "INSECURE, tests only: a PEM file of test roots (SEV-SNP ARK and ASK, a Nitro root, an SGX root) trusted beside the vendors'")
	return cmd
}

func (o *evidenceVerify) run(s Streams) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("invalid --output %q: use text or json", o.output)
	}
	if o.typ == "" || o.file == "" {
		return errors.New("--type and --evidence are required")
	}
	typ, err := attest.ParseType(o.typ)
	if err != nil {
		return fmt.Errorf("--type: %w", err)
	}
	raw, err := os.ReadFile(o.file)
	if err != nil {
		return fmt.Errorf("--evidence: %w", err)
	}
	opts := verify.Options{CollateralDir: o.collateral}
	if opts.Intel, err = o.intelSource(); err != nil {
		return err
	}
	if o.kds != "" {
		if err := checkServiceURL("--kds", o.kds, collateral.AMDKDS); err != nil {
			return err
		}
		opts.SNP = collateral.Direct{AMD: &collateral.KDS{URL: o.kds}}
	}
	if opts.TestRoots, err = verify.LoadTestRootsFlag(o.testRoots, s.Err); err != nil {
		return err
	}
	if o.at != "" {
		if opts.At, err = verify.ParseTime(o.at); err != nil {
			return fmt.Errorf("invalid --at %q: %w", o.at, err)
		}
	}
	policy := &attest.Policy{}
	if o.policy != "" {
		data, err := os.ReadFile(o.policy)
		if err != nil {
			return fmt.Errorf("--policy: %w", err)
		}
		if policy, err = attest.ParsePolicy(data); err != nil {
			return fmt.Errorf("--policy %s: %w", o.policy, err)
		}
	}
	if err := attest.ValidateTCBStatuses("--accept-tcb", o.acceptTCB); err != nil {
		return err
	}
	if o.nonce != "" {
		if policy.Nonce, err = hex.DecodeString(o.nonce); err != nil || len(policy.Nonce) == 0 {
			return fmt.Errorf("invalid --nonce %q: give the nonce in hex", o.nonce)
		}
	}
	policy.AllowDebug = policy.AllowDebug || o.allowDebug
	policy.AllowSimulation = policy.AllowSimulation || o.allowSimulation
	if len(o.acceptTCB) > 0 {
		policy.AcceptTCB = o.acceptTCB
	}
	claims, err := verify.Evidence(attest.Evidence{Type: typ, Raw: raw}, opts)
	if err == nil {
		err = policy.Check(claims)
	}
	if err != nil && attest.CheckOf(err) == "" {
		return err // not a verdict: a broken input of ours
	}
	if perr := verify.WriteVerdict(s.Out, claims, err, o.output == "json"); perr != nil {
		return perr
	}
	if err != nil {
		return &ExitError{Code: 1}
	}
	return nil
}

// intelSource is --pcs with the key of --dcap-api-file.
func (o *evidenceVerify) intelSource() (intelpcs.Source, error) {
	switch {
	case o.pcs == "" && o.dcapFile != "":
		return nil, errors.New("--dcap-api-file is the key for --pcs: give --pcs too")
	case o.pcs == "":
		return nil, nil
	case o.collateral != "":
		return nil, errors.New("--pcs and --collateral exclude each other: collateral comes from one")
	}
	if err := checkServiceURL("--pcs", o.pcs, collateral.IntelPCS); err != nil {
		return nil, err
	}
	key, err := readDCAPKey("", o.dcapFile)
	if err != nil {
		return nil, err
	}
	return collateral.Direct{Intel: &collateral.PCS{URL: o.pcs, Key: key}}, nil
}

// checkServiceURL checks a collateral service's base URL.
func checkServiceURL(flag, raw, example string) error {
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("invalid %s %q: give the service's base URL, e.g. %s", flag, raw, example)
	}
	return nil
}

// readDCAPKey is the Intel DCAP API key given on the command line or in a
// file (the first keeps it in the process list and shell history).
func readDCAPKey(key, file string) (string, error) {
	switch {
	case key != "" && file != "":
		return "", errors.New("--dcap-api and --dcap-api-file exclude each other")
	case file != "":
		k, err := collateral.ReadAPIKeyFile(file)
		if err != nil {
			return "", fmt.Errorf("--dcap-api-file %s: %w", file, err)
		}
		return k, nil
	case key != "":
		k, err := collateral.ParseAPIKey([]byte(key))
		if err != nil {
			return "", fmt.Errorf("--dcap-api: %w", err)
		}
		return k, nil
	}
	return "", nil
}
