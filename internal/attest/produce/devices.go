package produce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"

	sevclient "github.com/google/go-sev-guest/client"
	tdxclient "github.com/google/go-tdx-guest/client"
	"github.com/hf/nsm"
	"github.com/hf/nsm/request"
	"github.com/hf/nsm/response"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/nitro"
	"github.com/cloister-cc/cloister/internal/attest/tdx"
)

// SEVGuest makes SEV-SNP evidence through the guest device's ioctls
// (kernels before configfs-tsm): an extended report with the platform's
// certificates where the host provides them, else a plain report.
type SEVGuest struct {
	Path string
	// Open opens the device; nil opens Path (tests give go-sev-guest's
	// fake device).
	Open func(path string) (sevclient.Device, error)
}

// Type implements Producer.
func (*SEVGuest) Type() attest.Type { return attest.SNP }

func (s *SEVGuest) open() (sevclient.Device, error) {
	if s.Open != nil {
		d, err := s.Open(s.Path)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", s.Path, err)
		}
		return d, nil
	}
	d := &sevclient.LinuxDevice{}
	if err := d.Open(s.Path); err != nil {
		return nil, fmt.Errorf("opening %s: %w", s.Path, err)
	}
	return d, nil
}

// Quote implements Producer.
func (s *SEVGuest) Quote(_ context.Context, reportData []byte) (attest.Evidence, error) {
	rd, err := pad(reportData)
	if err != nil {
		return attest.Evidence{}, err
	}
	d, err := s.open()
	if err != nil {
		return attest.Evidence{}, err
	}
	defer func() { _ = d.Close() }()
	// go-sev-guest's ioctl quote provider opens a path fixed by its own
	// flag; a device at the caller's path takes these (deprecated) calls.
	report, certs, err := sevclient.GetRawExtendedReport(d, rd) //nolint:staticcheck // the device at the caller's path, above
	if err != nil {
		// A host that keeps no certificates for its guests refuses the
		// extended request on some kernels: the plain report still binds.
		var plainErr error
		if report, plainErr = sevclient.GetRawReport(d, rd); plainErr != nil { //nolint:staticcheck // as above
			return attest.Evidence{}, fmt.Errorf("%s: %w", s.Path, errors.Join(err, plainErr))
		}
		certs = nil
	}
	raw, err := snpEvidence(report, trimTable(certs), rd)
	return attest.Evidence{Type: attest.SNP, Raw: raw}, err
}

// trimTable drops the zero padding after a certificate table's entries:
// the extended report fills a page-sized buffer.
func trimTable(certs []byte) []byte {
	end := len(certs)
	for end > 0 && certs[end-1] == 0 {
		end--
	}
	if end == 0 {
		return nil
	}
	return certs
}

// TDXGuest makes a TDX quote through the guest device's ioctls (kernels
// before configfs-tsm): a TDREPORT turned into a quote by the host's
// quoting service.
type TDXGuest struct {
	Path string
	// Open opens the device; nil opens Path (tests give go-tdx-guest's
	// fake device).
	Open func(path string) (tdxclient.Device, error)
}

// Type implements Producer.
func (*TDXGuest) Type() attest.Type { return attest.TDX }

// Quote implements Producer.
func (t *TDXGuest) Quote(_ context.Context, reportData []byte) (attest.Evidence, error) {
	rd, err := pad(reportData)
	if err != nil {
		return attest.Evidence{}, err
	}
	open := t.Open
	if open == nil {
		open = func(path string) (tdxclient.Device, error) {
			d := &tdxclient.LinuxDevice{}
			return d, d.Open(path)
		}
	}
	d, err := open(t.Path)
	if err != nil {
		return attest.Evidence{}, fmt.Errorf("opening %s: %w", t.Path, err)
	}
	defer func() { _ = d.Close() }()
	buf, err := tdxclient.GetRawQuote(d, rd)
	if err != nil {
		return attest.Evidence{}, fmt.Errorf("%s: %w", t.Path, err)
	}
	quote, got, err := tdx.ReportData(buf)
	if err != nil {
		return attest.Evidence{}, fmt.Errorf("%s: %w", t.Path, err)
	}
	if err := checkBound(attest.TDX, got, rd[:]); err != nil {
		return attest.Evidence{}, err
	}
	return attest.Evidence{Type: attest.TDX, Raw: quote}, nil
}

// NSM is the Nitro Secure Module's requests Cloister makes: the seam
// tests fake, since no machine here has one.
type NSM interface {
	Attestation(nonce, userData, publicKey []byte) (document []byte, err error)
	// ExtendPCR extends a PCR of 16 and up; LockPCR makes it final.
	ExtendPCR(index uint16, data []byte) error
	LockPCR(index uint16) error
}

// MaxNitroField bounds the nonce and user data: the NSM takes up to 512
// bytes each.
const MaxNitroField = 512

// Nitro makes an enclave's evidence: an attestation document from its
// Nitro Secure Module carrying user data (the report data) and a nonce.
type Nitro struct {
	Path string
	// Module asks for the document; nil uses the device at Path.
	Module NSM
}

