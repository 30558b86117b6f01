package attest

import (
	"bytes"
	"crypto/sha512"
	"fmt"
)

// A Cloister enclave's orchestrator extends one PCR per manifest it
// applies, the first into NitroManifestPCR and each later one into the
// next, and locks each: the evidence shows every manifest the enclave ran
// since boot, in order, and none can be changed or taken back.
const (
	NitroManifestPCR   = 16
	NitroManifestSlots = 16 // PCR16 to PCR31
)

// NitroExtend is the Nitro Secure Module's PCR extension of a PCR whose
// value is prev (nil: a fresh PCR, 48 zero bytes): SHA-384(prev || data).
func NitroExtend(prev, data []byte) Bytes {
	if prev == nil {
		prev = make([]byte, sha512.Size384)
	}
	h := sha512.New384()
	h.Write(prev)
	h.Write(data)
	return h.Sum(nil)
}

// manifestMismatch says why a Nitro enclave's PCRs do not show manifest
// as the one and only manifest it applied since boot, or "": a manifest
// run before it, or after it (a change taken back included), could have
// left anything behind in the enclave.
func manifestMismatch(pcrs map[int]Bytes, manifest Bytes) string {
	want := NitroExtend(nil, manifest)
	got := pcrs[NitroManifestPCR]
	if !bytes.Equal(got, want) {
		return fmt.Sprintf("PCR%d (the first manifest the enclave applied) is %s, want %s, the pinned manifest %s: the host changed what the enclave runs",
			NitroManifestPCR, got, want, manifest)
	}
	for i := NitroManifestPCR + 1; i < NitroManifestPCR+NitroManifestSlots; i++ {
		if v := pcrs[i]; len(v) > 0 && bytes.Count(v, []byte{0}) != len(v) {
			return fmt.Sprintf("PCR%d is %s: the enclave applied another manifest after the pinned one, so the host changed what the enclave runs (if only for a while); pin a freshly started enclave", i, v)
		}
	}
	return ""
}
