package podpolicy

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"
)

// Annotation carries the pod's initdata. Kata hands it to the guest, and
// its digest becomes SEV-SNP HOSTDATA or TDX MRCONFIGID, so hardware
// evidence names the policy; in simulation LAS reads it from the pod.
const Annotation = "io.katacontainers.config.hypervisor.cc_init_data"

// initdata versions and digest algorithms, as Trustee's initdata
// specification names them.
const (
	InitdataVersion = "0.1.0"
	Algorithm       = "sha256"
	// DataKey is the policy's file among the initdata's data.
	DataKey = "cloister-policy.json"
	// maxInitdata bounds what decoding inflates: a policy is kilobytes.
	maxInitdata = 1 << 20
)

type initdata struct {
	Version   string            `toml:"version"`
	Algorithm string            `toml:"algorithm"`
	Data      map[string]string `toml:"data"`
}

// Initdata is the policy as an initdata document (TOML) and its digest,
// the SHA-256 of the document's bytes. It holds the policy and the kata
// agent's policy made from it, so the digest covers what the guest
// enforces.
func (p *Policy) Initdata() (doc []byte, digest string) {
	// Written here, not by a TOML encoder: the document is three fields,
	// and generate writes thousands (a decoder reads it back, strictly).
	var b bytes.Buffer
	b.Grow(20 << 10)
	b.WriteString("version = " + tomlString(InitdataVersion) + "\nalgorithm = " + tomlString(Algorithm) + "\n\n[data]\n")
	b.WriteString(tomlString(DataKey) + " = " + tomlString(string(p.Canonical())) + "\n")
	b.WriteString(tomlString(RegoKey) + " = " + tomlString(p.rego()) + "\n")
	return b.Bytes(), Digest(b.Bytes())
}

// tomlString is s as a TOML basic string: quotes and backslashes
// escaped, control characters as escapes, invalid UTF-8 replaced.
func tomlString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/8 + 2)
	b.WriteByte('"')
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// AnnotationValue is the initdata gzipped and base64-encoded, as the
// annotation carries it, and the policy's digest.
func (p *Policy) AnnotationValue() (value, digest string) {
	doc, digest := p.Initdata()
	var b bytes.Buffer
	// No name or time in the gzip header: the same policy, the same bytes.
	z := gzipWriters.Get().(*gzip.Writer)
	z.Reset(&b)
	// Writes into a bytes.Buffer cannot fail.
	_, _ = z.Write(doc)
	_ = z.Close()
	gzipWriters.Put(z)
	return base64.StdEncoding.EncodeToString(b.Bytes()), digest
}

// gzipWriters are reused: a compressor's state is a megabyte, a policy a
// few kilobytes (generate encodes thousands).
var gzipWriters = sync.Pool{New: func() any {
	// The fastest level: 14% larger than the best, at half the time.
	z, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return z
}}

// ErrNoPolicy is returned for initdata without a Cloister policy.
var ErrNoPolicy = errors.New("the initdata holds no " + DataKey)

// FromAnnotation decodes an annotation value: the policy it carries and
// the digest of its initdata document as hardware would measure it.
func FromAnnotation(value string) (*Policy, string, error) {
	raw, err := base64.StdEncoding.DecodeString(value)
	if err != nil {
		return nil, "", fmt.Errorf("annotation %s: not base64: %w", Annotation, err)
	}
	z, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, "", fmt.Errorf("annotation %s: not gzip: %w", Annotation, err)
	}
	doc, err := io.ReadAll(io.LimitReader(z, maxInitdata+1))
	if err != nil {
		return nil, "", fmt.Errorf("annotation %s: %w", Annotation, err)
	}
	if len(doc) > maxInitdata {
		return nil, "", fmt.Errorf("annotation %s: initdata larger than %d bytes", Annotation, maxInitdata)
	}
	p, err := ParseInitdata(doc)
	if err != nil {
		return nil, "", err
	}
	return p, Digest(doc), nil
}

// ParseInitdata reads an initdata document and the policy in it.
func ParseInitdata(doc []byte) (*Policy, error) {
	var d initdata
	md, err := toml.Decode(string(doc), &d)
	if err != nil {
		return nil, fmt.Errorf("initdata: %w", err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		return nil, fmt.Errorf("initdata: unknown key %s", un[0])
	}
	if d.Version != InitdataVersion {
		return nil, fmt.Errorf("initdata: version %q, want %q", d.Version, InitdataVersion)
	}
	if d.Algorithm != Algorithm {
		return nil, fmt.Errorf("initdata: algorithm %q, want %q", d.Algorithm, Algorithm)
	}
	data, ok := d.Data[DataKey]
	if !ok {
		return nil, ErrNoPolicy
	}
	var p Policy
	dec := json.NewDecoder(bytes.NewReader([]byte(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("initdata: %s: %w", DataKey, err)
	}
	if p.Version != Version {
		return nil, fmt.Errorf("initdata: %s: version %q, want %q", DataKey, p.Version, Version)
	}
	// The agent's policy is derived: one that is not the policy's own
	// would let the guest enforce something else than the identity says.
	if rego, ok := d.Data[RegoKey]; !ok || rego != p.rego() {
		return nil, fmt.Errorf("initdata: %s is missing or is not the one %s gives (made by another version?): run cloister generate again", RegoKey, DataKey)
	}
	for k := range d.Data {
		if k != DataKey && k != RegoKey {
			return nil, fmt.Errorf("initdata: unknown file %q in data", k)
		}
	}
	return &p, nil
}
