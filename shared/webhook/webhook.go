// Package webhook is the coordinator's Webhook over net/http: it POSTs a
// tracker echo delivery and takes only a 2xx answer as delivered.
//
// A webhook URL is set by a product's operator and may name anything, so
// the client dials only public addresses: the check runs on the socket
// about to connect (net.Dialer.ControlContext), after DNS resolution, on
// every dial (a retry, a new connection, a name that resolves differently
// the second time), so neither a private literal nor a name rebound to one
// gets through. Allow names the ranges a private tracker lives in. No proxy
// is taken from the environment: a proxy would dial on the client's behalf
// and the check would see only the proxy. A failure is returned as a
// coord.WebhookError whose class is all an operator reads back.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/gigafactory/fleet/shared/coord/echo"
)

// Defaults of the phases' timeouts: a few seconds each, so a tarpit costs
// its product little and nobody else anything.
const (
	DefaultDialTimeout   = 3 * time.Second
	DefaultTLSTimeout    = 3 * time.Second
	DefaultHeaderTimeout = 5 * time.Second
)

// Options configure a Client. Zero durations take the defaults.
type Options struct {
	// Timeout bounds a whole request.
	Timeout time.Duration
	// DialTimeout bounds a TCP connect, TLSTimeout a TLS handshake and
	// HeaderTimeout the wait for the answer's headers once the request is
	// written.
	DialTimeout   time.Duration
	TLSTimeout    time.Duration
	HeaderTimeout time.Duration
	// Allow lists the ranges a webhook may reach although they are not
	// public (a tracker on a private network).
	Allow []netip.Prefix
	// Resolver resolves host names; nil is the system's.
	Resolver *net.Resolver
}

// Client posts deliveries.
type Client struct {
	http  *http.Client
	guard guard
}

// New returns a client whose requests give up after timeout.
func New(o Options) *Client {
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.TLSTimeout <= 0 {
		o.TLSTimeout = DefaultTLSTimeout
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	g := guard{allow: o.Allow}
	d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second, Resolver: o.Resolver, ControlContext: g.control}
	return &Client{guard: g, http: &http.Client{
		Timeout: o.Timeout,
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            d.DialContext,
			TLSHandshakeTimeout:    o.TLSTimeout,
			ResponseHeaderTimeout:  o.HeaderTimeout,
			MaxResponseHeaderBytes: 64 << 10,
			MaxIdleConnsPerHost:    4,
			IdleConnTimeout:        90 * time.Second,
		},
		// A redirect is an answer, not a delivery: following it would turn
		// the POST into a GET (301/302) and drop the body, and would be a
		// second URL nobody validated.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// RefusedTarget says whether a webhook URL names, by a literal address, a
// place the client will not dial. A host name passes: what it resolves to
// is judged on every dial.
func (c *Client) RefusedTarget(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil // the URL's own validation reports it
	}
	a, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		return nil
	}
	return c.guard.check(a)
}

// Post sends one delivery; an error (a *coord.WebhookError) says why it
// was not acknowledged.
func (c *Client) Post(ctx context.Context, d echo.WebhookRequest) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Body))
	if err != nil {
		return &echo.WebhookError{Class: echo.Failed, Err: err}
	}
	for k, v := range d.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("User-Agent", "fleet-echo/1")
	res, err := c.http.Do(req)
	if err != nil {
		return &echo.WebhookError{Class: classify(err), Err: err}
	}
	defer res.Body.Close()
	// Read a little so the connection can be reused; the answer's body
	// means nothing to the fleet.
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return &echo.WebhookError{Class: statusClass(res.StatusCode), Err: fmt.Errorf("the webhook answered %s", res.Status)}
	}
	return nil
}

func statusClass(code int) echo.Failure {
	switch {
	case code >= 300 && code < 400:
		return echo.HTTP3xx
	case code >= 400 && code < 500:
		return echo.HTTP4xx
	case code >= 500 && code < 600:
		return echo.HTTP5xx
	default:
		return echo.HTTPOther
	}
}

