package cas

import (
	"encoding/json"
	"errors"
	"io"
	"os"

	"github.com/cloister-cc/cloister/internal/base/atomicfile"
	"github.com/cloister-cc/cloister/internal/cas/statemark"
)

// StateMarkFile is where a replica keeps its high-water mark of the state
// in its state folder (the claim): a restart on a state rolled back or
// removed meanwhile, with this folder kept, refuses it. Its MAC is under a
// key from the seed, so a copy edited without it is ignored; a node's root
// or the admin can still remove it or put back an older copy.
const StateMarkFile = "state-mark.json"

// markFile is statemark.MarkStore on a file.
type markFile struct{ path string }

func (f markFile) Load() (*statemark.Mark, error) {
	fh, err := os.Open(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = fh.Close() }()
	raw, err := io.ReadAll(io.LimitReader(fh, 1<<20))
	if err != nil {
		return nil, err
	}
	return statemark.Parse(raw)
}

func (f markFile) Save(m *statemark.Mark) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = atomicfile.WriteIfChanged(f.path, raw, 0o600)
	return err
}
