package eif

import (
	"bytes"
	"crypto/sha512"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
)

func testImage() *Image {
	return &Image{
		Kernel:   bytes.Repeat([]byte("kernel"), 1000),
		Cmdline:  "reboot=k panic=30 pci=off nomodules console=ttyS0 random.trust_cpu=on",
		Metadata: []byte(`{"ImageName":"app"}`),
		Ramdisks: [][]byte{[]byte("boot ramdisk: init and nsm.ko"), []byte("application ramdisk one"), []byte("application ramdisk two")},
	}
}

// independentPCRs reads an EIF the way its documentation lays it out,
// without this package's reader: the 548-byte big-endian header (magic,
// version, flags, memory, CPUs, reserved, section count at byte 26,
// 32 offsets from byte 28, 32 sizes from byte 284, unused, CRC), then
// each section's 12-byte header (type, flags, size). It measures as a
// register extended once from zero: PCR0 over kernel, cmdline and every
// ramdisk, PCR1 over kernel, cmdline and the first ramdisk, PCR2 over the
// other ramdisks, each SHA-384(48 zero bytes ‖ SHA-384(concatenation)).
func independentPCRs(t *testing.T, file []byte) (pcr [3][48]byte) {
	t.Helper()
	n := int(binary.BigEndian.Uint16(file[26:28]))
	var kernel, cmdline []byte
	var ramdisks [][]byte
	for i := 0; i < n; i++ {
		off := binary.BigEndian.Uint64(file[28+8*i:])
		size := binary.BigEndian.Uint64(file[284+8*i:])
		typ := binary.BigEndian.Uint16(file[off:])
		body := file[off+12 : off+12+size]
		switch typ {
		case 1:
			kernel = body
		case 2:
			cmdline = body
		case 3:
			ramdisks = append(ramdisks, body)
		}
	}
	measure := func(parts ...[]byte) [48]byte {
		d := sha512.Sum384(bytes.Join(parts, nil))
		return sha512.Sum384(append(make([]byte, 48), d[:]...))
	}
	pcr[0] = measure(append([][]byte{kernel, cmdline}, ramdisks...)...)
	pcr[1] = measure(kernel, cmdline, ramdisks[0])
	pcr[2] = measure(ramdisks[1:]...)
	if crc := crc32.ChecksumIEEE(append(append([]byte{}, file[:544]...), file[548:]...)); crc != binary.BigEndian.Uint32(file[544:]) {
		t.Errorf("CRC %#x, header %#x", crc, binary.BigEndian.Uint32(file[544:]))
	}
	return pcr
}

func write(t *testing.T, img *Image) ([]byte, PCRs) {
	t.Helper()
	var b bytes.Buffer
	pcrs, err := img.Write(&b)
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), pcrs
}

func TestWriteIsReproducibleAndMeasuredAsDocumented(t *testing.T) {
	file, pcrs := write(t, testImage())
	again, _ := write(t, testImage())
	if !bytes.Equal(file, again) {
		t.Error("two writes of one image differ")
	}
	if want := independentPCRs(t, file); pcrs.PCR0 != want[0] || pcrs.PCR1 != want[1] || pcrs.PCR2 != want[2] {
		t.Errorf("PCRs %x, computed independently %x", pcrs, want)
	}
	if string(file[:4]) != ".eif" || binary.BigEndian.Uint16(file[4:]) != 4 || binary.BigEndian.Uint64(file[8:]) != 1<<30 ||
		binary.BigEndian.Uint64(file[16:]) != 2 || binary.BigEndian.Uint16(file[26:]) != 6 {
		t.Errorf("header %x", file[:28])
	}
	// The sections in nitro-cli's order: kernel, cmdline, metadata, ramdisks.
	for i, typ := range []uint16{1, 2, 5, 3, 3, 3} {
		off := binary.BigEndian.Uint64(file[28+8*i:])
		if got := binary.BigEndian.Uint16(file[off:]); got != typ {
			t.Errorf("section %d is of type %d, want %d", i, got, typ)
		}
	}
	p0, p1, p2 := pcrs.Hex()
	if len(p0) != 96 || p0 == p1 || p1 == p2 {
		t.Errorf("hex %s %s %s", p0, p1, p2)
	}
}

