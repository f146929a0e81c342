// Package webhook is the coordinator's Webhook over net/http: it POSTs a
// tracker echo delivery and takes only a 2xx answer as delivered.
package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gigafactory/fleet/shared/coord"
)

// Client posts deliveries.
type Client struct {
	http *http.Client
}

// New returns a client whose requests give up after timeout.
func New(timeout time.Duration) *Client {
	return &Client{http: &http.Client{
		Timeout: timeout,
		// A redirect is an answer, not a delivery: following it would turn
		// the POST into a GET (301/302) and drop the body.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Post sends one delivery; an error says why it was not acknowledged.
func (c *Client) Post(ctx context.Context, d coord.WebhookRequest) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Body))
	if err != nil {
		return err
	}
	for k, v := range d.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("User-Agent", "fleet-echo/1")
	res, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	// Read a little so the connection can be reused; the answer's body
	// means nothing to the fleet.
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return fmt.Errorf("the webhook answered %s", res.Status)
	}
	return nil
}
