// Package responsesapi is a scripted stand-in for OpenAI's Responses API on
// loopback, so the tests can run the real Codex CLI whole (`codex exec`,
// its sandboxed commands, its --json events, its threads) with no network.
// Point the CLI at it with a custom model provider (ProviderArgs) and any
// key in OPENAI_API_KEY.
//
// The wire shapes follow OpenAI's Responses streaming reference
// (platform.openai.com/docs/api-reference/responses-streaming): `POST
// /v1/responses` with `stream: true` answered as server-sent events
// response.created, response.output_item.added / .done per item (a
// message with output_text, or a function_call), response.output_text.delta
// and response.completed carrying usage {input_tokens,
// input_tokens_details.cached_tokens, output_tokens,
// output_tokens_details.reasoning_tokens}; errors as `{"error": {"type",
// "code", "message"}}` with the HTTP status.
//
// Stateless per request: the step is the number of assistant items
// (messages and function calls) in the request's input, so a resumed
// thread (codex exec resume) continues the script.
package responsesapi

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Step is one answer: a command for the exec_command tool (Cmd), text, or
// an API error (Status).
type Step struct {
	Text string
	// Cmd is a shell command the model asks Codex to run (exec_command).
	Cmd        string
	Status     int
	RetryAfter int
	// Once answers this step the first time only, as a transient failure:
	// an error leaves nothing in the conversation, so a later request at
	// its place (a resumed thread) goes on to the steps after it.
	Once bool
	// InputTokens, CachedTokens, OutputTokens and ReasoningTokens are the
	// usage the answer reports.
	InputTokens, CachedTokens, OutputTokens, ReasoningTokens int
}

// Script answers the agent loop; past the end, the last step again.
type Script struct{ Steps []Step }

// Request is what the server saw of one call.
type Request struct {
	Step int
	// Texts are the input_text parts of the request's user messages.
	Texts []string
}

// Server serves a Script on a loopback port.
type Server struct {
	URL    string
	script Script
	srv    *http.Server
	mu     sync.Mutex
	reqs   []Request
	spent  map[int]bool // the Once steps answered
}

// Start serves script on 127.0.0.1 until Close.
func Start(script Script) (*Server, error) {
	if len(script.Steps) == 0 {
		return nil, fmt.Errorf("responsesapi: a script needs at least one step")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), script: script, spent: map[int]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/responses", s.responses)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"type": "not_found", "message": "no route " + r.URL.Path}})
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// ProviderArgs are the `codex` flags that make it use this server as its
// model provider (Codex's config: model_providers.<id>.base_url,
// wire_api, env_key), with model gpt-5-codex.
func (s *Server) ProviderArgs() []string {
	return []string{"-c", "model_provider=fleettest", "-c", `model_providers.fleettest.name="fleettest"`,
		"-c", `model_providers.fleettest.base_url="` + s.URL + `/v1"`, "-c", `model_providers.fleettest.wire_api="responses"`,
		"-c", `model_providers.fleettest.env_key="OPENAI_API_KEY"`, "-m", "gpt-5-codex"}
}

// CodexConfig is ProviderArgs as a $CODEX_HOME/config.toml, for a codex
// run whose command line is not the test's (a factory's preset), with
// Codex's own retries off so that a scripted error ends the turn.
func (s *Server) CodexConfig() []byte {
	return []byte(`model = "gpt-5-codex"
model_provider = "fleettest"

[model_providers.fleettest]
name = "fleettest"
base_url = "` + s.URL + `/v1"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
request_max_retries = 0
stream_max_retries = 0
`)
}

// Requests returns the calls seen so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

type item struct {
	Type    string `json:"type"`
	Role    string `json:"role"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Input []item `json:"input"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": err.Error()}})
		return
	}
	step, seen := 0, Request{}
	for _, it := range req.Input {
		switch {
		case it.Type == "function_call", it.Type == "message" && it.Role == "assistant":
			step++
		case it.Type == "message" && it.Role == "user":
			for _, c := range it.Content {
				if c.Type == "input_text" {
					seen.Texts = append(seen.Texts, c.Text)
				}
			}
		}
	}
	s.mu.Lock()
	for i := 0; i <= step && i < len(s.script.Steps); i++ {
		if s.script.Steps[i].Once && s.spent[i] {
			step++ // answered before: its place is the next step's
		}
	}
	step = min(step, len(s.script.Steps)-1)
	if s.script.Steps[step].Once {
		s.spent[step] = true
	}
	seen.Step = step
	s.reqs = append(s.reqs, seen)
	s.mu.Unlock()
	st := s.script.Steps[step]
	if st.Status != 0 {
		if st.RetryAfter > 0 {
			w.Header().Set("retry-after", strconv.Itoa(st.RetryAfter))
		}
		code := "rate_limit_exceeded"
		writeJSON(w, st.Status, map[string]any{"error": map[string]any{"type": "requests", "code": code,
			"message": "Rate limit reached for gpt-5-codex (scripted). Please try again in 1s."}})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	n := time.Now().UnixNano()
	send := func(data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", data["type"], b)
	}
	respID := fmt.Sprintf("resp_%d", n)
	send(map[string]any{"type": "response.created", "response": map[string]any{"id": respID, "object": "response", "status": "in_progress", "output": []any{}}})
	var done map[string]any
	if st.Cmd != "" {
		args, _ := json.Marshal(map[string]any{"cmd": st.Cmd})
		done = map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", n), "call_id": fmt.Sprintf("call_%d", n),
			"name": "exec_command", "arguments": string(args), "status": "completed"}
		send(map[string]any{"type": "response.output_item.added", "output_index": 0, "item": done})
	} else {
		msgID := fmt.Sprintf("msg_%d", n)
		send(map[string]any{"type": "response.output_item.added", "output_index": 0,
			"item": map[string]any{"type": "message", "id": msgID, "role": "assistant", "status": "in_progress", "content": []any{}}})
		send(map[string]any{"type": "response.output_text.delta", "item_id": msgID, "output_index": 0, "content_index": 0, "delta": st.Text})
		done = map[string]any{"type": "message", "id": msgID, "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": st.Text, "annotations": []any{}}}}
	}
	send(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": done})
	send(map[string]any{"type": "response.completed", "response": map[string]any{"id": respID, "object": "response", "status": "completed",
		"output": []any{done}, "usage": map[string]any{
			"input_tokens": st.InputTokens, "input_tokens_details": map[string]any{"cached_tokens": st.CachedTokens},
			"output_tokens": st.OutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": st.ReasoningTokens},
			"total_tokens": st.InputTokens + st.OutputTokens}}})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
