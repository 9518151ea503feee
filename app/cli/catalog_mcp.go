package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"verdict/app/mcpserver"
	"verdict/engine/catalog"
)

// mcpListTimeout bounds starting an MCP server and listing its tools.
const mcpListTimeout = 2 * time.Minute

// catalogEntries reads the catalog of `verdict catalog`: the JSON file
// catFile, or the tools of the MCP server that the command line fromMCP
// starts. name labels the catalog in errors.
func catalogEntries(ctx context.Context, catFile, fromMCP string, stderr io.Writer) (entries []catalog.Entry, name string, err error) {
	if fromMCP == "" {
		data, err := readInput(catFile)
		if err != nil {
			return nil, catFile, err
		}
		entries, err := catalog.ParseEntries(data)
		if err != nil {
			return nil, catFile, fmt.Errorf("%s: %w", catFile, err)
		}
		return entries, catFile, nil
	}
	name = "the tools of " + fromMCP
	argv, err := splitCommand(fromMCP)
	if err != nil {
		return nil, name, usageErr("--from-mcp: %v", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = stderr
	ctx, cancel := context.WithTimeout(ctx, mcpListTimeout)
	defer cancel()
	entries, err = mcpTools(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no tool list within %v: %w", mcpListTimeout, err)
		}
		return nil, name, fmt.Errorf("--from-mcp %s: %w", fromMCP, err)
	}
	if len(entries) == 0 {
		return nil, name, fmt.Errorf("--from-mcp %s: the server lists no tools", fromMCP)
	}
	fmt.Fprintf(stderr, "verdict catalog: %d tools from %s\n", len(entries), fromMCP)
	return entries, name, nil
}

// mcpTools connects to an MCP server over t and returns its tools, every
// page of tools/list, as catalog entries: the tool's name, and its
// description (or title) on one line.
func mcpTools(ctx context.Context, t mcp.Transport) ([]catalog.Entry, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "verdict-catalog", Version: mcpserver.Version}, nil)
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	var out []catalog.Entry
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		d := tool.Description
		if strings.TrimSpace(d) == "" {
			d = tool.Title
		}
		out = append(out, catalog.Entry{Name: tool.Name, Description: strings.Join(strings.Fields(d), " ")})
	}
	return out, nil
}

// splitCommand splits a command line into words as a POSIX shell does for
// simple quoting: words are separated by unquoted blanks; single quotes keep
// everything up to the next single quote; double quotes keep everything up
// to the next unescaped double quote, a backslash escaping \ " $ ` there;
// outside quotes a backslash keeps the next character. Expansions,
// redirections and pipes are not interpreted: they are plain text.
func splitCommand(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\'':
			inWord = true
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, fmt.Errorf("%q: unterminated single quote", s)
			}
			w.WriteString(string(rs[i+1 : j]))
			i = j
		case c == '"':
			inWord = true
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && strings.ContainsRune("\\\"$`", rs[j+1]) {
					j++
				}
				w.WriteRune(rs[j])
			}
			if j == len(rs) {
				return nil, fmt.Errorf("%q: unterminated double quote", s)
			}
			i = j
		case c == '\\':
			inWord = true
			if i+1 == len(rs) {
				return nil, fmt.Errorf("%q: a backslash at the end", s)
			}
			i++
			w.WriteRune(rs[i])
		default:
			inWord = true
			w.WriteRune(c)
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	if len(words) == 0 {
		return nil, errors.New("the command line is empty")
	}
	return words, nil
}
