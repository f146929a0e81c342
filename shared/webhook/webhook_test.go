package webhook

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gigafactory/fleet/shared/coord/echo"

	"github.com/stretchr/testify/require"
)

// loopback lets the tests reach their own servers.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

func classOf(t *testing.T, err error) echo.Failure {
	t.Helper()
	var we *echo.WebhookError
	require.True(t, errors.As(err, &we), "not a WebhookError: %v", err)
	return we.Class
}

// TestPost: the body and headers go as given; only a 2xx acknowledges, a
// redirect is not followed, and a refused connection is an error; each
// failure has its class, and the far end's body is in none of them.
func TestPost(t *testing.T) {
	t.Parallel()
	var got []*http.Request
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, bodies = append(got, r), append(bodies, string(b))
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusNoContent)
		case "/moved":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/denied":
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, "FAR-END-SECRET")
		default:
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "FAR-END-SECRET")
		}
	}))
	defer srv.Close()
	c := New(Options{Timeout: 5 * time.Second, Allow: loopback})
	req := func(path string) echo.WebhookRequest {
		return echo.WebhookRequest{URL: srv.URL + path, Body: []byte(`{"seq":1}`), Headers: map[string]string{"X-Fleet-Event-Id": "j:1"}}
	}
	require.NoError(t, c.Post(t.Context(), req("/ok")))
	require.Equal(t, `{"seq":1}`, bodies[0])
	require.Equal(t, http.MethodPost, got[0].Method)
	require.Equal(t, "j:1", got[0].Header.Get("X-Fleet-Event-Id"))
	for path, class := range map[string]echo.Failure{"/fail": echo.HTTP5xx, "/denied": echo.HTTP4xx, "/moved": echo.HTTP3xx} {
		err := c.Post(t.Context(), req(path))
		require.Equal(t, class, classOf(t, err), path)
		require.NotContains(t, err.Error(), "FAR-END-SECRET")
	}
	require.Len(t, got, 4, "the redirect was not followed")
	for _, r := range got[1:] {
		require.NotEqual(t, "/ok", r.URL.Path, "the redirect was not followed")
	}
	srv.Close()
	// A kept-alive connection the server just closed would answer EOF.
	c.http.CloseIdleConnections()
	err := c.Post(t.Context(), req("/ok"))
	require.ErrorContains(t, err, "connection refused")
	require.Equal(t, echo.ConnRefused, classOf(t, err))
}

// TestForbidden: every range that is not the public internet is refused,
// including IPv4 addresses carried in IPv6 ones; public addresses pass.
func TestForbidden(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"0.0.0.0", "0.1.2.3", "127.0.0.1", "127.255.255.254", "10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.255",
		"192.168.0.1", "192.168.255.255", "100.64.0.1", "100.127.255.255", "100.100.100.200", "169.254.0.1",
		"169.254.169.254", "169.254.170.2", "168.63.129.16", "192.0.0.192", "192.0.2.1", "198.18.0.1", "198.51.100.7",
		"203.0.113.9", "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
		"::", "::1", "::127.0.0.1", "fe80::1", "fe80::1%eth0", "fc00::1", "fd00:ec2::254", "fd12:3456::1", "fec0::1",
		"ff02::1", "ff05::2", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe",
		"64:ff9b::7f00:1", "64:ff9b:1::1", "2002:7f00:1::1", "2002:a9fe:a9fe::", "2001::1", "2001:db8::1", "100::1",
	} {
		require.True(t, Forbidden(netip.MustParseAddr(s)), s)
	}
	for _, s := range []string{
		"8.8.8.8", "1.1.1.1", "172.32.0.1", "172.15.255.255", "100.128.0.1", "100.63.255.255", "169.253.255.255",
		"168.63.129.17", "192.169.0.1", "2606:4700:4700::1111", "2a00:1450::1", "::ffff:8.8.8.8", "64:ff9b::808:808",
		"2002:808:808::1",
	} {
		require.False(t, Forbidden(netip.MustParseAddr(s)), s)
	}
}

// listener counts the connections it accepts and never answers them.
func tarpit(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	accepted = &atomic.Int64{}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	return ln.Addr().String(), accepted
}

// TestPostRefusesPrivateAddresses: a URL naming a forbidden address, or a
// name resolving to one (localhost), is refused when dialled: nothing
// connects. Allow lets a range through.
func TestPostRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	addr, accepted := tarpit(t)
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	c := New(Options{Timeout: 5 * time.Second})
	urls := []string{"http://" + addr + "/hook", "http://localhost:" + port + "/hook", "https://localhost:" + port + "/hook"}
	for _, ip := range []string{"10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.169.254", "168.63.129.16", "0.0.0.0", "224.0.0.1", "127.1.2.3"} {
		urls = append(urls, "http://"+net.JoinHostPort(ip, port)+"/hook")
	}
	for _, u := range urls {
		err := c.Post(t.Context(), echo.WebhookRequest{URL: u, Body: []byte(`{}`)})
		require.Equal(t, echo.RefusedAddress, classOf(t, err), "%s: %v", u, err)
	}
	require.Zero(t, accepted.Load(), "nothing connected")

	allowed := New(Options{Timeout: 5 * time.Second, HeaderTimeout: 100 * time.Millisecond, Allow: mustParseAllow(t, "127.0.0.0/8, ::1")})
	err = allowed.Post(t.Context(), echo.WebhookRequest{URL: "http://localhost:" + port + "/hook", Body: []byte(`{}`)})
	require.Equal(t, echo.TimeoutFailure, classOf(t, err), "allowed: it connected, and the tarpit never answered: %v", err)
	require.Positive(t, accepted.Load())
}

