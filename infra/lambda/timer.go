package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gigafactory/fleet/functions/echosweep"
	"github.com/gigafactory/fleet/functions/forgesweep"
	"github.com/gigafactory/fleet/functions/gcsweep"
	"github.com/gigafactory/fleet/functions/prune"
	"github.com/gigafactory/fleet/functions/reaper"
	"github.com/gigafactory/fleet/functions/redispatch"
	"github.com/gigafactory/fleet/shared/coord"
	"github.com/gigafactory/fleet/shared/funchost"
)

// scheduledEvent is the detail-type of an EventBridge schedule rule's event.
const scheduledEvent = "Scheduled Event"

// timerBinding is the timer binding name of every timer function.json; the
// timer functions read their payload from it.
const timerBinding = "timer"

// timerEnvPrefix starts the variables that map a rule to a timer function:
// FLEET_LAMBDA_TIMER_<RULE>=<function>.
const timerEnvPrefix = "FLEET_LAMBDA_TIMER_"

// pastDueAfter is how late a scheduled event may run and still be on time.
// Later means Lambda queued or retried it, which the timer functions treat
// as the host's IsPastDue.
const pastDueAfter = time.Minute

// timerFuncs are the timer functions of the Functions app, built by the same
// constructors functions/main.go uses, so a sweep behaves the same whichever
// front door ran it.
func timerFuncs(c *coord.Coordinator, log *slog.Logger) map[string]funchost.Func {
	return map[string]funchost.Func{
		reaper.Name:     reaper.Func(c, log),
		redispatch.Name: redispatch.Func(c, log),
		gcsweep.Name:    gcsweep.Func(c, log),
		echosweep.Name:  echosweep.Func(c, log),
		prune.Name:      prune.Func(c, log),
		forgesweep.Name: forgesweep.Func(c, log),
	}
}

func timerNames(m map[string]funchost.Func) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// ruleName is the name of the rule that emitted ev: the last segment of its
// rule ARN (arn:aws:events:<region>:<account>:rule[/<bus>]/<name>).
func ruleName(ev events.EventBridgeEvent) (string, error) {
	for _, arn := range ev.Resources {
		if _, rest, ok := strings.Cut(arn, ":rule/"); ok && rest != "" {
			return rest[strings.LastIndexByte(rest, '/')+1:], nil
		}
	}
	return "", fmt.Errorf("%w: scheduled event %s names no rule ARN in resources %v", errUnsupported, ev.ID, ev.Resources)
}

// envName is the variable that maps a rule: FLEET_LAMBDA_TIMER_ and the rule
// name upper-cased, every character other than A-Z and 0-9 made '_'.
func envName(rule string) string {
	var b strings.Builder
	b.WriteString(timerEnvPrefix)
	for _, r := range strings.ToUpper(rule) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// timerFor names the timer function a scheduled event runs. The variable
// FLEET_LAMBDA_TIMER_<RULE> wins when set; otherwise the rule name's last
// '-'-separated part names the function, so rules named "reaper" or
// "fleet-prod-reaper" need no configuration.
func timerFor(ev events.EventBridgeEvent, getenv func(string) string) (string, error) {
	rule, err := ruleName(ev)
	if err != nil {
		return "", err
	}
	if v := strings.TrimSpace(getenv(envName(rule))); v != "" {
		return v, nil
	}
	return rule[strings.LastIndexByte(rule, '-')+1:], nil
}

// runTimer invokes a timer function as the Functions host would, with the
// payload a host without a schedule monitor sends (no ScheduleStatus).
func runTimer(ctx context.Context, f funchost.Func, ev events.EventBridgeEvent, now time.Time) (*funchost.Result, error) {
	info := funchost.TimerInfo{IsPastDue: !ev.Time.IsZero() && now.Sub(ev.Time) > pastDueAfter}
	info.Schedule.AdjustForDST = true
	payload, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	return f(ctx, &funchost.Invocation{
		Data:     map[string]json.RawMessage{timerBinding: payload},
		Metadata: map[string]json.RawMessage{},
	})
}
