package refvalues

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
)

const pageSize = 4096

// SEV-SNP page types of SNP_LAUNCH_UPDATE (SNP firmware ABI, PAGE_INFO).
const (
	pageNormal   = 1
	pageVMSA     = 2
	pageZero     = 3
	pageSecrets  = 5
	pageCPUID    = 6
	vmsaGPA      = 0xFFFFFFFFF000 // (u64)-1, page-aligned, bits above 51 clear
	pageInfoSize = 0x70
)

// launchDigest is SEV-SNP's running measurement: each page added is
// hashed into it as a PAGE_INFO structure (the digest so far, the page's
// SHA-384 or zeros, its type and GPA).
type launchDigest [48]byte

func (ld *launchDigest) update(typ byte, gpa uint64, contents [48]byte) {
	var info [pageInfoSize]byte
	copy(info[0:], ld[:])
	copy(info[48:], contents[:])
	binary.LittleEndian.PutUint16(info[96:], pageInfoSize)
	info[98] = typ
	// IMI_PAGE, the VMPL permissions and a reserved byte stay zero.
	binary.LittleEndian.PutUint64(info[104:], gpa)
	*ld = sha512.Sum384(info[:])
}

func (ld *launchDigest) normal(gpa uint64, data []byte) {
	for off := 0; off < len(data); off += pageSize {
		ld.update(pageNormal, gpa+uint64(off), sha512.Sum384(data[off:off+pageSize]))
	}
}

func (ld *launchDigest) zero(gpa uint64, size uint32) {
	for off := uint64(0); off < uint64(size); off += pageSize {
		ld.update(pageZero, gpa+off, [48]byte{})
	}
}

// SNPInput is what an SEV-SNP guest's launch measurement derives from,
// as QEMU (Kata's VMM) launches it: the firmware, the kernel, initrd and
// command line it measures by their hashes, and the vCPUs.
type SNPInput struct {
	Firmware []byte
	// Kernel, Initrd and Cmdline are measured by their SHA-256 in the
	// firmware's hashes page; no kernel: none.
	Kernel, Initrd []byte
	Cmdline        string
	VCPUs          int
	// VCPUType names QEMU's vCPU model (EPYC-Milan, ...), whose
	// signature is in each vCPU's initial state.
	VCPUType string
	// GuestFeatures are the VMSA's SEV features (default 1: SNP active).
	GuestFeatures uint64
}

// vcpuSignatures are the CPUID signatures of QEMU's EPYC models:
// family, model, stepping.
var vcpuSignatures = map[string][3]uint32{
	"epyc": {23, 1, 2}, "epyc-v1": {23, 1, 2}, "epyc-v2": {23, 1, 2}, "epyc-ibpb": {23, 1, 2}, "epyc-v3": {23, 1, 2}, "epyc-v4": {23, 1, 2},
	"epyc-rome": {23, 49, 0}, "epyc-rome-v1": {23, 49, 0}, "epyc-rome-v2": {23, 49, 0}, "epyc-rome-v3": {23, 49, 0},
	"epyc-milan": {25, 1, 1}, "epyc-milan-v1": {25, 1, 1}, "epyc-milan-v2": {25, 1, 1},
	"epyc-genoa": {25, 17, 0}, "epyc-genoa-v1": {25, 17, 0},
}

// cpuSignature is CPUID Fn0000_0001_EAX for a family, model and
// stepping: families above 15 carry the rest in the extended family.
func cpuSignature(family, model, stepping uint32) uint32 {
	famLow, famHigh := family, uint32(0)
	if family > 0xf {
		famLow, famHigh = 0xf, (family-0xf)&0xff
	}
	return famHigh<<20 | (model>>4&0xf)<<16 | famLow<<8 | (model&0xf)<<4 | stepping&0xf
}

