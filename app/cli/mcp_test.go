package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"verdict/app/mcpserver"
	"verdict/engine/catalog"
	"verdict/engine/fixture/testmodel"
)

func TestSplitCommand(t *testing.T) {
	for in, want := range map[string][]string{
		"verdict mcp --model builtin":      {"verdict", "mcp", "--model", "builtin"},
		"  a\tb  ":                         {"a", "b"},
		`'/opt/my tools/srv' --x 'a"b'`:    {"/opt/my tools/srv", "--x", `a"b`},
		`"a b" "c\"d" "e\f" "\$x"`:         {"a b", `c"d`, `e\f`, "$x"},
		`a\ b c\'d`:                        {"a b", "c'd"},
		`x'' "" ''`:                        {"x", "", ""},
		`node srv.js --name="my server"`:   {"node", "srv.js", "--name=my server"},
		"npx -y @scope/pkg@1.2.3 | tee $X": {"npx", "-y", "@scope/pkg@1.2.3", "|", "tee", "$X"},
	} {
		got, err := splitCommand(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: %q %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "   ", `a 'b`, `a "b`, `a\`} {
		if got, err := splitCommand(in); err == nil {
			t.Errorf("%q: %q, no error", in, got)
		}
	}
}

// TestMCPTools: every page of tools/list becomes the catalog, in order,
// each description on one line (the title where there is none).
func TestMCPTools(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "paged", Version: "0"}, &mcp.ServerOptions{PageSize: 2})
	want := []catalog.Entry{}
	for i := range 5 {
		tool := &mcp.Tool{Name: fmt.Sprintf("tool_%d", i), Description: fmt.Sprintf("Does\n  thing %d.\n\nWell.", i), InputSchema: map[string]any{"type": "object"}}
		want = append(want, catalog.Entry{Name: tool.Name, Description: fmt.Sprintf("Does thing %d. Well.", i)})
		if i == 4 {
			tool.Description, tool.Title = "", "The fifth"
			want[i].Description = "The fifth"
		}
		srv.AddTool(tool, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	got, err := mcpTools(context.Background(), ct)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, want, func(a, b catalog.Entry) bool { return a.Name == b.Name && a.Description == b.Description }) {
		t.Errorf("tools %+v\nwant %+v", got, want)
	}
}

// verdictCommand is a command line that runs the test binary as verdict
// (TestMain), for --from-mcp.
func verdictCommand(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(asVerdict, "1") // the child's environment; TestMain has run
	return "'" + strings.ReplaceAll(exe, "'", `'\''`) + "'"
}

// TestCatalogFromMCP: catalog --from-mcp 'verdict mcp' decodes over verdict
// mcp's own tools, exactly as --catalog does over a file of the same
// entries.
func TestCatalogFromMCP(t *testing.T) {
	testmodel.Tokenizer(t)
	cmd := verdictCommand(t) + " mcp --model builtin"
	// The same entries as a catalog file, listed in-process.
	ct, st := mcp.NewInMemoryTransports()
	ss, err := mcpserver.New(nil).Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := mcpTools(context.Background(), ct)
	ss.Close()
	if err != nil || len(entries) != 3 {
		t.Fatalf("verdict mcp's tools: %v %v", entries, err)
	}
	file := filepath.Join(t.TempDir(), "tools.json")
	b, _ := json.Marshal(entries)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"1", "3"} {
		args := []string{"--k", k, "--text", "Which tools score a support ticket?", "--json"}
		code, out, errOut := run(append([]string{"catalog", "--from-mcp", cmd}, args...)...)
		if code != 0 || !strings.Contains(errOut, "3 tools from") {
			t.Fatalf("--from-mcp: exit %d\n%s", code, errOut)
		}
		code, ref, errRef := run(append([]string{"catalog", "--catalog", file}, args...)...)
		if code != 0 {
			t.Fatalf("--catalog: exit %d\n%s", code, errRef)
		}
		var got, want struct{ Names []string }
		json.Unmarshal([]byte(out), &got)
		json.Unmarshal([]byte(ref), &want)
		if n := len(got.Names); fmt.Sprint(n) != k || !slices.Equal(got.Names, want.Names) || len(slices.Compact(slices.Sorted(slices.Values(got.Names)))) != n {
			t.Errorf("k=%s: --from-mcp %v, --catalog %v", k, got.Names, want.Names)
		}
	}
}

func TestCatalogFromMCPErrors(t *testing.T) {
	testmodel.Tokenizer(t)
	cat, _ := writeCatalog(t)
	bin := t.TempDir()
	// A server that is not one: it prints a line and waits.
	notMCP := filepath.Join(bin, "not-mcp")
	os.WriteFile(notMCP, []byte("#!/bin/sh\necho hello\nexec cat >/dev/null\n"), 0o755)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--from-mcp", "x", "--catalog", cat, "--k", "1", "--text", "x"}, 2, "give one of --catalog and --from-mcp, not both"},
		{[]string{"--from-mcp", "verdict", "mcp", "--k", "1", "--text", "x"}, 2, "quote --from-mcp's command line"},
		{[]string{"--from-mcp", "'verdict mcp", "--k", "1", "--text", "x"}, 2, "unterminated single quote"},
		{[]string{"--from-mcp", filepath.Join(bin, "missing") + " mcp", "--k", "1", "--text", "x"}, 1, "missing"},
		{[]string{"--from-mcp", notMCP, "--k", "1", "--text", "x"}, 1, "--from-mcp " + notMCP},
		{[]string{"--from-mcp", verdictCommand(t) + " mcp", "--k", "4", "--text", "x"}, 1, "k = 4, but the catalog has 3 entries"},
	} {
		code, _, errOut := run(append([]string{"catalog"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

// TestMCPCommand: verdict mcp answers the handshake, lists its tools and
// runs a call over its standard input and output, and ends when the input
// ends.
func TestMCPCommand(t *testing.T) {
	testmodel.Tokenizer(t)
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"generate","arguments":{"prompt":"hi","max_tokens":3}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"generate","arguments":{"prompt":"hi","max_tokens":0}}}`,
	}, "\n") + "\n"
	pr, pw := io.Pipe()
	old := mcpStdin
	mcpStdin = pr
	defer func() { mcpStdin = old }()
	or, ow := io.Pipe()
	var errOut bytes.Buffer
	done := make(chan error, 1)
	go func() {
		err := mcpCmd(context.Background(), []string{"--model", "builtin"}, ow, &errOut)
		ow.Close()
		done <- err
	}()
	go io.WriteString(pw, in)
	// Read the four answers, then end the input.
	answers := map[float64]map[string]any{}
	sc := bufio.NewScanner(or)
	sc.Buffer(nil, 1<<20)
	for len(answers) < 4 && sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("stdout holds %q, not a JSON-RPC message", sc.Text())
		}
		if id, ok := m["id"].(float64); ok {
			answers[id] = m
		}
	}
	pw.Close()
	go io.Copy(io.Discard, or)
	if err := <-done; err != nil || len(answers) < 4 {
		t.Fatalf("verdict mcp: %v, %d answers\n%s", err, len(answers), errOut.String())
	}
	if info := answers[1]["result"].(map[string]any)["serverInfo"].(map[string]any); info["name"] != "verdict" {
		t.Errorf("serverInfo %v", info)
	}
	if tools := answers[2]["result"].(map[string]any)["tools"].([]any); len(tools) != 3 {
		t.Errorf("%d tools", len(tools))
	}
	gen := answers[3]["result"].(map[string]any)
	if gen["isError"] == true || gen["structuredContent"].(map[string]any)["text"] == nil {
		t.Errorf("generate: %v", gen)
	}
	if bad := answers[4]["result"].(map[string]any); bad["isError"] != true || !strings.Contains(fmt.Sprint(bad["content"]), "max_tokens") {
		t.Errorf("generate with max_tokens 0: %v", bad)
	}
}

func TestMCPUsage(t *testing.T) {
	if err := mcpCmd(context.Background(), []string{"extra"}, io.Discard, io.Discard); !errors.Is(err, ErrUsage) {
		t.Errorf("mcp extra: %v", err)
	}
	var help strings.Builder
	if err := mcpCmd(context.Background(), []string{"--help"}, io.Discard, &help); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("mcp --help: %v", err)
	}
	for _, want := range []string{"score", "select_tools", "generate", "stdio", "/mcp", "-model", "-device", "-weights"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("mcp --help lacks %q:\n%s", want, help.String())
		}
	}
}
