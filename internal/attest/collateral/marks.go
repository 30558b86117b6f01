package collateral

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
	"github.com/cloister-cc/cloister/internal/base/atomicfile"
)

// Marks are the highest TCB evaluation data numbers accepted so far: of
// TCB info by TEE and FMSPC, of QE identities by quoting enclave. Intel
// raises the number with each TCB recovery, and older collateral keeps its
// valid signature until its next update: a PCCS (or a folder) that serves
// it after a newer one would have platforms judged by a TCB Intel has
// since found wanting. Marks refuse it, so collateral never moves
// backwards. Kept in File when set, so a restart does not forget.
type Marks struct {
	File string

	mu     sync.Mutex
	loaded bool
	m      marksFile
}

type marksFile struct {
	TCBInfo    map[string]int `json:"tcbInfo"`    // by "TEE/FMSPC"
	QEIdentity map[string]int `json:"qeIdentity"` // by quoting enclave id
}

// maxMarksFile bounds the marks file: one line per platform type.
const maxMarksFile = 1 << 20

// Admit raises the marks to v's numbers, or refuses v, naming the
// document, when either is lower than one already accepted.
func (m *Marks) Admit(v intelpcs.Version) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.load()
	tcbKey := v.TEE + "/" + v.FMSPC
	if have := m.m.TCBInfo[tcbKey]; v.TCBInfo < have {
		return fmt.Errorf("the %s TCB info for FMSPC %s has tcbEvaluationDataNumber %d, older than the %d already accepted: refused (collateral never moves backwards; is the PCCS serving collateral from before a TCB recovery?)", v.TEE, v.FMSPC, v.TCBInfo, have)
	}
	if have := m.m.QEIdentity[v.QE]; v.QEIdentity < have {
		return fmt.Errorf("the %s identity has tcbEvaluationDataNumber %d, older than the %d already accepted: refused (collateral never moves backwards; is the PCCS serving collateral from before a TCB recovery?)", v.QE, v.QEIdentity, have)
	}
	if v.TCBInfo == m.m.TCBInfo[tcbKey] && v.QEIdentity == m.m.QEIdentity[v.QE] {
		return nil
	}
	m.m.TCBInfo[tcbKey], m.m.QEIdentity[v.QE] = v.TCBInfo, v.QEIdentity
	return m.save()
}

// load reads File once; a missing or unreadable file is no marks.
func (m *Marks) load() {
	if m.loaded {
		return
	}
	m.loaded = true
	m.m = marksFile{TCBInfo: map[string]int{}, QEIdentity: map[string]int{}}
	if m.File == "" {
		return
	}
	st, err := os.Stat(m.File)
	if err != nil || st.Size() > maxMarksFile {
		return
	}
	raw, err := os.ReadFile(m.File)
	if err != nil {
		return
	}
	var f marksFile
	if json.Unmarshal(raw, &f) == nil {
		for k, n := range f.TCBInfo {
			m.m.TCBInfo[k] = n
		}
		for k, n := range f.QEIdentity {
			m.m.QEIdentity[k] = n
		}
	}
}

func (m *Marks) save() error {
	if m.File == "" {
		return nil
	}
	raw, err := json.Marshal(m.m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(m.File), 0o700); err != nil {
		return err
	}
	_, err = atomicfile.WriteIfChanged(m.File, raw, 0o600)
	return err
}
