package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// apiClient calls the stack's /api/fleet routes as the operator.
type apiClient struct {
	base  string // http://host:port/api/fleet
	token string
	http  *http.Client
}

func newAPIClient(url, token string) *apiClient {
	return &apiClient{base: url + "/api/fleet", token: token, http: &http.Client{Timeout: 30 * time.Second}}
}

func (c *apiClient) get(ctx context.Context, path, product string, out any) error {
	return c.do(ctx, http.MethodGet, path, product, nil, out)
}

func (c *apiClient) post(ctx context.Context, path, product string, body, out any) error {
	return c.do(ctx, http.MethodPost, path, product, body, out)
}

func (c *apiClient) put(ctx context.Context, path, product string, body, out any) error {
	return c.do(ctx, http.MethodPut, path, product, body, out)
}

// do sends body as JSON and decodes a 2xx answer into out (when not nil);
// any other answer is an error carrying the API's message.
func (c *apiClient) do(ctx context.Context, method, path, product string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if product != "" {
		req.Header.Set("x-product-id", product)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	return json.Unmarshal(data, out)
}
