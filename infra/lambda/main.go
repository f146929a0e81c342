// Command lambda is an alternative front door for the fleet: the same HTTP
// API and timer sweeps the Azure Functions app serves, run as one AWS Lambda
// function. API Gateway HTTP API (payload 2.0) and Lambda Function URL
// events go to the API handler; EventBridge scheduled events run the timer
// function their rule names. See README.md for what maps to what, and what
// has no equivalent here (the dispatch change feed).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/gigafactory/fleet/shared/app"
	"github.com/gigafactory/fleet/shared/config"
	"github.com/gigafactory/fleet/shared/funchost"
)

func main() {
	a, h, err := open(context.Background(), config.Lookup{})
	if err != nil {
		// An init error: Lambda reports it and retries the cold start.
		fmt.Fprintln(os.Stderr, "fleet lambda:", err)
		os.Exit(1)
	}
	// lambda.Start never returns; Lambda sends SIGTERM before it shuts an
	// execution environment down (with an extension registered), which is
	// when the store's connections are closed.
	lambda.StartWithOptions(h, lambda.WithEnableSIGTERM(func() { _ = a.Close() }))
}

// open builds the app once per execution environment, so warm invocations
// reuse the store connections and the coordinator's caches.
func open(ctx context.Context, l config.Lookup) (*app.App, *handler, error) {
	log, err := app.NewLogger(l)
	if err != nil {
		return nil, nil, err
	}
	// Unset, the app would generate a token per data directory, that is
	// per execution environment here: every instance would accept a
	// different one.
	if l.Get(config.OperatorToken) == "" {
		return nil, nil, fmt.Errorf("%s must be set: Lambda instances share no data directory to keep a generated token in", config.OperatorToken)
	}
	// Lambda's buffered invoke mode cannot stream: the live event streams
	// answer as long polls (see app.WithBufferedResponses).
	a, err := app.Open(ctx, l, log, app.WithBufferedResponses())
	if err != nil {
		return nil, nil, err
	}
	return a, &handler{api: a.API, timers: timerFuncs(a.Coord, log), getenv: os.Getenv, now: time.Now, log: log}, nil
}

// handler is the Lambda entry point: it tells the event kinds apart by
// shape and hands each to its translation.
type handler struct {
	api    http.Handler
	timers map[string]funchost.Func
	getenv func(string) string
	now    func() time.Time
	log    *slog.Logger
}

var _ lambda.Handler = (*handler)(nil)

// errUnsupported is an event this function is not wired for.
var errUnsupported = errors.New("unsupported event")

// eventShape holds the fields that tell the event kinds apart.
type eventShape struct {
	Version        string  `json:"version"`
	RawPath        *string `json:"rawPath"`
	RequestContext struct {
		HTTP struct {
			Method string `json:"method"`
		} `json:"http"`
	} `json:"requestContext"`
	DetailType string `json:"detail-type"`
	Source     string `json:"source"`
}

// Invoke handles one event.
func (h *handler) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	var shape eventShape
	if err := json.Unmarshal(payload, &shape); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object: %v", errUnsupported, err)
	}
	switch {
	case shape.Version == "2.0" && shape.RawPath != nil && shape.RequestContext.HTTP.Method != "":
		// API Gateway HTTP API payload 2.0 and Function URL events share
		// every field the translation reads.
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fmt.Errorf("http event: %w", err)
		}
		res, err := serveHTTP(ctx, h.api, ev)
		if err != nil {
			return nil, err
		}
		return json.Marshal(res)
	case shape.DetailType == scheduledEvent:
		var ev events.EventBridgeEvent
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fmt.Errorf("scheduled event: %w", err)
		}
		res, err := h.runSchedule(ctx, ev)
		if err != nil {
			return nil, err
		}
		return json.Marshal(res)
	}
	return nil, fmt.Errorf("%w: want an API Gateway HTTP API (payload 2.0) or Function URL request, or an EventBridge %q (got version %q, detail-type %q)",
		errUnsupported, scheduledEvent, shape.Version, shape.DetailType)
}

// runSchedule runs the timer function the event's rule names.
func (h *handler) runSchedule(ctx context.Context, ev events.EventBridgeEvent) (*funchost.Result, error) {
	name, err := timerFor(ev, h.getenv)
	if err != nil {
		return nil, err
	}
	f, ok := h.timers[name]
	if !ok {
		return nil, fmt.Errorf("%w: rule maps to %q, which is not a timer function (have %s)", errUnsupported, name, timerNames(h.timers))
	}
	res, err := runTimer(ctx, f, ev, h.now())
	if err != nil {
		h.log.ErrorContext(ctx, "timer failed", "function", name, "event", ev.ID, "err", err)
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	h.log.InfoContext(ctx, "timer ran", "function", name, "event", ev.ID, "logs", res.Logs)
	return res, nil
}
