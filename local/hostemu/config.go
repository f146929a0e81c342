// Package hostemu plays the Azure Functions host on one machine. It reads the
// same host.json and functions/*/function.json the cloud host reads, starts
// the custom-handler binary, and invokes it exactly as the host does: HTTP
// requests forwarded or wrapped in envelopes, timers on their NCRONTAB
// schedules, and the Cosmos DB trigger fed from the store's change feed with
// a persisted checkpoint and the host's checkpoint-past-failure semantics.
package hostemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// HostConfig is the part of host.json the emulator honours.
type HostConfig struct {
	Version       string `json:"version"`
	CustomHandler struct {
		Description struct {
			DefaultExecutablePath string   `json:"defaultExecutablePath"`
			Arguments             []string `json:"arguments"`
			WorkingDirectory      string   `json:"workingDirectory"`
		} `json:"description"`
		EnableForwardingHTTPRequest bool `json:"enableForwardingHttpRequest"`
		EnableProxyingHTTPRequest   bool `json:"enableProxyingHttpRequest"`
	} `json:"customHandler"`
	Extensions struct {
		HTTP struct {
			RoutePrefix *string `json:"routePrefix"`
		} `json:"http"`
	} `json:"extensions"`
	ExtensionBundle struct {
		ID      string `json:"id"`
		Version string `json:"version"`
	} `json:"extensionBundle"`
	// FunctionTimeout bounds every invocation (a TimeSpan; "-1": none).
	FunctionTimeout string `json:"functionTimeout"`
}

// DefaultFunctionTimeout is functionTimeout when host.json gives none: the
// host's default on the Premium, Dedicated and Flex plans (Consumption's
// is 5 minutes).
const DefaultFunctionTimeout = 30 * time.Minute

// Timeout is how long an invocation may run before the host gives up on it
// (0: without a bound, functionTimeout "-1").
func (h *HostConfig) Timeout() (time.Duration, error) {
	switch strings.TrimSpace(h.FunctionTimeout) {
	case "":
		return DefaultFunctionTimeout, nil
	case "-1":
		return 0, nil
	}
	d, err := parseTimeSpan(h.FunctionTimeout)
	if err != nil {
		return 0, fmt.Errorf("functionTimeout: %w", err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("functionTimeout %q: want a positive TimeSpan, or -1 for none", h.FunctionTimeout)
	}
	return d, nil
}

// HTTPMode is how the host hands an HTTP-only function its request.
type HTTPMode int

// HTTP modes, as the host's DefaultHttpWorkerService.InvokeAsync picks them
// (src/WebJobs.Script/Workers/Http/DefaultHttpWorkerService.cs): proxying
// wins over forwarding, and a function with other bindings always gets an
// envelope.
const (
	// ModeEnvelope: POST /{function} with Data.req; the answer is
	// Outputs.res.
	ModeEnvelope HTTPMode = iota
	// ModeForward (enableForwardingHttpRequest): the host rebuilds the
	// request (body only with a Content-Length, query one value per name)
	// and sends it at its own path with HttpClient.SendAsync, which reads
	// the whole response before the host answers: nothing streams.
	ModeForward
	// ModeProxy (enableProxyingHttpRequest, YARP's IHttpForwarder): the
	// request goes through as it came, body streamed, and the response is
	// copied to the client as it arrives, so server-sent events stream.
	ModeProxy
)

// HTTPModeSetting makes the emulator hand HTTP requests on in a mode of
// its choosing instead of host.json's: "forward" plays a host without
// proxying, which forwards (and buffers) even when host.json enables
// proxying (the in-proc host that serves non-Flex plans: proxying, host PR
// #11035, was not backported to it); "proxy" and "envelope" force those;
// "auto" or unset follows host.json.
const HTTPModeSetting = "FLEET_HOST_HTTP_MODE"

// parseHTTPMode reads HTTPModeSetting; ok is false for auto.
func parseHTTPMode(v string) (mode HTTPMode, ok bool, err error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "auto":
		return 0, false, nil
	case "forward":
		return ModeForward, true, nil
	case "proxy":
		return ModeProxy, true, nil
	case "envelope":
		return ModeEnvelope, true, nil
	}
	return 0, false, fmt.Errorf("%s=%q: want auto, forward, proxy or envelope", HTTPModeSetting, v)
}

// HTTPMode is the mode host.json selects for HTTP-only functions.
func (h *HostConfig) HTTPMode() HTTPMode {
	switch {
	case h.CustomHandler.EnableProxyingHTTPRequest:
		return ModeProxy
	case h.CustomHandler.EnableForwardingHTTPRequest:
		return ModeForward
	}
	return ModeEnvelope
}

