package checkoutsaga

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxLines is the README's budget: a front door (what the product is, the two
// commands, one purchase, the layout, the dependencies and the list of documents), with
// every further topic a file in docs/.
const readmeMaxLines = 250

// documents are the pages whose links must resolve: the README, CONTRIBUTING.md and docs/.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 5 {
		t.Fatalf("docs/ holds %d pages; the test runs in the wrong folder", len(docs))
	}
	return append([]string{"README.md", "CONTRIBUTING.md"}, docs...)
}

// TestDocsLinksResolve reads every link of the documents and fails on one that leaves the
// repository, points at a file that does not exist, or names a #heading the page does not
// have. Web addresses (http, https, mailto) are not fetched.
func TestDocsLinksResolve(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	for _, doc := range documents(t) {
		for _, l := range markdownLinks(t, doc) {
			links++
			target := l.target
			if u, err := url.Parse(target); err == nil && u.Scheme != "" {
				if u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "mailto" {
					t.Errorf("%s:%d: link %q: only http, https and mailto addresses, or paths in the repository", doc, l.line, target)
				}
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			if strings.HasPrefix(path, "/") {
				t.Errorf("%s:%d: link %q: write it relative to %s", doc, l.line, target, doc)
				continue
			}
			file := doc
			if path != "" {
				p, err := url.PathUnescape(path)
				if err != nil {
					t.Errorf("%s:%d: link %q: %v", doc, l.line, target, err)
					continue
				}
				file = filepath.Join(filepath.Dir(doc), filepath.FromSlash(p))
				abs, _ := filepath.Abs(file)
				if abs != root && !strings.HasPrefix(abs, root+string(filepath.Separator)) {
					t.Errorf("%s:%d: link %q leaves the repository", doc, l.line, target)
					continue
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", doc, l.line, target, filepath.ToSlash(file))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(file, ".md") {
				t.Errorf("%s:%d: link %q: a #heading in a file that is not Markdown", doc, l.line, target)
				continue
			}
			if !slices.Contains(headingAnchors(t, file), anchor) {
				t.Errorf("%s:%d: link %q: %s has no heading whose anchor is #%s", doc, l.line, target, filepath.ToSlash(file), anchor)
			}
		}
	}
	if links < 50 {
		t.Fatalf("found %d links in the documents; the link pattern no longer matches them", links)
	}
}

// TestReadmeIsAFrontDoor keeps the README within its budget: a topic that needs more room
// gets a page in docs/ and a line in the README's list of documents.
func TestReadmeIsAFrontDoor(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move a topic to its own page in docs/ and list it under Documents", n, readmeMaxLines)
	}
	for _, doc := range documents(t)[2:] {
		if !strings.Contains(string(raw), "("+filepath.ToSlash(doc)+")") {
			t.Errorf("README.md does not list %s under Documents", filepath.ToSlash(doc))
		}
	}
}

// TestReadmeExplainsEveryDirectDependency: every direct requirement of go.mod has a row in
// the README's dependency table, and every module in that table is a direct requirement.
func TestReadmeExplainsEveryDirectDependency(t *testing.T) {
	direct := directRequirements(t, "go.mod")
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## Dependencies\n")
	if !ok {
		t.Fatal(`README.md has no "## Dependencies" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	// The first table is go.mod's; the tables after it are tools pinned elsewhere.
	var listed []string
	inTable := false
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		for _, m := range modulePath.FindAllStringSubmatch(strings.Split(line, "|")[1], -1) {
			listed = append(listed, m[1])
		}
	}
	for _, mod := range direct {
		if !slices.Contains(listed, mod) {
			t.Errorf("go.mod requires %s directly, and the README's Dependencies table does not say why", mod)
		}
	}
	for _, mod := range listed {
		if !slices.Contains(direct, mod) {
			t.Errorf("the README's Dependencies table lists %s, which go.mod does not require directly", mod)
		}
	}
	if len(direct) < 10 {
		t.Fatalf("go.mod has %d direct requirements; the parser no longer reads it", len(direct))
	}
}

var modulePath = regexp.MustCompile("`([a-z0-9.-]+\\.[a-z]+/[^`\\s]+)`")

// directRequirements are the modules go.mod requires without "// indirect".
func directRequirements(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	inBlock := false
	for line := range strings.SplitSeq(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		if f := strings.Fields(line); len(f) >= 2 && !strings.Contains(line, "// indirect") {
			mods = append(mods, f[0])
		}
	}
	return mods
}

type markdownLink struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*(\S+)`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
)

// markdownLinks returns the targets of a page's inline links and images and of its link
// reference definitions, outside fenced code blocks and code spans.
func markdownLinks(t *testing.T, path string) []markdownLink {
	t.Helper()
	var links []markdownLink
	for n, line := range proseLines(t, path) {
		if line == "" {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			links = append(links, markdownLink{line: n + 1, target: strings.Trim(m[1], "<>")})
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			links = append(links, markdownLink{line: n + 1, target: strings.Trim(m[1], "<>")})
		}
	}
	return links
}

// proseLines returns a page's lines with those of fenced code blocks blanked, so that line
// numbers stay true.
func proseLines(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return lines
}

var atxHeading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// headingAnchors returns the anchors GitHub gives a page's headings: lower case, with
// everything but letters, digits, spaces, hyphens and underscores dropped and spaces made
// hyphens; a repeated anchor gets -1, -2, ...
func headingAnchors(t *testing.T, path string) []string {
	t.Helper()
	var anchors []string
	seen := map[string]int{}
	for _, line := range proseLines(t, path) {
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			a += "-" + strconv.Itoa(n)
		}
		seen[b.String()]++
		anchors = append(anchors, a)
	}
	return anchors
}
