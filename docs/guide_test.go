package docs

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cli"
	"github.com/cloister-cc/cloister/internal/deviceplugin"
)

// guidePages are the user's guide in the journey's order: the README
// links each, and each links the next.
var guidePages = []string{
	"install.md", "devices.md", "evidence.md", "cas.md", "policies.md",
	"workloads.md", "verify.md", "mesh.md", "vault.md", "nitro.md", "cryptoexpress.md", "dra.md",
}

// maxReadmeLines keeps the README a front door: a topic of its own goes to
// a guide page.
const maxReadmeLines = 200

// The README is short, shows the picture, the kinds and the support matrix,
// and links every guide page; each page exists, starts with its title and
// the journey, and puts the evidence policy format before the first page
// that uses it.
func TestGuidePages(t *testing.T) {
	readme := readFile(t, "../README.md")
	if n := strings.Count(readme, "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the topic to its guide page under docs/", n, maxReadmeLines)
	}
	for _, want := range []string{"docs/overview.svg", "## The kinds", "## Support matrix", "make demo", "make test", "go install", "docs/glossary.md", "security.md#known-gaps"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md does not contain %q", want)
		}
	}
	if _, err := os.Stat("overview.svg"); err != nil {
		t.Errorf("the README's picture: %v", err)
	}
	for _, kind := range []string{"SGXPlugin", "LAS", "ConfidentialRuntime", "NitroPlugin", "CEXPlugin", "CAS", "SignedPolicy", "EncryptedPolicy", "NitroEnclaveDeployment", "Vault"} {
		if !regexp.MustCompile(`(?m)^\| [^|]+ \| ` + kind + ` \|`).MatchString(readme) {
			t.Errorf("README.md's kinds table has no row for %s", kind)
		}
	}
	for _, tee := range []string{"SGX", "TDX", "SEV-SNP", "Nitro Enclaves", "CryptoExpress"} {
		if !strings.Contains(readme, "| "+tee+" ") {
			t.Errorf("README.md's support matrix has no column for %s", tee)
		}
	}
	evidencePolicy := -1
	for i, page := range guidePages {
		if !strings.Contains(readme, "(docs/"+page) {
			t.Errorf("README.md does not link docs/%s", page)
		}
		text := readFile(t, page)
		if !strings.HasPrefix(text, "# ") || !strings.Contains(text, "*Journey:") {
			t.Errorf("%s: a guide page starts with its title and the journey line", page)
		}
		if i+1 < len(guidePages) && !strings.Contains(text, "("+guidePages[i+1]) {
			t.Errorf("%s does not link the next page, %s", page, guidePages[i+1])
		}
		if strings.Contains(text, "## The evidence policy") {
			evidencePolicy = i
		}
		if uses := strings.Contains(text, "evidence.md#the-evidence-policy"); uses && (evidencePolicy < 0 || evidencePolicy > i) {
			t.Errorf("%s uses the evidence policy format before a page defines it", page)
		}
	}
	if evidencePolicy < 0 {
		t.Error("no guide page has the section \"## The evidence policy\"")
	}
}

// The glossary defines every word the pages use in more than one sense or
// take from a vendor.
func TestGlossary(t *testing.T) {
	text := readFile(t, "glossary.md")
	for _, term := range []string{
		"CAS policy", "SignedPolicy / EncryptedPolicy", "Evidence policy", "Pod policy", "Agent policy",
		"Board", "Recovery owner", "Seed share", "Manifest", "Initdata", "PCR", "APQN", "Collateral", "TCB",
	} {
		if !strings.Contains(text, "**"+term+"**") {
			t.Errorf("docs/glossary.md does not define **%s**", term)
		}
	}
}

// Every flag in a shell block of the README and the guide exists on the
// command it is given to, so a renamed or removed flag cannot leave the
// documentation behind.
func TestCommandBlocksUseRealFlags(t *testing.T) {
	files := []string{"../README.md"}
	mds, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, mds...)
	checked := 0
	for _, file := range files {
		for _, line := range shellLines(readFile(t, file)) {
			for _, words := range commands(line) {
				if problem, ok := checkCommand(words); ok {
					checked++
					if problem != "" {
						t.Errorf("%s: %s\n\t%s", file, problem, line)
					}
				}
			}
		}
	}
	if checked < 40 {
		t.Errorf("checked only %d commands: the block parser no longer finds them", checked)
	}
}