// RoutePrefix is extensions.http.routePrefix, "api" when absent (as the host).
func (h *HostConfig) RoutePrefix() string {
	if h.Extensions.HTTP.RoutePrefix == nil {
		return "api"
	}
	return strings.Trim(*h.Extensions.HTTP.RoutePrefix, "/")
}

// Binding is one entry of function.json's bindings, with its properties
// kept raw so every trigger type decodes what it needs.
type Binding struct {
	Type      string
	Direction string
	Name      string
	Props     map[string]json.RawMessage
}

// Retry is function.json's retry policy.
type Retry struct {
	Strategy        string `json:"strategy"` // fixedDelay | exponentialBackoff
	MaxRetryCount   int    `json:"maxRetryCount"`
	DelayInterval   string `json:"delayInterval"`
	MinimumInterval string `json:"minimumInterval"`
	MaximumInterval string `json:"maximumInterval"`
}

// Function is one function folder.
type Function struct {
	Name     string
	Bindings []Binding
	Retry    *Retry
}

// Trigger returns the function's trigger binding.
func (f *Function) Trigger() (Binding, bool) {
	for _, b := range f.Bindings {
		if strings.HasSuffix(strings.ToLower(b.Type), "trigger") {
			return b, true
		}
	}
	return Binding{}, false
}

// HTTPOnly reports whether every binding is http: only such functions get
// forwarded requests.
func (f *Function) HTTPOnly() bool {
	for _, b := range f.Bindings {
		if t := strings.ToLower(b.Type); t != "httptrigger" && t != "http" {
			return false
		}
	}
	return true
}

// App is a loaded function app.
type App struct {
	Root      string
	Host      HostConfig
	Functions []*Function
}

