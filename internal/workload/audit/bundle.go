// Package audit owns the auditor bundle: everything needed to re-check,
// without the cluster, that a CAS runs a manifest and logged every
// version of it: CAS's statement over a nonce with its evidence, the
// manifest's history signed by CAS, each version's inclusion proof into
// the statement's checkpoint (C2SP tlog-proof) with its cosignatures,
// and the proof that it extends the checkpoint the workspace saw before.
// Every byte is covered by a signature or a check, so any change fails a
// claim, which the verdict names.
package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cloister-cc/cloister/internal/base/strictjson"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Type names the bundle's format.
const Type = "cloister.dev/audit-bundle/v1"

// MaxBundle bounds a bundle read.
const MaxBundle = 16 << 20

// Bundle is an auditor bundle.
type Bundle struct {
	Type string `json:"type"`
	// Manifest is the manifest's name; Records its history, oldest
	// first, signed by CAS's history key (the statement's).
	Manifest string        `json:"manifest"`
	Records  []wire.Record `json:"records"`
	// Nonce is what CAS's statement answers; CAS is the answer, without
	// its TLS certificate (the statement names the key).
	Nonce []byte       `json:"nonce"`
	CAS   wire.Vouched `json:"cas"`
	// Proofs are each record's inclusion proof into the statement's
	// checkpoint, C2SP tlog-proof text, in Records' order.
	Proofs []string `json:"proofs"`
	// Remembered is the checkpoint the workspace saw before, and
	// Consistency the proof that the statement's extends it.
	Remembered  string   `json:"remembered,omitempty"`
	Consistency [][]byte `json:"consistency,omitempty"`
}

// Marshal is the bundle's canonical form: compact JSON and a newline.
func (b *Bundle) Marshal() ([]byte, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	return append(raw, '\n'), nil
}

// Parse reads a bundle strictly, and only in its canonical form: JSON
// takes field names in any case and base64 with stray bits, which would
// let a byte change and no claim fail.
func Parse(data []byte) (*Bundle, error) {
	if len(data) > MaxBundle {
		return nil, fmt.Errorf("a bundle of %d bytes: at most %d", len(data), MaxBundle)
	}
	var b Bundle
	if err := strictjson.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("the bundle: %w", err)
	}
	if b.Type != Type {
		return nil, fmt.Errorf("the bundle: type %q, want %q", b.Type, Type)
	}
	again, err := b.Marshal()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(again, data) {
		return nil, errors.New("the bundle is not in the form cloister verify writes (changed after it was written?)")
	}
	return &b, nil
}
