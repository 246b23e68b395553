package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"regexp"
	"strings"

	"github.com/tether-dev/tether/actor/engine/llm"
	"github.com/tether-dev/tether/actor/engine/mcptools"
)

// mcpFlags are serve's --mcp and --mcp-header, for --agent openai.
type mcpFlags struct {
	servers listFlag // [NAME=]URL
	headers listFlag // [NAME=]Header: value
}

func (m *mcpFlags) bind(fs *flags) {
	m.servers.sep, m.headers.sep = ",", "\n"
	fs.Var(&m.servers, "mcp", "MCP server (streamable HTTP) whose tools --agent openai offers the model, as `[NAME=]URL`; "+
		"repeat for several ("+envName("mcp")+": comma-separated). NAME (default mcp1, mcp2…) names it to the model and to --mcp-header")
	fs.bind("mcp", envName("mcp"))
	fs.Var(&m.headers, "mcp-header", "header sent to the MCP servers, as `[NAME=]Header: value` (with NAME= only to that one), "+
		"e.g. 'Authorization: Bearer …'; repeatable; prefer "+envName("mcp-header")+" (one a line): a flag shows in ps")
	fs.bind("mcp-header", envName("mcp-header"))
}

var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// config turns the flags into the servers to take tools from.
func (m *mcpFlags) config() ([]mcptools.Server, error) {
	var servers []mcptools.Server
	byName := map[string]int{}
	for i, spec := range m.servers.vals {
		name, u := "", spec
		if j := strings.Index(spec, "="); j > 0 && !strings.ContainsAny(spec[:j], ":/") {
			name, u = spec[:j], spec[j+1:]
		}
		if name == "" {
			name = fmt.Sprintf("mcp%d", i+1)
		}
		if err := mcptools.CheckURL(u); err != nil {
			return nil, fmt.Errorf("serve: --mcp %s: %w", name, err)
		}
		if _, dup := byName[name]; dup {
			return nil, fmt.Errorf("serve: --mcp: two servers are named %q", name)
		}
		byName[name] = len(servers)
		servers = append(servers, mcptools.Server{Name: name, URL: u})
	}
	for _, spec := range m.headers.vals {
		colon := strings.Index(spec, ":")
		if colon < 0 {
			return nil, fmt.Errorf("serve: --mcp-header wants [NAME=]Header: value, got no colon")
		}
		target, kv := "", spec
		if j := strings.Index(spec[:colon], "="); j >= 0 {
			target, kv, colon = spec[:j], spec[j+1:], colon-j-1
		}
		key, val := strings.TrimSpace(kv[:colon]), strings.TrimSpace(kv[colon+1:])
		if !headerNameRE.MatchString(key) {
			// The value is left out: it is likely a secret.
			return nil, fmt.Errorf("serve: --mcp-header: %q is not a header name", key)
		}
		for i := range servers {
			if target != "" && servers[i].Name != target {
				continue
			}
			if servers[i].Header == nil {
				servers[i].Header = http.Header{}
			}
			servers[i].Header.Add(textproto.CanonicalMIMEHeaderKey(key), val)
		}
		if _, ok := byName[target]; target != "" && !ok {
			return nil, fmt.Errorf("serve: --mcp-header %s=…: no --mcp server is named %q", target, target)
		}
	}
	if len(m.headers.vals) > 0 && len(servers) == 0 {
		return nil, fmt.Errorf("serve: --mcp-header without --mcp")
	}
	return servers, nil
}

// toolSet starts keeping the MCP servers' tools, for the openai engine
// whose own tools are builtin; nil without --mcp. It waits a little for
// the servers' first answers (a server that does not answer is retried
// in the background, never an error).
func (m *mcpFlags) toolSet(ctx context.Context, builtin []llm.Tool, logger *slog.Logger) (*mcptools.Set, error) {
	servers, err := m.config()
	if err != nil || len(servers) == 0 {
		return nil, err
	}
	reserved := make([]string, len(builtin))
	for i, t := range builtin {
		reserved[i] = t.Name
	}
	set, err := mcptools.New(ctx, mcptools.Config{Servers: servers, Reserved: reserved, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	tools, note := set.OpenAITools()
	logger.Info("MCP tools", "servers", len(servers), "tools", len(tools), "unavailable", note != "")
	return set, nil
}