// LoadApp reads host.json and functions/*/function.json under root. The
// cloud host finds function folders at the app root; this repository keeps
// them under functions/, and `make package` lifts them to the zip's root.
func LoadApp(root string) (*App, error) {
	a := &App{Root: root}
	b, err := os.ReadFile(filepath.Join(root, "host.json"))
	if err != nil {
		return nil, fmt.Errorf("read host.json: %w", err)
	}
	if err := json.Unmarshal(b, &a.Host); err != nil {
		return nil, fmt.Errorf("host.json: %w", err)
	}
	if a.Host.CustomHandler.Description.DefaultExecutablePath == "" {
		return nil, errors.New("host.json: customHandler.description.defaultExecutablePath is required")
	}
	if _, err := a.Host.Timeout(); err != nil {
		return nil, fmt.Errorf("host.json: %w", err)
	}
	dirs, err := filepath.Glob(filepath.Join(root, "functions", "*", "function.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(dirs)
	for _, path := range dirs {
		f, err := loadFunction(path)
		if err != nil {
			return nil, err
		}
		a.Functions = append(a.Functions, f)
	}
	if len(a.Functions) == 0 {
		return nil, fmt.Errorf("no functions/*/function.json under %s", root)
	}
	return a, nil
}

func loadFunction(path string) (*Function, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw struct {
		Bindings []map[string]json.RawMessage `json:"bindings"`
		Retry    *Retry                       `json:"retry"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := &Function{Name: filepath.Base(filepath.Dir(path)), Retry: raw.Retry}
	for i, props := range raw.Bindings {
		var bd Binding
		for key, dst := range map[string]*string{"type": &bd.Type, "direction": &bd.Direction, "name": &bd.Name} {
			if v, ok := props[key]; ok {
				if err := json.Unmarshal(v, dst); err != nil {
					return nil, fmt.Errorf("%s: bindings[%d].%s: %w", path, i, key, err)
				}
			}
		}
		if bd.Type == "" || bd.Name == "" {
			return nil, fmt.Errorf("%s: bindings[%d] needs a type and a name", path, i)
		}
		bd.Props = props
		if err := checkTyped(bd); err != nil {
			return nil, fmt.Errorf("%s: function %s, %w", path, f.Name, err)
		}
		f.Bindings = append(f.Bindings, bd)
	}
	if _, ok := f.Trigger(); !ok {
		return nil, fmt.Errorf("%s: no trigger binding", path)
	}
	return f, nil
}

// Settings resolves %NAME% app-setting references.
type Settings func(name string) string

var settingRef = regexp.MustCompile(`%([A-Za-z0-9_:.\-]+)%`)

// SettingRef is one %NAME% reference of a function.json: the app settings
// the host must find to index the function.
type SettingRef struct {
	Function, Binding, Property, Name string
}

// SettingRefs lists every %NAME% reference in the app's bindings, as
// Resolve finds them.
func (a *App) SettingRefs() []SettingRef {
	var out []SettingRef
	for _, fn := range a.Functions {
		for _, b := range fn.Bindings {
			for key, raw := range b.Props {
				for _, m := range settingRef.FindAllStringSubmatch(string(raw), -1) {
					out = append(out, SettingRef{Function: fn.Name, Binding: b.Name, Property: key, Name: m[1]})
				}
			}
		}
	}
	return out
}

// Resolve replaces every %NAME% in s; a reference to an unset setting is an
// error naming it, as the host refuses to index such a function.
func (get Settings) Resolve(s string) (string, error) {
	var missing []string
	out := settingRef.ReplaceAllStringFunc(s, func(m string) string {
		name := m[1 : len(m)-1]
		v := get(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("app setting %s is not set", strings.Join(missing, ", "))
	}
	return out, nil
}

// Disabled tells whether the app settings disable function fn as the
// host reads them: AzureWebJobs.<fn>.Disabled, or AzureWebJobs_<fn>_Disabled
// (a name an environment variable can have), true or 1. A disabled
// function's trigger does not fire; the admin API still runs it. A value
// the host would take for "not disabled" without a word (yes, on) is refused
// here, naming the setting. function.json's own "disabled" is not read, as
// the host has not read it since version 2.
func (get Settings) Disabled(fn string) (bool, error) {
	if get == nil {
		return false, nil
	}
	off := false
	for _, name := range []string{"AzureWebJobs." + fn + ".Disabled", "AzureWebJobs_" + fn + "_Disabled"} {
		switch v := strings.TrimSpace(get(name)); strings.ToLower(v) {
		case "", "false", "0":
		case "true", "1":
			off = true
		default:
			return false, fmt.Errorf("app setting %s is %q; want true, false, 1 or 0", name, v)
		}
	}
	return off, nil
}

// String reads a string property of a binding, resolved.
func (get Settings) String(b Binding, key, def string) (string, error) {
	raw, ok := b.Props[key]
	if !ok {
		return def, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("binding %s: %s must be a string: %w", b.Name, key, err)
	}
	return get.Resolve(s)
}

// propKind is the type the host gives a binding property when it builds the
// trigger's attribute from function.json.
type propKind int

const (
	kindInt propKind = iota + 1
	kindBool
)

// typedProps lists, per binding type (lower case), the properties that are
// not strings. The host resolves %SETTING% only in string properties; a
// reference, or any string, in one of these fails indexing ("Error indexing
// method"), so the function never runs (AZURE.md).
var typedProps = map[string]map[string]propKind{
	"cosmosdbtrigger": {
		"feedPollDelay": kindInt, "maxItemsPerInvocation": kindInt, "leaseExpirationInterval": kindInt,
		"leaseRenewInterval": kindInt, "leaseAcquireInterval": kindInt, "checkpointInterval": kindInt,
		"checkpointDocumentCount":         kindInt,
		"createLeaseContainerIfNotExists": kindBool, "startFromBeginning": kindBool,
	},
	"timertrigger": {"runOnStartup": kindBool, "useMonitor": kindBool},
}

// kindOf returns the type of a binding's property; 0 for strings and
// properties the emulator does not know.
func kindOf(b Binding, key string) propKind {
	for name, k := range typedProps[strings.ToLower(b.Type)] {
		if strings.EqualFold(name, key) {
			return k
		}
	}
	return 0
}

// checkTyped refuses what the host refuses to index: an integer or boolean
// property that is not a JSON number or boolean.
func checkTyped(b Binding) error {
	keys := make([]string, 0, len(b.Props))
	for key := range b.Props {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		var err error
		switch kindOf(b, key) {
		case kindInt:
			_, err = intProp(b, key)
		case kindBool:
			_, err = boolProp(b, key)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// literalHint explains why a string is refused where the host wants a
// number or a boolean.
func literalHint(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil && settingRef.MatchString(s) {
		return ": the Functions host resolves %SETTING% only in string properties; write the value itself"
	}
	return ""
}

func intProp(b Binding, key string) (int, error) {
	raw := b.Props[key]
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, fmt.Errorf("binding %s: %s must be a JSON number, not %s%s", b.Name, key, raw, literalHint(raw))
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(raw)))
	if err != nil {
		return 0, fmt.Errorf("binding %s: %s must be a whole number, not %s", b.Name, key, raw)
	}
	return n, nil
}

func boolProp(b Binding, key string) (bool, error) {
	raw := b.Props[key]
	var v bool
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, fmt.Errorf("binding %s: %s must be true or false, not %s%s", b.Name, key, raw, literalHint(raw))
	}
	return v, nil
}

// Int reads an integer property: a JSON number, never a string or an
// app-setting reference (see typedProps).
func (get Settings) Int(b Binding, key string, def int) (int, error) {
	if _, ok := b.Props[key]; !ok {
		return def, nil
	}
	return intProp(b, key)
}

// Bool reads a boolean property: a JSON boolean, never a string.
func (get Settings) Bool(b Binding, key string, def bool) (bool, error) {
	if _, ok := b.Props[key]; !ok {
		return def, nil
	}
	return boolProp(b, key)
}

// StringList reads a list of strings property.
func (get Settings) StringList(b Binding, key string) ([]string, error) {
	raw, ok := b.Props[key]
	if !ok {
		return nil, nil
	}
	var vs []string
	if err := json.Unmarshal(raw, &vs); err != nil {
		return nil, fmt.Errorf("binding %s: %s must be a list of strings: %w", b.Name, key, err)
	}
	return vs, nil
}

// parseTimeSpan reads a .NET TimeSpan "hh:mm:ss" (as in retry intervals).
func parseTimeSpan(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return 0, fmt.Errorf("interval %q: want hh:mm:ss", s)
	}
	h, err1 := strconv.Atoi(parts[0])
	m, err2 := strconv.Atoi(parts[1])
	sec, err3 := strconv.ParseFloat(parts[2], 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, fmt.Errorf("interval %q: %w", s, err)
	}
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec*float64(time.Second)), nil
}

// RetryPolicy is a function's retry setting, read: how many times a failed
// invocation is tried again, and the wait before each try.
type RetryPolicy struct {
	// Max is the number of retries; Unbounded retries until the invocation
	// succeeds, as the host does for maxRetryCount -1.
	Max int
	// first is the wait before the first retry; cap, when above it, the
	// most an exponential backoff doubles it to (fixedDelay: first = cap).
	first, cap time.Duration
}

// Unbounded is RetryPolicy.Max for a policy that never gives up.
const Unbounded = -1

// Allows says whether a retry follows the given number of retries made.
func (p RetryPolicy) Allows(made int) bool { return p.Max == Unbounded || made < p.Max }

// Delay is the wait before retry n (0 for the first): the first interval,
// doubled for each retry before, at most the maximum.
func (p RetryPolicy) Delay(n int) time.Duration {
	d := p.first
	for range n {
		if d >= p.cap || d == 0 {
			return p.cap
		}
		d *= 2
	}
	return min(d, p.cap)
}

// Policy reads the retry setting (nil: none, an invocation is tried once).
// maxRetryCount -1 retries without end, as on the host; below that is
// refused, as is an interval that is not a TimeSpan.
func (r *Retry) Policy() (RetryPolicy, error) {
	if r == nil || r.MaxRetryCount == 0 {
		return RetryPolicy{}, nil
	}
	if r.MaxRetryCount < Unbounded {
		return RetryPolicy{}, fmt.Errorf("retry maxRetryCount %d: want -1 (without end) or more", r.MaxRetryCount)
	}
	p := RetryPolicy{Max: r.MaxRetryCount}
	switch r.Strategy {
	case "fixedDelay":
		d, err := parseTimeSpan(r.DelayInterval)
		if err != nil {
			return RetryPolicy{}, err
		}
		if d < 0 {
			return RetryPolicy{}, fmt.Errorf("retry delayInterval %s: want 0 or more", r.DelayInterval)
		}
		p.first, p.cap = d, d
	case "exponentialBackoff":
		lo, err := parseTimeSpan(r.MinimumInterval)
		if err != nil {
			return RetryPolicy{}, err
		}
		hi, err := parseTimeSpan(r.MaximumInterval)
		if err != nil {
			return RetryPolicy{}, err
		}
		if lo < 0 || hi < lo {
			return RetryPolicy{}, fmt.Errorf("retry intervals %s to %s: want 0 <= minimumInterval <= maximumInterval", r.MinimumInterval, r.MaximumInterval)
		}
		p.first, p.cap = lo, hi
	default:
		return RetryPolicy{}, fmt.Errorf("retry strategy %q: want fixedDelay or exponentialBackoff", r.Strategy)
	}
	return p, nil
}
