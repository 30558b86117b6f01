package refvalues

import (
	"testing"

	"github.com/cloister-cc/cloister/internal/attest/refvalues/fwtest"
)

// FuzzParse reads reference values files as a user's tooling may write
// them: strict, and an error rather than a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte("snp: {measurement: " + string(make([]byte, 0)) + "}"))
	f.Add([]byte("version: " + Version + "\ntdx: {mrtd: 00, rtmr: [00, \"\"]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if file, err := Parse(data); err == nil {
			if _, err := file.Marshal(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// FuzzFirmware reads arbitrary images as firmware: the parsers stay in
// bounds.
func FuzzFirmware(f *testing.F) {
	f.Add(fwtest.OVMF(4, []fwtest.SEVSection{{GPA: 0x800000, Size: pageSize, Type: sectionSecMemory}}, 0x80b004, 0x80fc00))
	f.Add(fwtest.TDVF(3, []fwtest.TDVFSection{{DataOffset: 0, RawDataSize: 16, MemoryAddress: 0x1000, MemoryDataSize: pageSize, Attributes: tdvfMRExtend}}))
	f.Fuzz(func(t *testing.T, fw []byte) {
		_, _ = SNPLaunchDigest(SNPInput{Firmware: fw, VCPUs: 1, VCPUType: "EPYC"})
		_, _ = TDXMRTD(fw)
	})
}