func mustParseAllow(t *testing.T, s string) []netip.Prefix {
	t.Helper()
	p, err := ParseAllow(s)
	require.NoError(t, err)
	return p
}

// TestPostFarEndWordsAreNotTheClass: a far end that does not speak HTTP
// (here a NATS-like banner) is bad_response, and the class carries none of
// its words.
func TestPostFarEndWordsAreNotTheClass(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			// Once the request is in, so the answer is this one's.
			_, _ = conn.Read(make([]byte, 4096))
			_, _ = io.WriteString(conn, "INFO {\"server_id\":\"NSECRETBANNER\",\"version\":\"2.11\"}\r\n")
			_ = conn.Close()
		}
	}()
	c := New(Options{Timeout: 5 * time.Second, Allow: loopback})
	err = c.Post(t.Context(), echo.WebhookRequest{URL: "http://" + ln.Addr().String() + "/", Body: []byte(`{}`)})
	require.Equal(t, echo.BadResponse, classOf(t, err), "%v", err)
	require.NotContains(t, string(classOf(t, err)), "SECRET")
}

// TestClientTimeoutsAndNoProxy: the phases' timeouts are set, and no proxy
// is taken from the environment (a proxy would dial for us, and the
// address check would see only the proxy).
func TestClientTimeoutsAndNoProxy(t *testing.T) {
	t.Parallel()
	c := New(Options{Timeout: 10 * time.Second})
	tr := c.http.Transport.(*http.Transport)
	require.Nil(t, tr.Proxy)
	require.Equal(t, DefaultTLSTimeout, tr.TLSHandshakeTimeout)
	require.Equal(t, DefaultHeaderTimeout, tr.ResponseHeaderTimeout)
	require.NotNil(t, tr.DialContext)
}

// TestParseAllow: CIDRs and bare addresses, comma-separated; anything else
// is an error naming it.
func TestParseAllow(t *testing.T) {
	t.Parallel()
	got, err := ParseAllow(" 10.20.0.0/16, fd12::/48 ,192.168.1.7,, ")
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("fd12::/48"), netip.MustParsePrefix("192.168.1.7/32")}, got)
	for _, bad := range []string{"10.0.0.0/33", "intranet", "10.0.0/8"} {
		_, err := ParseAllow(bad)
		require.ErrorContains(t, err, strconv.Quote(bad))
	}
}

// rebindingDNS is a DNS server that answers A queries with first once and
// with then ever after (a rebinding attack), and AAAA queries with nothing.
func rebindingDNS(t *testing.T, first, then netip.Addr) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pc.Close() })
	var answered atomic.Int64
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := buf[:n]
			// The question: labels up to a zero byte, then type and class.
			end := 12
			for end < len(q) && q[end] != 0 {
				end += int(q[end]) + 1
			}
			if end+5 > len(q) {
				continue
			}
			question := q[12 : end+5]
			qtype := int(q[end+1])<<8 | int(q[end+2])
			resp := append([]byte{q[0], q[1], 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0}, question...)
			if qtype == 1 {
				a := then
				if answered.Add(1) == 1 {
					a = first
				}
				ip := a.As4()
				resp[7] = 1
				resp = append(resp, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4)
				resp = append(resp, ip[:]...)
			}
			_, _ = pc.WriteTo(resp, from)
		}
	}()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", pc.LocalAddr().String())
	}}
}

// TestPostRefusesARebindingName: the address is checked on every dial, after
// resolution: a name that first resolved to an allowed address and then
// rebinds to the metadata address is refused on the next connection.
func TestPostRefusesARebindingName(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	res := rebindingDNS(t, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("169.254.169.254"))
	c := New(Options{Timeout: 5 * time.Second, Allow: mustParseAllow(t, "127.0.0.1"), Resolver: res})
	req := echo.WebhookRequest{URL: "http://tracker.test:" + port + "/hook", Body: []byte(`{}`)}
	require.NoError(t, c.Post(t.Context(), req), "the first lookup names an allowed address")
	c.http.CloseIdleConnections()
	err = c.Post(t.Context(), req)
	require.Equal(t, echo.RefusedAddress, classOf(t, err), "%v", err)
	require.ErrorContains(t, err, "169.254.169.254")
}

// TestRefusedTarget: a URL naming a forbidden address literally is refused
// when it is set; a public or allowed address and any host name pass (the
// dial judges names).
func TestRefusedTarget(t *testing.T) {
	t.Parallel()
	c := New(Options{Allow: mustParseAllow(t, "10.20.0.0/16")})
	for _, u := range []string{"http://127.0.0.1:4222/", "https://[::1]/hook", "http://169.254.169.254/latest", "http://[fd00:ec2::254]/", "http://10.1.2.3/", "http://[::ffff:192.168.1.1]:8080/x"} {
		var refused *RefusedError
		require.ErrorAs(t, c.RefusedTarget(u), &refused, u)
	}
	for _, u := range []string{"https://hooks.example/fleet", "http://localhost:8080/", "https://8.8.8.8/", "http://10.20.3.4/hook", "::not a url"} {
		require.NoError(t, c.RefusedTarget(u), u)
	}
}
