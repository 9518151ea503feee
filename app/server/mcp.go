package server

import (
	"fmt"
	"net/http"
	"path"
	"strings"

	"verdict/app/api"
)

// MCPPath is where HandleMCP serves the Model Context Protocol.
const MCPPath = "/mcp"

// HandleMCP serves the Model Context Protocol's streamable HTTP transport
// (app/mcpserver.Handler) at /mcp, behind the same host, origin and token
// checks as /v1/: the token comes as Authorization: Bearer TOKEN (or
// X-Verdict-Token), and a refusal is the API's JSON error.
func (s *Server) HandleMCP(h http.Handler) { s.mcp = h }

// underMCP reports whether the cleaned path is the MCP server's.
func underMCP(p string) bool {
	p = path.Clean("/" + p)
	return p == MCPPath || strings.HasPrefix(p, MCPPath+"/")
}

// serveMCP passes an authorized request to the MCP handler, unless a
// browser marks it as another site's page's.
func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request) {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		api.WriteError(w, http.StatusForbidden, api.CodeForbidden, "the MCP server is for programs: requests from another site's page are refused")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case s.mcp == nil:
		api.WriteError(w, http.StatusNotFound, api.CodeNotFound, "the MCP server is not served here")
	case path.Clean("/"+r.URL.Path) != MCPPath:
		api.WriteError(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("no route %s: the MCP server is at %s", r.URL.Path, MCPPath))
	default:
		s.mcp.ServeHTTP(w, r)
	}
}
