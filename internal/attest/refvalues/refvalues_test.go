package refvalues

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest/refvalues/fwtest"
)

// No module of the Go proxy computes SEV-SNP or TDX launch measurements
// (virtee's sev-snp-measure-go and Google's gce-tcb-verifier are not
// served), and none ships vectors of their inputs: the tests compute the
// expected values a second way, from the specifications' structures
// (PAGE_INFO, the VMSA save area, TDH.MEM.PAGE.ADD and TDH.MR.EXTEND)
// written as Go structs, over synthetic firmware built apart from the
// parsers.

// pageInfo is the SNP firmware ABI's PAGE_INFO.
type pageInfo struct {
	DigestCur [48]byte
	Contents  [48]byte
	Length    uint16
	PageType  uint8
	IMIPage   uint8
	VMPLPerms [4]uint8
	GPA       uint64
}

type measured struct {
	typ      uint8
	gpa      uint64
	contents [48]byte
}

func fold(pages []measured) []byte {
	var ld [48]byte
	for _, p := range pages {
		var b bytes.Buffer
		_ = binary.Write(&b, binary.LittleEndian, pageInfo{DigestCur: ld, Contents: p.contents, Length: 0x70, PageType: p.typ, GPA: p.gpa})
		ld = sha512.Sum384(b.Bytes())
	}
	return ld[:]
}

// vmcbSeg and saveArea are the VMSA's layout (AMD64 APM vol. 2, table
// B-4), as the kernel's struct sev_es_save_area declares it.
type vmcbSeg struct {
	Selector, Attrib uint16
	Limit            uint32
	Base             uint64
}

type saveArea struct {
	ES, CS, SS, DS, FS, GS, GDTR, LDTR, IDTR, TR vmcbSeg
	VMPLSSP                                      [4]uint64
	UCET                                         uint64
	_                                            [2]uint8
	VMPL, CPL                                    uint8
	_                                            [4]uint8
	EFER                                         uint64
	_                                            [104]uint8
	XSS, CR4, CR3, CR0, DR7, DR6, RFLAGS, RIP    uint64
	DR                                           [8]uint64
	_                                            [24]uint8
	RSP, SCET, SSP, ISST, RAX, STAR, LSTAR       uint64
	CSTAR, SFMASK, KGSBase, SysCS, SysESP        uint64
	SysEIP, CR2                                  uint64
	_                                            [32]uint8
	GPAT, DbgCtl, BrFrom, BrTo, ExFrom, ExTo     uint64
	_                                            [80]uint8
	PKRU, TSCAux                                 uint32
	_                                            [24]uint8
	RCX, RDX, RBX                                uint64
	_                                            uint64
	RBP, RSI, RDI                                uint64
	R                                            [8]uint64
	_                                            [16]uint8
	ExitInfo1, ExitInfo2, ExitIntInfo, NRIP      uint64
	SEVFeatures, VIntr, ExitCode, VTOM           uint64
	TLBID, PCPUID, EventInj, XCR0                uint64
	_                                            [16]uint8
	X87DP                                        uint64
	MXCSR                                        uint32
	FTW, FSW, FCW, FOP, X87DS, X87CS             uint16
	X87RIP                                       uint64
	_                                            [80 + 256 + 256 + 2448]uint8
}

func vmsaFromStruct(eip uint64, sig uint32) []byte {
	a := saveArea{
		ES: vmcbSeg{0, 0x93, 0xffff, 0}, CS: vmcbSeg{0xf000, 0x9b, 0xffff, eip & 0xffff0000}, SS: vmcbSeg{0, 0x93, 0xffff, 0},
		DS: vmcbSeg{0, 0x93, 0xffff, 0}, FS: vmcbSeg{0, 0x93, 0xffff, 0}, GS: vmcbSeg{0, 0x93, 0xffff, 0},
		GDTR: vmcbSeg{Limit: 0xffff}, LDTR: vmcbSeg{0, 0x82, 0xffff, 0}, IDTR: vmcbSeg{Limit: 0xffff}, TR: vmcbSeg{0, 0x8b, 0xffff, 0},
		EFER: 0x1000, CR4: 0x40, CR0: 0x10, DR7: 0x400, DR6: 0xffff0ff0, RFLAGS: 2, RIP: eip & 0xffff,
		GPAT: 0x0007040600070406, RDX: uint64(sig), SEVFeatures: 1, XCR0: 1, MXCSR: 0x1f80, FCW: 0x37f,
	}
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, a)
	return b.Bytes()
}

