package autoupdate

import (
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	for image, want := range map[string]string{
		"ghcr.io/cloister-cc/cloister-device-plugin:v1.2.3":        "ghcr.io/cloister-cc/cloister-device-plugin v1.2.3",
		"localhost:5000/p:1.4.0@sha256:" + strings.Repeat("a", 64): "localhost:5000/p 1.4.0",
		"localhost:5000/p":             "no tag",
		"localhost:5000/p:latest":      "no release version",
		"localhost:5000/p:v1.2":        "no release version",
		"localhost:5000/p:v1.2.3-rc.1": "no release version",
		"ghcr.io/cloister-cc/cloister-las@sha256:" + strings.Repeat("b", 64): "no tag",
	} {
		l, err := ParseLine(image)
		got := l.Repository + " " + l.Tag
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", image, got, want)
		}
	}
}

func TestNewest(t *testing.T) {
	tags := []string{"v1.2.3", "v1.2.10", "v1.2.9", "v1.3.0", "v2.0.0", "v1.2.11-rc.1", "latest", "v1.2", "1.2.12+build", "sha256-abc.sig"}
	for _, tc := range []struct {
		tag, want string
		newer     bool
	}{
		{"v1.2.3", "v1.2.10", true}, // numeric order, not text: 10 > 9
		{"v1.2.10", "v1.2.10", false},
		{"v1.3.0", "v1.3.0", false}, // v2.0.0 is another line
		{"1.2.3", "v1.2.10", true},
		{"v1.2.99", "v1.2.99", false}, // never down
	} {
		got, newer := Line{Repository: "r", Tag: tc.tag}.Newest(tags)
		if got != tc.want || newer != tc.newer {
			t.Errorf("%s: %s %v, want %s %v", tc.tag, got, newer, tc.want, tc.newer)
		}
	}
}
