// Package messagesapi is a scripted stand-in for Anthropic's Messages API on
// loopback, so the tests can run the real Claude Code CLI whole (its tool
// execution, its stream-json output, its cost, its sessions) with no
// network: start a Server, point the CLI at it with ANTHROPIC_BASE_URL and
// any ANTHROPIC_API_KEY, and it answers the agent loop from a Script.
//
// The wire shapes follow Anthropic's streaming documentation
// (docs.anthropic.com/en/docs/build-with-claude/streaming): `POST
// /v1/messages` with `stream: true` answered as server-sent events
// message_start, content_block_start / content_block_delta /
// content_block_stop per block, message_delta (stop_reason and the output
// usage) and message_stop; errors as `{"type":"error","error":{"type",
// "message"}}` with the HTTP status (429 rate_limit_error, 529
// overloaded_error).
//
// The server is stateless per request: the step of the script is the
// number of assistant messages in the request's history, so a resumed
// session (claude --resume) continues where the script left off, and the
// CLI's side requests that carry no tools (titles, summaries) get a short
// text without consuming a step.
package messagesapi

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Step is one answer of the agent loop: a tool call (Tool set), text, or
// an API error (Status set).
type Step struct {
	// Text is an assistant text block (the last step's is the result).
	Text string
	// Tool and Input make a tool_use block, e.g. Tool "Write" with Input
	// {"file_path": …, "content": …}.
	Tool  string
	Input map[string]any
	// Status, when set, answers with that HTTP error (429, 529) and
	// RetryAfter seconds instead; ErrorType is its error.type.
	Status     int
	ErrorType  string
	RetryAfter int
	// Headers are sent with the answer, e.g. Anthropic's unified rate-limit
	// headers (anthropic-ratelimit-unified-status: rejected and
	// anthropic-ratelimit-unified-reset: <unix seconds>), from which the CLI
	// makes its rate_limit_event.
	Headers map[string]string
	// Hang, when set, holds the response open without a byte until the
	// client goes away: an engine that hangs before its stream starts.
	Hang bool
	// InputTokens and OutputTokens are the usage the answer reports.
	InputTokens, OutputTokens int
}

// Script answers the agent loop: Steps[n] answers the request whose
// history holds n assistant messages; past the end, the last step again.
type Script struct {
	Model string
	Steps []Step
}

// Request is what the server saw of one call, for assertions.
type Request struct {
	Path     string
	Model    string
	Tools    int
	Step     int
	Messages []json.RawMessage
	// Prompt is the text of the last user message.
	Prompt string
}

// Server serves a Script on a loopback port.
type Server struct {
	URL    string
	script Script
	srv    *http.Server
	ln     net.Listener

	mu   sync.Mutex
	reqs []Request
	done chan struct{}
}

// Start serves script on 127.0.0.1 until Close.
func Start(script Script) (*Server, error) {
	if script.Model == "" {
		script.Model = "claude-sonnet-4-5-20250929"
	}
	if len(script.Steps) == 0 {
		return nil, fmt.Errorf("messagesapi: a script needs at least one step")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), script: script, ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", s.messages)
	mux.HandleFunc("POST /v1/messages/count_tokens", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": 10})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// Anything else the CLI asks for (telemetry is off; metadata
		// probes) is not part of the script.
		writeJSON(w, http.StatusNotFound, apiError("not_found_error", "no route "+r.URL.Path))
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server; hanging answers end.
func (s *Server) Close() error {
	close(s.done)
	return s.srv.Close()
}

// Requests returns the agent-loop requests seen so far (those with tools).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type messagesRequest struct {
	Model    string            `json:"model"`
	Stream   bool              `json:"stream"`
	Tools    []json.RawMessage `json:"tools"`
	Messages []json.RawMessage `json:"messages"`
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	var req messagesRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError("invalid_request_error", err.Error()))
		return
	}
	assistant, prompt := 0, ""
	for _, raw := range req.Messages {
		var m message
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		if m.Role == "assistant" {
			assistant++
		}
		if m.Role == "user" {
			prompt = textOf(m.Content)
		}
	}
	if len(req.Tools) == 0 {
		// A side request (a title, a summary): not a step of the loop.
		s.stream(w, req.Stream, Step{Text: "Fleet task", InputTokens: 20, OutputTokens: 3})
		return
	}
	step := s.script.Steps[min(assistant, len(s.script.Steps)-1)]
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{Path: r.URL.Path, Model: req.Model, Tools: len(req.Tools), Step: assistant, Messages: req.Messages, Prompt: prompt})
	s.mu.Unlock()
	for k, v := range step.Headers {
		w.Header().Set(k, v)
	}
	switch {
	case step.Hang:
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return
	case step.Status != 0:
		if step.RetryAfter > 0 {
			w.Header().Set("retry-after", strconv.Itoa(step.RetryAfter))
		}
		typ := step.ErrorType
		if typ == "" {
			typ = "rate_limit_error"
		}
		writeJSON(w, step.Status, apiError(typ, "scripted "+typ))
		return
	}
	s.stream(w, req.Stream, step)
}

// textOf is the text of a message's content: a string, or its text blocks.
func textOf(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(content, &blocks)
	out := ""
	for _, b := range blocks {
		if b.Type == "text" {
			out += b.Text
		}
	}
	return out
}

func (s *Server) stream(w http.ResponseWriter, stream bool, step Step) {
	in, out := max(step.InputTokens, 1), max(step.OutputTokens, 1)
	var block map[string]any
	stop := "end_turn"
	if step.Tool != "" {
		block = map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", time.Now().UnixNano()), "name": step.Tool, "input": map[string]any{}}
		stop = "tool_use"
	} else {
		block = map[string]any{"type": "text", "text": ""}
	}
	id := fmt.Sprintf("msg_%d", time.Now().UnixNano())
	usage := map[string]any{"input_tokens": in, "output_tokens": out, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !stream {
		full := block
		if step.Tool != "" {
			full["input"] = step.Input
		} else {
			full["text"] = step.Text
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "type": "message", "role": "assistant", "model": s.script.Model,
			"content": []any{full}, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(event string, data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	}
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": id, "type": "message", "role": "assistant",
		"model": s.script.Model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": in, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
	send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": block})
	if step.Tool != "" {
		b, _ := json.Marshal(step.Input)
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": string(b)}})
	} else {
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": step.Text}})
	}
	send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": out}})
	send("message_stop", map[string]any{"type": "message_stop"})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func apiError(typ, msg string) map[string]any {
	return map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
