package client

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// unquote reads one line the env file holds, as a POSIX shell would: a
// bare value, or single-quoted, a quote inside written as quote, backslash,
// quote, quote.
func unquote(t *testing.T, line string) (string, string) {
	t.Helper()
	name, value, ok := strings.Cut(line, "=")
	if !ok {
		t.Fatalf("env line %q has no =", line)
	}
	if !strings.HasPrefix(value, "'") {
		if strings.ContainsAny(value, " \t\n'\"$`\\;&|<>()*?[]#~") {
			t.Fatalf("bare value %q holds a character the shell reads", value)
		}
		return name, value
	}
	var b strings.Builder
	rest := value
	for rest != "" {
		if !strings.HasPrefix(rest, "'") {
			t.Fatalf("env line %q: text outside quotes: %q", line, rest)
		}
		end := strings.Index(rest[1:], "'")
		if end < 0 {
			t.Fatalf("env line %q: an unterminated quote", line)
		}
		b.WriteString(rest[1 : 1+end])
		rest = rest[2+end:]
		if strings.HasPrefix(rest, `\''`) {
			b.WriteString("'")
			rest = rest[2:]
		}
	}
	return name, b.String()
}

// FuzzWrite writes what CAS sends a workload (its files by path, its
// environment) into the workload's folder: nothing lands outside it, each
// file holds what was sent, and the env file gives back exactly the value
// sent, whatever the path, name or value.
func FuzzWrite(f *testing.F) {
	f.Add("config/app.yaml", "key: v", "DB_PASSWORD", "s3cr3t")
	f.Add("../../etc/passwd", "x", "A", "it's $HOME `id`\nEVIL=1")
	f.Add("/abs/path", "", "_", "")
	f.Add("a/./b/../c", "c", "PATH", "/bin:/usr/bin")
	f.Fuzz(func(t *testing.T, path, content, name, value string) {
		outer := t.TempDir()
		dir := filepath.Join(outer, "workload")
		res := &wire.AttestResult{Content: wire.Content{Env: map[string]string{name: value}, Files: map[string]string{path: content}}}
		if err := write(dir, res, []byte("key")); err != nil {
			return
		}
		err := filepath.WalkDir(outer, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p != outer && p != dir && !strings.HasPrefix(p, dir+string(filepath.Separator)) {
				t.Fatalf("%q written outside the workload's folder (path %q)", p, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, FilesDir, filepath.Clean(strings.TrimPrefix(path, "/"))))
		if err != nil || string(got) != content {
			t.Fatalf("file %q: %v, content %q want %q", path, err, got, content)
		}
		env, err := os.ReadFile(filepath.Join(dir, EnvFile))
		if err != nil {
			t.Fatal(err)
		}
		gotName, gotValue := unquote(t, strings.TrimSuffix(string(env), "\n"))
		if gotName != name || gotValue != value {
			t.Fatalf("env %q=%q read back as %q=%q", name, value, gotName, gotValue)
		}
	})
}
