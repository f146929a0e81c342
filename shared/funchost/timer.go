package funchost

import (
	"context"
	"fmt"
	"log/slog"
)

// TimerFunc adapts a periodic task to a timerTrigger function whose timer
// binding is named binding. The task reports how many things it did; a
// past-due run is logged, since it means an occurrence was missed while the
// app was down (the host flags only that start-up run, never an overrun).
func TimerFunc(binding, what string, log *slog.Logger, run func(ctx context.Context) (int, error)) Func {
	return func(ctx context.Context, inv *Invocation) (*Result, error) {
		raw, ok := inv.Data[binding]
		if !ok {
			return nil, fmt.Errorf("%w: no %q timer in Data", ErrBadPayload, binding)
		}
		t, err := Timer(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadPayload, err)
		}
		logs := []string{}
		if t.IsPastDue {
			logs = append(logs, "timer is past due: the previous occurrence was missed")
			if log != nil {
				log.WarnContext(ctx, "timer past due", "task", what)
			}
		}
		n, err := run(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		logs = append(logs, fmt.Sprintf("%s: %d", what, n))
		return &Result{Outputs: map[string]any{}, Logs: logs, ReturnValue: map[string]int{what: n}}, nil
	}
}
