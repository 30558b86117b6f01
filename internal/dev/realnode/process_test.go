package realnode

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A supervised daemon counts as alive while its supervisor runs, also
// when the daemon itself is not running at that moment (not yet started,
// or between restarts): here one that exits at once, every time.
func TestSupervisedDaemonIsAliveBetweenRestarts(t *testing.T) {
	dir := t.TempDir()
	sleep, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Skip("no /bin/sleep to copy")
	}
	bin := filepath.Join(dir, "fake-daemon")
	if err := os.WriteFile(bin, sleep, 0o700); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "marker")
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// sleep refuses the marker as an interval and exits at once.
	d := daemon{Bin: bin, Args: []string{marker}, Log: filepath.Join(dir, "log"), Marker: marker, Restart: true}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(marker); _ = d.Stop(time.Second) })
	for range 20 {
		if !d.alive() {
			t.Fatalf("the daemon's supervisor runs, yet it is not alive (running: %v)", d.Running())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := d.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	if d.alive() {
		t.Error("alive after Stop")
	}
}