// checkCommand checks the flags of one command line of Cloister's binaries;
// ok is false for any other program.
func checkCommand(words []string) (problem string, ok bool) {
	if len(words) > 1 && words[0] == "kubectl" && words[1] == "cloister" {
		words = words[1:]
	}
	if len(words) == 0 {
		return "", false
	}
	switch filepath.Base(words[0]) {
	case "cloister":
		return checkCobra(cli.NewRoot(cli.Streams{}), words[1:]), true
	case "cloister-device-plugin":
		return checkCobra(deviceplugin.NewCommand(), words[1:]), true
	case "cloister-cas":
		fs := flag.NewFlagSet("cloister-cas", flag.ContinueOnError)
		if len(words) > 1 && words[1] == "backup" {
			(&cas.BackupConfig{}).AddFlags(fs)
		} else {
			(&cas.Config{}).AddFlags(fs)
		}
		fs.String(startup.LogLevelFlag, "", "")
		for _, name := range flagNames(words[1:]) {
			if fs.Lookup(strings.TrimLeft(name, "-")) == nil {
				return "cloister-cas has no flag " + name, true
			}
		}
		return "", true
	}
	return "", false
}

func checkCobra(root *cobra.Command, args []string) string {
	cmd, _, err := root.Find(args)
	if err != nil {
		return err.Error()
	}
	cmd.InitDefaultHelpFlag()
	for _, name := range flagNames(args) {
		var f *pflag.Flag
		if long, ok := strings.CutPrefix(name, "--"); ok {
			f = cmd.Flags().Lookup(long)
			if f == nil {
				f = cmd.InheritedFlags().Lookup(long)
			}
		} else {
			short := strings.TrimPrefix(name, "-")
			f = cmd.Flags().ShorthandLookup(short)
			if f == nil {
				f = cmd.InheritedFlags().ShorthandLookup(short)
			}
		}
		if f == nil {
			return cmd.CommandPath() + " has no flag " + name
		}
	}
	return ""
}

var flagPattern = regexp.MustCompile(`^(--[a-z][a-z0-9-]*|-[a-zA-Z])(=.*)?$`)

// flagNames are the flags among a command's words, up to a "--" that hands
// the rest to another program.
func flagNames(words []string) []string {
	var names []string
	for _, w := range words {
		if w == "--" {
			break
		}
		if m := flagPattern.FindStringSubmatch(strings.Trim(w, "[]")); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

// shellLines are the command lines of a document's sh blocks, with
// continuation lines joined, comments and prompts removed, and heredoc bodies
// left out.
func shellLines(doc string) []string {
	var lines []string
	in, heredoc, cont := false, "", ""
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "```sh") || strings.HasPrefix(line, "```bash"):
			in = true
			continue
		case strings.HasPrefix(line, "```"):
			in = false
			continue
		case !in:
			continue
		case heredoc != "":
			if strings.TrimSpace(line) == heredoc {
				heredoc = ""
			}
			continue
		}
		line = stripComment(strings.TrimPrefix(line, "$ "))
		if i := strings.Index(line, "<<"); i >= 0 {
			heredoc = strings.Trim(strings.TrimSpace(line[i+2:]), `'"-`)
		}
		if strings.HasSuffix(line, `\`) {
			cont += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		if l := strings.TrimSpace(cont + line); l != "" {
			lines = append(lines, l)
		}
		cont = ""
	}
	return lines
}

// stripComment removes a "#" comment that starts outside quotes after a
// space or at the start of the line.
func stripComment(line string) string {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' '):
			return line[:i]
		}
	}
	return line
}

// commands splits a shell line into its simple commands' words: at pipes,
// ";", "&&", "||" and redirections outside quotes and brackets (a usage
// line's "[-t a|b]"), with each "$(...)" a command of its own.
func commands(line string) [][]string {
	var out [][]string
	var words []string
	var word strings.Builder
	flushWord := func() {
		if word.Len() > 0 {
			words = append(words, word.String())
			word.Reset()
		}
	}
	flushCommand := func() {
		flushWord()
		if len(words) > 0 {
			out = append(out, words)
		}
		words = nil
	}
	var quote rune
	brackets := 0
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else if r == '$' && quote == '"' && i+1 < len(rs) && rs[i+1] == '(' {
				end := closing(rs, i+1)
				out = append(out, commands(string(rs[i+2:end]))...)
				word.WriteString("SUBST")
				i = end
			} else {
				word.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			end := closing(rs, i+1)
			out = append(out, commands(string(rs[i+2:end]))...)
			word.WriteString("SUBST")
			i = end
		case r == '[':
			brackets++
			word.WriteRune(r)
		case r == ']':
			brackets--
			word.WriteRune(r)
		case brackets == 0 && (r == '|' || r == ';' || r == '&' || r == '>' || r == '<'):
			flushCommand()
			if r == '>' || r == '<' {
				// The redirection's target is not a word of the command.
				for i+1 < len(rs) && (rs[i+1] == '>' || rs[i+1] == '&' || rs[i+1] == ' ') {
					i++
				}
				for i+1 < len(rs) && rs[i+1] != ' ' {
					i++
				}
			}
		case r == ' ' || r == '\t':
			flushWord()
		default:
			word.WriteRune(r)
		}
	}
	flushCommand()
	return out
}

// closing is the index of the ")" that closes the "(" at open.
func closing(rs []rune, open int) int {
	depth := 0
	for i := open; i < len(rs); i++ {
		switch rs[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return len(rs) - 1
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