// Type implements Producer.
func (*Nitro) Type() attest.Type { return attest.Nitro }

// Quote implements Producer: the report data is the document's user data.
func (n *Nitro) Quote(_ context.Context, reportData []byte) (attest.Evidence, error) {
	return n.Attest(reportData, nil)
}

// ExtendAndLock extends PCR index with data and locks it: nothing can
// change it again until the enclave ends.
func (n *Nitro) ExtendAndLock(index uint16, data []byte) error {
	m := n.module()
	if err := m.ExtendPCR(index, data); err != nil {
		return fmt.Errorf("extending PCR%d: %w", index, err)
	}
	if err := m.LockPCR(index); err != nil {
		return fmt.Errorf("locking PCR%d: %w", index, err)
	}
	return nil
}

func (n *Nitro) module() NSM {
	if n.Module == nil {
		return device(n.Path)
	}
	return n.Module
}

// Attest asks for a document binding userData and nonce, and refuses one
// that binds anything else.
func (n *Nitro) Attest(userData, nonce []byte) (attest.Evidence, error) {
	if len(userData) > MaxNitroField || len(nonce) > MaxNitroField {
		return attest.Evidence{}, fmt.Errorf("user data %d and nonce %d bytes: at most %d each", len(userData), len(nonce), MaxNitroField)
	}
	doc, err := n.module().Attestation(nonce, userData, nil)
	if err != nil {
		return attest.Evidence{}, err
	}
	gotUser, gotNonce, err := nitro.Bound(doc)
	if err != nil {
		return attest.Evidence{}, fmt.Errorf("the Nitro Secure Module's document: %w", err)
	}
	if err := checkBound(attest.Nitro, gotUser, userData); err != nil {
		return attest.Evidence{}, err
	}
	if string(gotNonce) != string(nonce) {
		return attest.Evidence{}, fmt.Errorf("nitro: the document's nonce is %x, want %x: made for another request", gotNonce, nonce)
	}
	return attest.Evidence{Type: attest.Nitro, Raw: doc}, nil
}

// device is the NSM at a path. Untested on hardware: no machine here has
// one.
type device string

func (d device) send(req request.Request) (*response.Response, error) {
	opts := nsm.DefaultOptions
	opts.Open = func() (nsm.FileDescriptor, error) { return os.Open(string(d)) }
	s, err := nsm.OpenSession(opts)
	if err != nil {
		return nil, fmt.Errorf("opening the Nitro Secure Module %s: %w", d, err)
	}
	defer func() { _ = s.Close() }()
	res, err := s.Send(req)
	if err != nil {
		return nil, fmt.Errorf("asking the Nitro Secure Module: %w", err)
	}
	if res.Error != "" {
		return nil, fmt.Errorf("the Nitro Secure Module refused: %s", res.Error)
	}
	return &res, nil
}

func (d device) Attestation(nonce, userData, publicKey []byte) ([]byte, error) {
	res, err := d.send(&request.Attestation{Nonce: nonce, UserData: userData, PublicKey: publicKey})
	if err != nil {
		return nil, err
	}
	if res.Attestation == nil {
		return nil, errors.New("the Nitro Secure Module answered without a document")
	}
	return res.Attestation.Document, nil
}

func (d device) ExtendPCR(index uint16, data []byte) error {
	res, err := d.send(&request.ExtendPCR{Index: index, Data: data})
	if err == nil && res.ExtendPCR == nil {
		err = errors.New("the Nitro Secure Module did not extend it")
	}
	return err
}

func (d device) LockPCR(index uint16) error {
	res, err := d.send(&request.LockPCR{Index: index})
	if err == nil && res.LockPCR == nil {
		err = errors.New("the Nitro Secure Module did not lock it")
	}
	return err
}

// sealingKeyFields are what the firmware mixes into a sealing key besides
// the chip's VCEK: the launch measurement and the guest policy, so only
// the same image, launched the same way on the same chip, derives it.
var sealingKeyFields = sevclient.GuestFieldSelect{Measurement: true, GuestPolicy: true}

// SealingKey is a 32-byte key the SEV-SNP firmware derives for this guest
// (MSG_KEY_REQ) from the chip's VCEK, the launch measurement and the guest
// policy: the host cannot derive it, and another chip, image or policy
// derives another.
func (s *SEVGuest) SealingKey() ([]byte, error) {
	d, err := s.open()
	if err != nil {
		return nil, err
	}
	defer func() { _ = d.Close() }()
	resp, err := sevclient.GetDerivedKeyAcknowledgingItsLimitations(d, &sevclient.SnpDerivedKeyReq{UseVCEK: true, GuestFieldSelect: sealingKeyFields})
	if err != nil {
		return nil, fmt.Errorf("%s: deriving the sealing key: %w", s.Path, err)
	}
	if resp.Status != 0 {
		return nil, fmt.Errorf("%s: deriving the sealing key: firmware status %#x", s.Path, resp.Status)
	}
	return bytes.Clone(resp.Data[:]), nil
}
