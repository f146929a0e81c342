package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/gigafactory/fleet/shared/api"
	"github.com/gigafactory/fleet/shared/fleet"
)

var errLogEnded = errors.New("log ended")

func (a *app) jobsLogs() *cobra.Command {
	var (
		follow bool
		raw    bool
		epoch  int64
	)
	cmd := &cobra.Command{
		Use:   "logs [-f] [--epoch N] ID",
		Short: "Print a run's live output; -f follows it until the run ends",
		Long: `Print the engine's output of a job's run: the run holding the lease now, else
the newest one, or the run of --epoch. With -f, follow it live over
GET /fleet/jobs/{id}/log/stream until the run ends; a dropped stream is resumed
from the last byte received (Last-Event-ID), so nothing is missed or printed
twice. Bytes the coordinator dropped (a run keeps its last FLEET_MAX_LOG_BYTES)
are reported on stderr.

The output is the engine's, and whoever prompted the engine chose it: terminal
escape sequences and control characters are removed (a carriage return too),
but for colours (SGR), so it cannot set the clipboard or the window title,
clear the screen or ask the terminal to answer. --raw prints the bytes as the
engine wrote them, for a file or less -R.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if epoch < 0 {
				return &api.Error{Code: fleet.CodeInvalid, Field: "epoch", Message: "must be a lease epoch (1 or more)"}
			}
			out := io.Writer(a.env.Stdout)
			if !raw {
				f := &escapeFilter{w: a.env.Stdout}
				defer func() {
					if ferr := f.Flush(); err == nil {
						err = ferr
					}
				}()
				out = f
			}
			if follow {
				return a.followLog(cmd, out, args[0], epoch)
			}
			resp, err := a.client.OpenLog(cmd.Context(), api.LogRequest{JobID: args[0], Epoch: epoch})
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.Copy(out, resp.Body)
			return err
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output live until the run ends")
	cmd.Flags().BoolVar(&raw, "raw", false, "print the output as the engine wrote it, terminal escapes included")
	cmd.Flags().Int64Var(&epoch, "epoch", 0, "the run's lease epoch (default: the running run, else the newest)")
	return cmd
}

// followLog prints the log stream to out, reconnecting from the last
// offset received until the stream says the run ended. The first connection
// pins the run, so a reconnect never switches to a newer run's log.
func (a *app) followLog(cmd *cobra.Command, out io.Writer, job string, epoch int64) error {
	ctx := cmd.Context()
	last := ""
	backoff := 500 * time.Millisecond
	for {
		var err error
		last, err = a.client.Stream(ctx, api.StreamRequest{Path: api.LogStreamPath(job, epoch), After: last,
			Header: func(h http.Header) {
				if e, perr := strconv.ParseInt(h.Get(api.HeaderLogEpoch), 10, 64); perr == nil && epoch == 0 {
					epoch = e
				}
			},
		}, func(ev api.Event) error {
			var text string
			if err := json.Unmarshal([]byte(ev.Data), &text); err != nil {
				return &api.Error{Code: fleet.CodeUnavailable, Message: "undecodable log event: " + err.Error()}
			}
			switch ev.Type {
			case api.LogEventEnd:
				return errLogEnded
			case api.LogEventDropped:
				_, err := fmt.Fprint(a.env.Stderr, text)
				return err
			}
			_, err := io.WriteString(out, text)
			return err
		})
		switch {
		case errors.Is(err, errLogEnded), ctx.Err() != nil:
			return nil
		case err != nil && !retryableStreamError(err):
			return err
		case err == nil:
			// The server ended a healthy stream (its time limit): resume
			// at once, barely paced.
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}