// classify names a transport failure by its kind alone.
func classify(err error) echo.Failure {
	var (
		refused  *RefusedError
		dns      *net.DNSError
		record   tls.RecordHeaderError
		alert    tls.AlertError
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		netErr   net.Error
	)
	switch {
	case errors.As(err, &refused):
		return echo.RefusedAddress
	case errors.As(err, &dns):
		return echo.DNS
	case errors.As(err, &record), errors.As(err, &alert), errors.As(err, &verify),
		errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid):
		return echo.TLS
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return echo.TimeoutFailure
	case errors.Is(err, syscall.ECONNREFUSED):
		return echo.ConnRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return echo.ConnReset
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return echo.Unreachable
	case errors.Is(err, context.Canceled):
		return echo.Failed
	default:
		// Whatever answered did not speak HTTP (a NATS banner, an SSH
		// greeting): its words stay in the log.
		return echo.BadResponse
	}
}

// RefusedError is a dial to an address webhooks may not reach.
type RefusedError struct {
	Addr netip.Addr
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("webhook address %s is not public (loopback, private, link-local, metadata...); FLEET_WEBHOOK_ALLOW_CIDRS allows a range", e.Addr)
}

// guard refuses the addresses a webhook may not dial.
type guard struct {
	allow []netip.Prefix
}

// control runs on each socket before it connects, with the address
// actually dialled.
func (g guard) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook dial to %q: %w", address, err)
	}
	return g.check(ap.Addr())
}

func (g guard) check(a netip.Addr) error {
	a = a.WithZone("")
	for _, p := range g.allow {
		if p.Contains(a) || p.Contains(a.Unmap()) {
			return nil
		}
	}
	if Forbidden(a) {
		return &RefusedError{Addr: a}
	}
	return nil
}

// forbidden are the ranges that are not the public internet: a webhook
// there reaches the coordinator's own host, its network or a cloud's
// metadata service.
var forbidden = prefixes(
	// IPv4
	"0.0.0.0/8",        // "this network", unspecified
	"10.0.0.0/8",       // private
	"100.64.0.0/10",    // carrier-grade NAT (Alibaba's metadata at 100.100.100.200)
	"127.0.0.0/8",      // loopback
	"169.254.0.0/16",   // link-local: AWS, GCP, Azure, OCI metadata at 169.254.169.254
	"172.16.0.0/12",    // private
	"192.0.0.0/24",     // IETF protocol assignments (Oracle's 192.0.0.192)
	"192.0.2.0/24",     // documentation
	"192.88.99.0/24",   // 6to4 relay anycast
	"192.168.0.0/16",   // private
	"198.18.0.0/15",    // benchmarking
	"198.51.100.0/24",  // documentation
	"203.0.113.0/24",   // documentation
	"224.0.0.0/4",      // multicast
	"240.0.0.0/4",      // reserved, broadcast
	"168.63.129.16/32", // Azure's wireserver (host-local, though public-looking)
	// IPv6
	"::/96",          // unspecified, loopback, IPv4-compatible
	"64:ff9b:1::/48", // local-use NAT64
	"100::/64",       // discard
	"2001::/32",      // Teredo
	"2001:10::/28",   // ORCHID
	"2001:20::/28",   // ORCHIDv2
	"2001:db8::/32",  // documentation
	"fc00::/7",       // unique local (AWS's metadata at fd00:ec2::254)
	"fe80::/10",      // link-local
	"fec0::/10",      // site-local (deprecated)
	"ff00::/8",       // multicast
)

// Forbidden says whether a is not a public unicast address. Addresses that
// carry an IPv4 address (IPv4-mapped, NAT64, 6to4) are judged by it.
func Forbidden(a netip.Addr) bool {
	a = a.WithZone("")
	if a.Is4In6() {
		return Forbidden(a.Unmap())
	}
	if !a.IsValid() || a.IsUnspecified() || a.IsLoopback() || a.IsPrivate() || a.IsMulticast() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() {
		return true
	}
	for _, p := range forbidden {
		if p.Contains(a) {
			return true
		}
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a):
			return Forbidden(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(a):
			return Forbidden(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	return false
}

// These carry an IPv4 address, which decides.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// ParseAllow reads a comma-separated list of CIDRs (FLEET_WEBHOOK_ALLOW_CIDRS);
// a bare address is one host.
func ParseAllow(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("%q: want a CIDR such as 10.20.0.0/16 or an address", f)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q: want a CIDR such as 10.20.0.0/16 or an address", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