func TestVMSAPageMatchesTheSaveArea(t *testing.T) {
	if n := binary.Size(saveArea{}); n != pageSize {
		t.Fatalf("the save area struct is %d bytes", n)
	}
	for _, eip := range []uint64{0xfffffff0, 0x80b004} {
		if got, want := vmsaPage(eip, 0xa00f11, 1), vmsaFromStruct(eip, 0xa00f11); !bytes.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("eip %#x: byte %#x is %#x, want %#x", eip, i, got[i], want[i])
				}
			}
		}
	}
}

func TestCPUSignatures(t *testing.T) {
	for typ, want := range map[string]uint32{"EPYC": 0x800f12, "EPYC-Rome": 0x830f10, "EPYC-Milan": 0xa00f11, "EPYC-Genoa": 0xa10f10} {
		s := vcpuSignatures[strings.ToLower(typ)]
		if got := cpuSignature(s[0], s[1], s[2]); got != want {
			t.Errorf("%s: %#x, want %#x", typ, got, want)
		}
	}
}

func TestSNPLaunchDigest(t *testing.T) {
	const pages = 8
	base := uint64(1<<32 - pages*pageSize)
	sections := []fwtest.SEVSection{
		{GPA: 0x800000, Size: 2 * pageSize, Type: sectionSecMemory},
		{GPA: 0x802000, Size: pageSize, Type: sectionSecrets},
		{GPA: 0x803000, Size: pageSize, Type: sectionCPUID},
		{GPA: 0x80f000, Size: pageSize, Type: sectionKernelHashes},
	}
	const resetEIP, hashTable = 0x80b004, 0x80fc00
	fw := fwtest.OVMF(pages, sections, resetEIP, hashTable)
	kernel, initrd, cmdline := []byte("kernel image"), []byte("initrd image"), "console=hvc0"

	// The expected digest, step by step.
	var want []measured
	for i := range pages {
		want = append(want, measured{pageNormal, base + uint64(i*pageSize), sha512.Sum384(fw[i*pageSize : (i+1)*pageSize])})
	}
	want = append(want, measured{pageZero, 0x800000, [48]byte{}}, measured{pageZero, 0x801000, [48]byte{}},
		measured{pageSecrets, 0x802000, [48]byte{}}, measured{pageCPUID, 0x803000, [48]byte{}})
	// The hashes table at 0xc00 of its page: header, then command line
	// (NUL-terminated), initrd and kernel, each GUID, length 50, SHA-256.
	var table bytes.Buffer
	table.Write(hashTableHeader[:])
	_ = binary.Write(&table, binary.LittleEndian, uint16(168))
	for _, e := range []struct {
		g guid
		d []byte
	}{{hashCmdline, append([]byte(cmdline), 0)}, {hashInitrd, initrd}, {hashKernel, kernel}} {
		h := sha256.Sum256(e.d)
		table.Write(e.g[:])
		_ = binary.Write(&table, binary.LittleEndian, uint16(50))
		table.Write(h[:])
	}
	page := make([]byte, pageSize)
	copy(page[0xc00:], table.Bytes())
	want = append(want, measured{pageNormal, 0x80f000, sha512.Sum384(page)})
	bsp, ap := sha512.Sum384(vmsaFromStruct(0xfffffff0, 0xa00f11)), sha512.Sum384(vmsaFromStruct(resetEIP, 0xa00f11))
	want = append(want, measured{pageVMSA, vmsaGPA, bsp}, measured{pageVMSA, vmsaGPA, ap}, measured{pageVMSA, vmsaGPA, ap})

	got, err := SNPLaunchDigest(SNPInput{Firmware: fw, Kernel: kernel, Initrd: initrd, Cmdline: cmdline, VCPUs: 3, VCPUType: "EPYC-Milan"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, fold(want)) {
		t.Errorf("launch digest %x, want %x", got, fold(want))
	}
	// Each input is measured: a changed one changes the digest.
	for name, in := range map[string]SNPInput{
		"another command line": {Firmware: fw, Kernel: kernel, Initrd: initrd, Cmdline: "console=hvc0 debug", VCPUs: 3, VCPUType: "EPYC-Milan"},
		"another vCPU count":   {Firmware: fw, Kernel: kernel, Initrd: initrd, Cmdline: cmdline, VCPUs: 2, VCPUType: "EPYC-Milan"},
		"another vCPU type":    {Firmware: fw, Kernel: kernel, Initrd: initrd, Cmdline: cmdline, VCPUs: 3, VCPUType: "EPYC-Genoa"},
		"no initrd":            {Firmware: fw, Kernel: kernel, Cmdline: cmdline, VCPUs: 3, VCPUType: "EPYC-Milan"},
	} {
		if other, err := SNPLaunchDigest(in); err != nil || bytes.Equal(other, got) {
			t.Errorf("%s: the same digest (%v)", name, err)
		}
	}
	// Without a kernel the hashes page is measured as zeros.
	noKernel := append(want[:pages+4:pages+4], measured{pageZero, 0x80f000, [48]byte{}}, measured{pageVMSA, vmsaGPA, bsp})
	if got, err := SNPLaunchDigest(SNPInput{Firmware: fw, VCPUs: 1, VCPUType: "EPYC-Milan"}); err != nil || !bytes.Equal(got, fold(noKernel)) {
		t.Errorf("without a kernel: %x, %v", got, err)
	}
}

func TestSNPLaunchDigestRefuses(t *testing.T) {
	good := []fwtest.SEVSection{{GPA: 0x800000, Size: pageSize, Type: sectionSecMemory}}
	for _, tc := range []struct {
		name string
		in   SNPInput
		want string
	}{
		{"not firmware", SNPInput{Firmware: make([]byte, 4*pageSize), VCPUs: 1, VCPUType: "EPYC"}, "no GUID table"},
		{"no whole pages", SNPInput{Firmware: make([]byte, 100), VCPUs: 1, VCPUType: "EPYC"}, "not whole pages"},
		{"an unknown section", SNPInput{Firmware: fwtest.OVMF(4, []fwtest.SEVSection{{GPA: 0x800000, Size: pageSize, Type: 9}}, 0x80b004, 0), VCPUs: 1, VCPUType: "EPYC"}, "type 0x9 is not known"},
		{"a kernel without a hashes section", SNPInput{Firmware: fwtest.OVMF(4, good, 0x80b004, 0), Kernel: []byte("k"), VCPUs: 1, VCPUType: "EPYC"}, "no kernel hashes section"},
		{"an unknown vCPU", SNPInput{Firmware: fwtest.OVMF(4, good, 0x80b004, 0), VCPUs: 1, VCPUType: "EPYC-Zen9"}, `vCPU type "EPYC-Zen9"`},
		{"no vCPU", SNPInput{Firmware: fwtest.OVMF(4, good, 0x80b004, 0), VCPUType: "EPYC"}, "vCPUs: 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := SNPLaunchDigest(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestTDXMRTD(t *testing.T) {
	const pages = 6
	sections := []fwtest.TDVFSection{
		// The boot firmware volume: its two pages, measured by content.
		{DataOffset: 2 * pageSize, RawDataSize: 2 * pageSize, MemoryAddress: 0xfffc0000, MemoryDataSize: 2 * pageSize, Type: 0, Attributes: tdvfMRExtend},
		// The TD HOB: by address only.
		{MemoryAddress: 0x809000, MemoryDataSize: pageSize, Type: 2},
		// A configuration volume shorter than its memory: zeros after it.
		{DataOffset: 4 * pageSize, RawDataSize: 100, MemoryAddress: 0xffc00000, MemoryDataSize: pageSize, Type: 1, Attributes: tdvfMRExtend},
		// Permanent memory and a section added later: not measured.
		{MemoryAddress: 0x1000000, MemoryDataSize: 16 * pageSize, Type: tdvfPermMem},
		{MemoryAddress: 0x2000000, MemoryDataSize: pageSize, Type: 3, Attributes: tdvfPageAug},
	}
	fw := fwtest.TDVF(pages, sections)
	var want bytes.Buffer
	block := func(name string, gpa uint64) {
		var b [128]byte
		copy(b[:], name)
		binary.LittleEndian.PutUint64(b[16:], gpa)
		want.Write(b[:])
	}
	for p := range 2 {
		gpa := uint64(0xfffc0000 + p*pageSize)
		block("MEM.PAGE.ADD", gpa)
		for c := range 16 {
			block("MR.EXTEND", gpa+uint64(c*256))
			want.Write(fw[2*pageSize+p*pageSize+c*256 : 2*pageSize+p*pageSize+(c+1)*256])
		}
	}
	block("MEM.PAGE.ADD", 0x809000)
	cfv := make([]byte, pageSize)
	copy(cfv, fw[4*pageSize:4*pageSize+100])
	block("MEM.PAGE.ADD", 0xffc00000)
	for c := range 16 {
		block("MR.EXTEND", 0xffc00000+uint64(c*256))
		want.Write(cfv[c*256 : (c+1)*256])
	}
	expected := sha512.Sum384(want.Bytes())
	got, err := TDXMRTD(fw)
	if err != nil || !bytes.Equal(got, expected[:]) {
		t.Errorf("MRTD %x (%v), want %x", got, err, expected)
	}
	// A changed byte of measured content changes it.
	fw[2*pageSize+5]++
	if other, _ := TDXMRTD(fw); bytes.Equal(other, got) {
		t.Error("a changed firmware byte kept the MRTD")
	}
	bad := fwtest.TDVF(pages, []fwtest.TDVFSection{{MemoryAddress: 0x1000, MemoryDataSize: pageSize, Type: 9}})
	if _, err := TDXMRTD(bad); err == nil || !strings.Contains(err.Error(), "type 9") {
		t.Errorf("an unknown section type: %v", err)
	}
}

func TestParse(t *testing.T) {
	m := strings.Repeat("ab", 48)
	f, err := Parse([]byte("version: " + Version + "\nsnp:\n  measurement: " + m + "\n  guestPolicy: 196608\n  minTCB: {bootloader: 3, tee: 0, snp: 8, microcode: 115}\n"))
	if err != nil || *f.SNP.GuestPolicy != 0x30000 || f.SNP.MinTCB.SNP != 8 {
		t.Fatalf("%+v %v", f, err)
	}
	out, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Parse(out); err != nil || again.SNP.Measurement.String() != m {
		t.Errorf("round trip: %v\n%s", err, out)
	}
	m32, attr, mask := strings.Repeat("ab", 32), "04000000000000000300000000000000", "ffffffffffffffffffffffffffffffff"
	for _, tc := range []struct{ doc, want string }{
		{"snp: {measurement: abcd}", "snp.measurement: 2 bytes"},
		{"tdx: {mrtd: " + m + ", rtmr: [ab]}", "tdx.rtmr[0]: 1 bytes"},
		{"version: v0\nsnp: {measurement: " + m + "}", `version: "v0"`},
		{"snp: {measurement: " + m + ", extra: 1}", "unknown field"},
		{"{}", "no snp, tdx or sgx values"},
		{"sgx: {mrenclave: " + m32 + ", mrsigner: " + m32 + ", attributes: '" + attr + "', attributesMask: " + mask + "}", ""},
		{"sgx: {mrenclave: " + m32 + ", mrsigner: abcd, attributes: '" + attr + "', attributesMask: " + mask + "}", "sgx.mrsigner: 2 bytes"},
		{"sgx: {mrenclave: " + m32 + ", mrsigner: " + m32 + ", attributes: '0600000000000000" + attr[16:] + "', attributesMask: " + mask + "}", "DEBUG is set"},
		{"sgx: {mrenclave: " + m32 + ", mrsigner: " + m32 + "}", "sgx.attributes: 0 bytes"},
	} {
		if _, err := Parse([]byte(tc.doc)); (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.doc, err, tc.want)
		}
	}
}