// Each part moves exactly the registers that measure it.
func TestWhatEachRegisterMeasures(t *testing.T) {
	_, base := write(t, testImage())
	for _, tc := range []struct {
		name             string
		change           func(*Image)
		pcr0, pcr1, pcr2 bool
	}{
		{"kernel", func(i *Image) { i.Kernel[0] ^= 1 }, true, true, false},
		{"command line", func(i *Image) { i.Cmdline += " quiet" }, true, true, false},
		{"boot ramdisk", func(i *Image) { i.Ramdisks[0][0] ^= 1 }, true, true, false},
		{"application", func(i *Image) { i.Ramdisks[2][0] ^= 1 }, true, false, true},
		{"metadata", func(i *Image) { i.Metadata = []byte(`{"ImageName":"other"}`) }, false, false, false},
		{"defaults", func(i *Image) { i.CPUs, i.MemoryMiB = 4, 4096 }, false, false, false},
	} {
		img := testImage()
		tc.change(img)
		file, got := write(t, img)
		if (got.PCR0 != base.PCR0) != tc.pcr0 || (got.PCR1 != base.PCR1) != tc.pcr1 || (got.PCR2 != base.PCR2) != tc.pcr2 {
			t.Errorf("%s: PCR0/1/2 changed %v %v %v, want %v %v %v", tc.name, got.PCR0 != base.PCR0, got.PCR1 != base.PCR1, got.PCR2 != base.PCR2, tc.pcr0, tc.pcr1, tc.pcr2)
		}
		if want := independentPCRs(t, file); got.PCR0 != want[0] || got.PCR1 != want[1] || got.PCR2 != want[2] {
			t.Errorf("%s: PCRs differ from the independent computation", tc.name)
		}
	}
}

func TestParseRoundTripsAndRefuses(t *testing.T) {
	img := testImage()
	img.ARM64, img.Signature = true, []byte("signature")
	file, pcrs := write(t, img)
	back, err := Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	if Measure(back) != pcrs || !back.ARM64 || string(back.Signature) != "signature" || len(back.Ramdisks) != 3 {
		t.Errorf("read back %+v", back)
	}
	rewritten, _ := write(t, back)
	if !bytes.Equal(rewritten, file) {
		t.Error("parse then write changed the bytes")
	}
	corrupt := func(f func([]byte) []byte) []byte { return f(append([]byte{}, file...)) }
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"short", file[:100], "shorter than the 548-byte header"},
		{"magic", corrupt(func(b []byte) []byte { b[0] = 'x'; return b }), "no .eif magic"},
		{"version", corrupt(func(b []byte) []byte { b[5] = 3; return b }), "version 3"},
		{"flags", corrupt(func(b []byte) []byte { b[7] = 2; return b }), "unknown bits"},
		{"damaged", corrupt(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "the file is damaged"},
		{"trailing", append(append([]byte{}, file...), 0), "1 bytes after the last section"},
		{"truncated", file[:len(file)-1], "runs past the end"},
		{"count", corrupt(func(b []byte) []byte { b[27] = 33; return b }), "33 sections"},
		{"size", corrupt(func(b []byte) []byte { b[284+7]++; return b }), "sections follow each other"},
		{"order", func() []byte {
			f, _ := write(t, &Image{Kernel: []byte("k"), Ramdisks: [][]byte{{1}}})
			// Turn the metadata section into a ramdisk.
			off := binary.BigEndian.Uint64(f[28+16:])
			f[off+1] = 3
			return f
		}(), "section 2 is a ramdisk section, want metadata"},
	} {
		if _, err := Parse(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Measured in one pass from a reader, as the supervisor measures the
	// file it boots: the same PCRs, and the same refusals.
	if got, err := MeasureFile(bytes.NewReader(file), int64(len(file))); err != nil || got != pcrs {
		t.Errorf("MeasureFile: %v", err)
	}
	damaged := corrupt(func(b []byte) []byte { b[len(b)-1] ^= 1; return b })
	if _, err := MeasureFile(bytes.NewReader(damaged), int64(len(damaged))); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("MeasureFile of a damaged file: %v", err)
	}
	if _, err := MeasureFile(bytes.NewReader(file[:1000]), int64(len(file))); err == nil {
		t.Error("MeasureFile of a short read")
	}
	for _, bad := range []*Image{{Ramdisks: [][]byte{{1}}}, {Kernel: []byte("k")}, {Kernel: []byte("k"), Cmdline: "a\x00b", Ramdisks: [][]byte{{1}}}} {
		if _, err := bad.Write(&bytes.Buffer{}); err == nil {
			t.Errorf("%+v written", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	// Small seeds: minimizing a large one costs the fuzzer its time.
	for _, img := range []*Image{{Kernel: []byte("k"), Cmdline: "c", Ramdisks: [][]byte{{1}, {2}}}, {Kernel: []byte("k"), Ramdisks: [][]byte{{1}}, Signature: []byte("s"), ARM64: true}} {
		var b bytes.Buffer
		if _, err := img.Write(&b); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		img, err := Parse(data)
		pcrs, merr := MeasureFile(bytes.NewReader(data), int64(len(data)))
		if (err == nil) != (merr == nil) {
			t.Fatalf("Parse: %v; MeasureFile: %v", err, merr)
		}
		if err != nil {
			return
		}
		if Measure(img) != pcrs {
			t.Fatal("MeasureFile and Measure disagree")
		}
		var out bytes.Buffer
		if _, err := img.Write(&out); err != nil {
			t.Fatalf("a parsed image does not write: %v", err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Fatal("parse then write changed the bytes")
		}
	})
}