// VCPUTypes are the vCPU models whose signatures are known.
func VCPUTypes() []string {
	var out []string
	for k := range vcpuSignatures {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// SNPLaunchDigest computes the MEASUREMENT of an SEV-SNP guest's
// attestation report: the firmware's pages, the kernel hashes page, the
// metadata sections (zero, secrets, CPUID pages) in the firmware's
// order, then one VMSA page per vCPU.
func SNPLaunchDigest(in SNPInput) ([]byte, error) {
	fw, err := parseOVMF(in.Firmware)
	if err != nil {
		return nil, err
	}
	sig, ok := vcpuSignatures[strings.ToLower(in.VCPUType)]
	if !ok {
		return nil, fmt.Errorf("vCPU type %q: not one of %s", in.VCPUType, strings.Join(VCPUTypes(), ", "))
	}
	if in.VCPUs < 1 || in.VCPUs > 512 {
		return nil, fmt.Errorf("vCPUs: %d, want 1 to 512", in.VCPUs)
	}
	if in.Kernel == nil && (in.Initrd != nil || in.Cmdline != "") {
		return nil, fmt.Errorf("an initrd or command line is measured only with a kernel")
	}
	features := in.GuestFeatures
	if features == 0 {
		features = 1
	}
	var ld launchDigest
	ld.normal(fw.gpa(), fw.data)
	hasHashes := false
	for _, s := range fw.sections {
		switch s.Type {
		case sectionSecMemory, sectionSVSMCAA:
			ld.zero(uint64(s.GPA), s.Size)
		case sectionSecrets:
			ld.update(pageSecrets, uint64(s.GPA), [48]byte{})
		case sectionCPUID:
			ld.update(pageCPUID, uint64(s.GPA), [48]byte{})
		case sectionKernelHashes:
			hasHashes = true
			if in.Kernel == nil {
				ld.zero(uint64(s.GPA), s.Size)
				continue
			}
			if s.Size != pageSize || fw.hashTable&^(pageSize-1) != s.GPA {
				return nil, fmt.Errorf("firmware: its kernel hashes section (%#x, %#x bytes) does not hold its hash table (%#x)", s.GPA, s.Size, fw.hashTable)
			}
			ld.normal(uint64(s.GPA), hashesPage(in.Kernel, in.Initrd, in.Cmdline, int(fw.hashTable%pageSize)))
		default:
			return nil, fmt.Errorf("firmware: SEV metadata section type %#x is not known", s.Type)
		}
	}
	if in.Kernel != nil && !hasHashes {
		return nil, fmt.Errorf("firmware: no kernel hashes section, so it cannot measure a kernel (a firmware built for measured direct boot is needed)")
	}
	sigv := cpuSignature(sig[0], sig[1], sig[2])
	bsp, ap := vmsaPage(0xfffffff0, sigv, features), vmsaPage(uint64(fw.resetEIP), sigv, features)
	for i := range in.VCPUs {
		page := ap
		if i == 0 {
			page = bsp
		}
		ld.update(pageVMSA, vmsaGPA, sha512.Sum384(page))
	}
	return ld[:], nil
}

// The GUIDs of QEMU's SEV hashes table.
var (
	hashTableHeader = mustGUID("9438d606-4f22-4cc9-b479-a793d411fd21")
	hashCmdline     = mustGUID("97d02dd8-bd20-4c94-aa78-e7714d36ab2a")
	hashInitrd      = mustGUID("44baf731-3a2f-4bd7-9af1-41e29169781d")
	hashKernel      = mustGUID("4de79437-abd2-427f-b835-d5b172d2045b")
)

// hashesPage is the page QEMU fills with the SHA-256 of the command line
// (with its terminating NUL), the initrd and the kernel, the table at
// offset and padded to 16 bytes.
func hashesPage(kernel, initrd []byte, cmdline string, offset int) []byte {
	const entry = 16 + 2 + 32
	length := 16 + 2 + 3*entry
	page := make([]byte, pageSize)
	t := page[offset:]
	copy(t, hashTableHeader[:])
	binary.LittleEndian.PutUint16(t[16:], uint16(length))
	at := 18
	for _, e := range []struct {
		g guid
		h [32]byte
	}{{hashCmdline, sha256.Sum256(append([]byte(cmdline), 0))}, {hashInitrd, sha256.Sum256(initrd)}, {hashKernel, sha256.Sum256(kernel)}} {
		copy(t[at:], e.g[:])
		binary.LittleEndian.PutUint16(t[at+16:], entry)
		copy(t[at+18:], e.h[:])
		at += entry
	}
	return page
}

// vmsaPage is a vCPU's initial state as QEMU and KVM set it, laid out as
// the VMSA (AMD64 APM vol. 2, table B-4): real mode at eip's segment,
// the vCPU signature in RDX, and the given SEV features.
func vmsaPage(eip uint64, sig uint32, features uint64) []byte {
	p := make([]byte, pageSize)
	le16 := func(off int, v uint16) { binary.LittleEndian.PutUint16(p[off:], v) }
	le32 := func(off int, v uint32) { binary.LittleEndian.PutUint32(p[off:], v) }
	le64 := func(off int, v uint64) { binary.LittleEndian.PutUint64(p[off:], v) }
	// Segments, 16 bytes each: selector, attributes, limit, base.
	seg := func(off int, selector, attrib uint16, limit uint32, base uint64) {
		le16(off, selector)
		le16(off+2, attrib)
		le32(off+4, limit)
		le64(off+8, base)
	}
	seg(0x00, 0, 0x93, 0xffff, 0)                   // es
	seg(0x10, 0xf000, 0x9b, 0xffff, eip&0xffff0000) // cs
	seg(0x20, 0, 0x93, 0xffff, 0)                   // ss
	seg(0x30, 0, 0x93, 0xffff, 0)                   // ds
	seg(0x40, 0, 0x93, 0xffff, 0)                   // fs
	seg(0x50, 0, 0x93, 0xffff, 0)                   // gs
	seg(0x60, 0, 0, 0xffff, 0)                      // gdtr
	seg(0x70, 0, 0x82, 0xffff, 0)                   // ldtr
	seg(0x80, 0, 0, 0xffff, 0)                      // idtr
	seg(0x90, 0, 0x8b, 0xffff, 0)                   // tr
	le64(0xd0, 0x1000)                              // efer: SVME
	le64(0x148, 0x40)                               // cr4: MCE
	le64(0x158, 0x10)                               // cr0: ET
	le64(0x160, 0x400)                              // dr7
	le64(0x168, 0xffff0ff0)                         // dr6
	le64(0x170, 0x2)                                // rflags
	le64(0x178, eip&0xffff)                         // rip
	le64(0x268, 0x0007040600070406)                 // g_pat
	le64(0x310, uint64(sig))                        // rdx
	le64(0x3b0, features)                           // sev_features
	le64(0x3e8, 0x1)                                // xcr0
	le32(0x408, 0x1f80)                             // mxcsr, as KVM sets it since Linux 6.9
	le16(0x410, 0x37f)                              // x87 fcw, likewise
	return p
}
