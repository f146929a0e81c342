// Package natsserver runs a NATS server with JetStream inside this process:
// the local stack's broker. It lives apart from the client package so that
// only the local stack (and tests) link nats-server; the Functions handler,
// the Lambda front door and the factory link only the client.
package natsserver

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configure an in-process NATS server.
type Options struct {
	// StoreDir is where JetStream keeps streams; required. The local stack
	// uses FLEET_DATA_DIR/nats so dispatch messages survive a restart.
	StoreDir string
	// Host to listen on; default 127.0.0.1. Factory agents on this machine
	// connect to it as ordinary NATS clients.
	Host string
	// Port to listen on; 0 picks a free port (read it from ClientURL).
	Port int
	// ServerName names the server in logs and advisories; default "fleet-local".
	ServerName string
	// StartTimeout bounds how long Start waits for the server to accept
	// clients; default 10s.
	StartTimeout time.Duration
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
	// Auth, when set, makes the server require credentials of every
	// client (see Auth). Unset, any client may do anything: for tests and
	// the bus conformance suite only.
	Auth *Auth
}

// Auth is who may connect and what each may do. Every connection presents
// a token (nats.Token): the coordinator's secret, with every right, or
// another token that Grant resolves to a user with limited rights (the
// local stack: a factory's fleet bearer token, resolved as the API
// resolves it, limited to the factory's own subscription). Anything else
// is refused at connect.
type Auth struct {
	// Coordinator is the secret of the coordinator's connections (the
	// handler, the local stack's pool launchers); at least
	// MinCoordinatorTokenLen characters.
	Coordinator string
	// Grant resolves any other token; an error refuses the connection. It
	// runs while the client connects, bounded by GrantTimeout.
	Grant func(ctx context.Context, token string) (Grant, error)
	// Logger receives refused connections (never a token); nil discards.
	// Apart from Options.Logger, which takes the server's whole log.
	Logger *slog.Logger
}

// Grant is a user Auth.Grant admits: a name for logs and the subjects it
// may use (nothing else).
type Grant struct {
	Name      string
	Publish   []string
	Subscribe []string
}

// MinCoordinatorTokenLen is the shortest coordinator secret Start accepts.
const MinCoordinatorTokenLen = 16

// GrantTimeout bounds one resolution of a token by Auth.Grant.
const GrantTimeout = 5 * time.Second

// Server is a NATS server with JetStream running in this process.
type Server struct {
	srv *server.Server
}

// Start starts a JetStream-enabled NATS server and waits until it
// accepts clients. ctx bounds the start; the server then runs until Shutdown.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.StoreDir == "" {
		return nil, errors.New("natsserver: server needs a store directory")
	}
	if err := os.MkdirAll(o.StoreDir, 0o750); err != nil {
		return nil, fmt.Errorf("natsserver: store dir: %w", err)
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.ServerName == "" {
		o.ServerName = "fleet-local"
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	port := o.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if o.Auth != nil && len(o.Auth.Coordinator) < MinCoordinatorTokenLen {
		return nil, fmt.Errorf("natsserver: the coordinator's token must be at least %d characters", MinCoordinatorTokenLen)
	}
	opts := &server.Options{
		ServerName: o.ServerName,
		Host:       o.Host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		// The owner of the process decides about signals, not the server.
		NoSigs: true,
		NoLog:  o.Logger == nil,
		// No monitoring port: nothing here needs one and it would be one
		// more port to collide on.
		HTTPPort: 0,
	}
	if o.Auth != nil {
		log := o.Auth.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		opts.CustomClientAuthentication = &authenticator{auth: *o.Auth, log: log.With("component", "nats-auth")}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsserver: server: %w", err)
	}
	if o.Logger != nil {
		srv.SetLoggerV2(slogAdapter{o.Logger.With("component", "nats-server")}, false, false, false)
	}
	srv.Start()

	wait := o.StartTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
		wait = time.Until(dl)
	}
	if !srv.ReadyForConnections(wait) {
		srv.Shutdown()
		srv.WaitForShutdown()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("natsserver: server did not start: %w", err)
		}
		return nil, fmt.Errorf("natsserver: server not ready on %s after %s",
			net.JoinHostPort(o.Host, strconv.Itoa(o.Port)), wait)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, errors.New("natsserver: server started without JetStream")
	}
	return &Server{srv: srv}, nil
}

// ClientURL is the nats:// URL clients connect to, with the port resolved.
func (e *Server) ClientURL() string { return e.srv.ClientURL() }

// Shutdown stops the server and waits until it has flushed its stores.
// Unsettled deliveries survive in the store and are redelivered after a
// restart. Safe to call more than once.
func (e *Server) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// slogAdapter routes the server's printf-style log to slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(format string, v ...any) { a.l.Info(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Tracef(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }

// authenticator is the server's CustomClientAuthentication: it runs once
// per connection, before the client can publish or subscribe.
type authenticator struct {
	auth Auth
	log  *slog.Logger
}

// Check admits the coordinator with every right and a factory with its
// own subscription's; it refuses everything else, logging why but never
// the token.
func (a *authenticator) Check(c server.ClientAuthentication) bool {
	opts := c.GetOpts()
	if c.Kind() != server.CLIENT || opts == nil {
		return false
	}
	log := a.log.With("remote", fmt.Sprint(c.RemoteAddress()), "name", opts.Name)
	tok := opts.Token
	if subtle.ConstantTimeCompare([]byte(tok), []byte(a.auth.Coordinator)) == 1 {
		c.RegisterUser(&server.User{Username: "fleet-coordinator"})
		return true
	}
	if tok == "" || a.auth.Grant == nil {
		log.Warn("nats connection refused: no token")
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), GrantTimeout)
	defer cancel()
	g, err := a.auth.Grant(ctx, tok)
	if err != nil {
		log.Warn("nats connection refused: token not accepted", "err", err)
		return false
	}
	// Non-nil, empty lists: a grant that names nothing allows nothing.
	c.RegisterUser(&server.User{Username: g.Name, Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: append([]string{}, g.Publish...)},
		Subscribe: &server.SubjectPermission{Allow: append([]string{}, g.Subscribe...)},
	}})
	log.Debug("nats connection admitted", "user", g.Name)
	return true
}
