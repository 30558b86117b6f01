package refvalues

import "github.com/cloister-cc/cloister/internal/attest"

// ComputeSNP is the reference values file of QEMU's SEV-SNP guest: its
// launch measurement, the guest policy and lowest TCB it must run under,
// and the digests of the artifacts measured. A kernel without an initrd
// is measured with an empty one, as QEMU does.
func ComputeSNP(in SNPInput, guestPolicy uint64, minTCB *attest.SNPTCB) (*File, error) {
	if in.Kernel != nil && in.Initrd == nil {
		in.Initrd = []byte{}
	}
	m, err := SNPLaunchDigest(in)
	if err != nil {
		return nil, err
	}
	f := &File{
		SNP:    &SNP{Measurement: m, GuestPolicy: &guestPolicy, VCPUs: in.VCPUs, VCPUType: in.VCPUType, MinTCB: minTCB},
		Source: &Source{Firmware: Digest(in.Firmware)},
	}
	if in.Kernel != nil {
		f.Source.Kernel, f.Source.Initrd, f.Source.Cmdline = Digest(in.Kernel), Digest(in.Initrd), in.Cmdline
	}
	return f, f.Validate()
}

// ComputeTDX is the reference values file of a TD: the MRTD its firmware
// (TDVF) gives, and the RTMRs as given (empty: any).
func ComputeTDX(firmware []byte, rtmr []attest.Bytes) (*File, error) {
	m, err := TDXMRTD(firmware)
	if err != nil {
		return nil, err
	}
	f := &File{TDX: &TDX{MRTD: m, RTMR: rtmr}, Source: &Source{Firmware: Digest(firmware)}}
	return f, f.Validate()
}
