package podpolicy

import (
	"testing"
)

// FuzzParseInitdata reads initdata documents as a guest receives them
// from the host: a policy comes out only of a well-formed document, and
// it survives a round trip through its own initdata unchanged.
func FuzzParseInitdata(f *testing.F) {
	p, err := of(pod())
	if err != nil {
		f.Fatal(err)
	}
	doc, _ := p.Initdata()
	f.Add(doc)
	f.Add([]byte("version = \"0.1.0\"\nalgorithm = \"sha256\"\n[data]\n"))
	f.Add([]byte("version = \"0.1.0\"\nalgorithm = \"sha384\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseInitdata(data)
		if err != nil {
			return
		}
		again, _ := got.Initdata()
		back, err := ParseInitdata(again)
		if err != nil || string(back.Canonical()) != string(got.Canonical()) {
			t.Fatalf("round trip: %v\n%s\n%s", err, back.Canonical(), got.Canonical())
		}
	})
}

// FuzzFromAnnotation decodes the annotation (base64 of gzip) a pod
// carries: size-limited, and an error rather than a panic.
func FuzzFromAnnotation(f *testing.F) {
	p, err := of(pod())
	if err != nil {
		f.Fatal(err)
	}
	value, _ := p.AnnotationValue()
	f.Add(value)
	f.Add("H4sIAAAAAAAA/w==")
	f.Add("not base64")
	f.Fuzz(func(t *testing.T, value string) {
		got, digest, err := FromAnnotation(value)
		if err == nil && (got == nil || len(digest) == 0) {
			t.Fatalf("a policy %v with digest %q", got, digest)
		}
	})
}
