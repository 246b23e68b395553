package bench

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tether-dev/tether/gateway/client"
)

// Config is one bench run. The zero value of a field means its default,
// noted on each field (and in the flags' help).
type Config struct {
	// Target: URLs of a running deployment, or Local nodes started here.
	URLs  []string // ws://host:port/v1/ws of each node
	Local int      // start this many local nodes instead of using URLs
	// ServerBin is the tether binary for Local. Required with Local (the
	// command passes its own executable).
	ServerBin string
	// DataDir holds the local nodes' data and logs. Default: a temp dir,
	// removed at the end (kept when a violation was found).
	DataDir string
	// ServerArgs are extra `tether serve` flags for the local nodes.
	ServerArgs []string

	// Tokens for URLs: a JWT secret to sign with, or POST /dev/token.
	JWTSecret string
	DevTokens bool
	// TLS is the client side of wss:// URLs (and https:// dev tokens):
	// --ca-cert FILE trusts that CA alone. Default the system's roots.
	TLS *tls.Config

	// Load.
	Sessions int           // simulated users. Default 50.
	Ramp     time.Duration // users start evenly over this. Default 5s.
	Duration time.Duration // load phase, from the first user. Default 30s.
	Rate     float64       // messages per second per user. Default 1.
	// AgentMix is the fraction of users that aim their disruptions at the
	// agent's tool runs: on seeing a tool start, such a user drops or goes
	// silent mid-tool (half the time). With Local and AgentMix > 0 the
	// nodes run the demo engine, whose every turn runs the slow search
	// tool (one node has one engine). Default 0.25; negative: 0.
	AgentMix float64
	// Agent is the local nodes' --agent: echo, demo or http. Default:
	// http when AgentURL is set, else demo when AgentMix > 0, else echo.
	Agent string
	// With Agent http (Local only) the nodes run --agent http against an
	// endpoint of gateway/AGENT-PROTOCOL.md: AgentURL, one the user runs
	// (AgentSecret required), or else the Python example at AgentScript,
	// started here with Python (default python3) on a free port and a
	// random secret, and stopped at the end. The bench also sends step
	// requests straight to the endpoint, for the endpoint's own latency.
	AgentURL, AgentSecret string
	AgentScript           string // the example's agent.py
	Python                string // its interpreter. Default python3.
	// AgentStreamDelay is the started example's AGENT_STREAM_DELAY, the
	// pause between its streamed words. Default the example's (50ms);
	// negative: none.
	AgentStreamDelay time.Duration
	// ToolDelay is the local demo engine's --demo-search-delay. Default 500ms.
	ToolDelay time.Duration

	// Disruptions.
	DropEvery  time.Duration // mean time between a user's disruptions (exponential). Default 8s; negative: never.
	SilentFrac float64       // fraction of disruptions that are silences rather than drops. Default 0.3; negative: 0.
	AwayMax    time.Duration // a user stays away uniformly 0..AwayMax. Default 2s.
	// ExpireFrac is the fraction of drops that stay away beyond the
	// reconnect window, so that the session expires; only when the window
	// is at most a third of Duration. Default 0.1; negative: 0.
	ExpireFrac float64
	// Window is the reconnect window: set on the local nodes (--window),
	// or, against URLs, the deployment's (default: the window_s its
	// session frames report).
	Window time.Duration

	// Node failures (Local only): every KillEvery a random node is
	// SIGKILLed, every TermEvery one gets SIGTERM; it is restarted on the
	// same data dir after Down (default 2s).
	KillEvery, TermEvery, Down time.Duration
	// PauseEvery (Local only): every PauseEvery a random node is stopped
	// (SIGSTOP) for PauseFor (default 8s, long enough for the others to
	// declare it dead with the default timing), then continued (SIGCONT):
	// a paused process, a VM migrating, a GC pause of minutes. Its
	// sessions move while it sleeps; when it wakes it must step down.
	PauseEvery, PauseFor time.Duration
	// PartitionEvery (Local with at least 3 nodes, Linux, root): the
	// nodes run in network namespaces of their own (bench/netns), and
	// every PartitionEvery one random node is cut off from the others for
	// PartitionFor (default 12s): both ways, or, one time in three, only
	// its packets to them (an asymmetric cut). Its clients stay on its
	// side of the cut and keep writing; the majority takes its sessions.
	// Then the cut heals. Faults of all kinds come one at a time.
	PartitionEvery, PartitionFor time.Duration

	// Client tuning.
	MaxBackoff   time.Duration // the clients' reconnect backoff cap. Default 1s.
	ReplyTimeout time.Duration // how long a user waits for a reply before moving on. Default 30s.
	Drain        time.Duration // time allowed at the end for replies and reconnects. Default 20s.
	Workers      int           // concurrent read-backs after the run. Default 16.
	Seed         uint64        // random seed; 0: random

	// Output.
	JSONPath, HTMLPath string
	Progress           time.Duration // plain progress line interval when not a terminal. Default 5s.
	Out, Err           io.Writer     // summary, and progress + violations. Default io.Discard.
	ErrIsTerminal      bool          // Err is a terminal: one live progress line
	Logger             *slog.Logger  // harness diagnostics. Default: none.
}

// RegisterFlags binds c's fields to fs with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("url", "node WebSocket URL, ws://host:port/v1/ws (repeat, or comma-separate)", func(s string) error {
		for _, u := range strings.Split(s, ",") {
			if u = strings.TrimSpace(u); u != "" {
				c.URLs = append(c.URLs, u)
			}
		}
		return nil
	})
	fs.IntVar(&c.Local, "local", 0, "start N local nodes (tether serve) on 127.0.0.1 instead of --url")
	fs.StringVar(&c.ServerBin, "server-bin", "", "tether binary for --local (default: this executable)")
	fs.StringVar(&c.DataDir, "data", "", "directory for the local nodes' data and logs (default: a temp dir)")
	fs.Func("server-arg", "extra flag for the local nodes' tether serve (repeat)", func(s string) error {
		c.ServerArgs = append(c.ServerArgs, s)
		return nil
	})
	fs.Func("ca-cert", "with wss:// --url: PEM file of the CA to trust (default: the system's roots)", func(s string) error {
		tc, err := client.LoadCA(s)
		c.TLS = tc
		return err
	})
	fs.StringVar(&c.JWTSecret, "jwt-secret", "", "with --url: sign tokens with this HS256 secret")
	fs.BoolVar(&c.DevTokens, "dev-tokens", false, "with --url: get tokens from POST /dev/token")
	fs.IntVar(&c.Sessions, "sessions", 50, "simulated users")
	fs.DurationVar(&c.Ramp, "ramp", 5*time.Second, "start the users evenly over this")
	fs.DurationVar(&c.Duration, "duration", 30*time.Second, "load phase length")
	fs.Float64Var(&c.Rate, "rate", 1, "messages per second per user (each waits for its reply)")
	zeroFrac(fs, &c.AgentMix, "agent-mix", 0.25, "fraction of users that disrupt their connection mid-tool (with --local, > 0 runs the demo engine)")
	fs.StringVar(&c.Agent, "agent", "", "local nodes' engine: echo|demo|http (default: http with --agent-url, else demo if --agent-mix > 0)")
	fs.StringVar(&c.AgentURL, "agent-url", "", "with --agent http: an endpoint you run (default: start the Python example)")
	fs.StringVar(&c.AgentSecret, "agent-secret", "", "with --agent-url: the endpoint's HMAC secret (or TETHER_AGENT_SECRET)")
	fs.StringVar(&c.AgentScript, "agent-script", "", "with --agent http and no --agent-url: the Python endpoint to start (default: the example agent-python/agent.py)")
	fs.Func("agent-stream-delay", "with --agent http and no --agent-url: the example's pause between streamed words; 0: none (default 50ms)", func(s string) error {
		d, err := time.ParseDuration(s)
		if d <= 0 {
			d = -1 // none
		}
		c.AgentStreamDelay = d
		return err
	})
	fs.DurationVar(&c.ToolDelay, "tool-delay", 500*time.Millisecond, "local demo engine's --demo-search-delay")
	c.DropEvery = 8 * time.Second
	fs.Func("drop-every", "mean time between a user's disruptions; 0: none (default 8s)", func(s string) error {
		d, err := time.ParseDuration(s)
		if d <= 0 {
			d = -1 // none
		}
		c.DropEvery = d
		return err
	})
	zeroFrac(fs, &c.SilentFrac, "silent-frac", 0.3, "fraction of disruptions that are silences, not drops")
	fs.DurationVar(&c.AwayMax, "away-max", 2*time.Second, "a disrupted user stays away up to this")
	zeroFrac(fs, &c.ExpireFrac, "expire-frac", 0.1, "fraction of drops that stay away beyond the window (if window ≤ duration/3)")
	fs.DurationVar(&c.Window, "window", 0, "reconnect window: the local nodes' --window (default 5m), or the deployment's")
	fs.DurationVar(&c.KillEvery, "kill-every", 0, "with --local: SIGKILL a random node this often")
	fs.DurationVar(&c.TermEvery, "term-every", 0, "with --local: SIGTERM a random node this often")
	fs.DurationVar(&c.PauseEvery, "pause-every", 0, "with --local: SIGSTOP a random node this often, SIGCONT after --pause-for")
	fs.DurationVar(&c.PauseFor, "pause-for", 8*time.Second, "how long a paused node stays stopped")
	fs.DurationVar(&c.PartitionEvery, "partition-every", 0, "with --local 3 or more (Linux, root): cut a random node off from the others this often (network namespaces), for --partition-for")
	fs.DurationVar(&c.PartitionFor, "partition-for", 12*time.Second, "how long a partition lasts")
	fs.DurationVar(&c.Down, "down", 2*time.Second, "a killed node stays down this long")
	fs.DurationVar(&c.MaxBackoff, "max-backoff", time.Second, "clients' reconnect backoff cap")
	fs.DurationVar(&c.ReplyTimeout, "reply-timeout", 30*time.Second, "how long a user waits for a reply")
	fs.DurationVar(&c.Drain, "drain", 20*time.Second, "time allowed at the end for replies and reconnects")
	fs.IntVar(&c.Workers, "workers", 16, "concurrent session read-backs after the run")
	fs.Uint64Var(&c.Seed, "seed", 0, "random seed (0: random)")
	fs.StringVar(&c.JSONPath, "json", "", "write every figure to this JSON file")
	fs.StringVar(&c.HTMLPath, "html", "", "write a self-contained HTML report to this file")
	fs.DurationVar(&c.Progress, "progress", 5*time.Second, "progress line interval when not on a terminal")
}

// zeroFrac is a fraction flag whose 0 means 0: Config's zero value means
// the default, so an explicit 0 is stored as -1 (none).
func zeroFrac(fs *flag.FlagSet, p *float64, name string, def float64, usage string) {
	*p = def
	fs.Func(name, fmt.Sprintf("%s (default %g)", usage, def), func(s string) error {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		if v <= 0 {
			v = -1
		}
		*p = v
		return nil
	})
}

func (c *Config) setDefaults() error {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Sessions == 0 {
		c.Sessions = 50
	}
	def(&c.Ramp, 5*time.Second)
	def(&c.Duration, 30*time.Second)
	if c.Rate == 0 {
		c.Rate = 1
	}
	if c.AgentMix == 0 {
		c.AgentMix = 0.25
	}
	c.AgentMix = min(max(c.AgentMix, 0), 1)
	def(&c.ToolDelay, 500*time.Millisecond)
	def(&c.DropEvery, 8*time.Second)
	if c.SilentFrac == 0 {
		c.SilentFrac = 0.3
	}
	c.SilentFrac = min(max(c.SilentFrac, 0), 1)
	def(&c.AwayMax, 2*time.Second)
	if c.ExpireFrac == 0 {
		c.ExpireFrac = 0.1
	}
	c.ExpireFrac = min(max(c.ExpireFrac, 0), 1)
	def(&c.Down, 2*time.Second)
	def(&c.PauseFor, 8*time.Second)
	def(&c.PartitionFor, 12*time.Second)
	def(&c.MaxBackoff, time.Second)
	def(&c.ReplyTimeout, 30*time.Second)
	def(&c.Drain, 20*time.Second)
	def(&c.Progress, 5*time.Second)
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Err == nil {
		c.Err = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Python == "" {
		c.Python = "python3"
	}
	if c.Agent == "" && c.AgentURL != "" {
		c.Agent = "http"
	}
	if c.Agent == "" {
		c.Agent = "echo"
		if c.AgentMix > 0 {
			c.Agent = "demo"
		}
	}
	return c.validate()
}

func (c *Config) validate() error {
	switch {
	case c.Local > 0 && len(c.URLs) > 0:
		return errors.New("bench: give --url or --local, not both")
	case c.Local <= 0 && len(c.URLs) == 0:
		return errors.New("bench: give --url (a running deployment) or --local N (start N nodes here)")
	case c.Local > 0 && c.ServerBin == "":
		return errors.New("bench: --local needs the tether binary (--server-bin)")
	case c.Local == 0 && c.JWTSecret == "" && !c.DevTokens:
		return errors.New("bench: with --url, give --jwt-secret S (the nodes' secret) or --dev-tokens")
	case c.Local == 0 && (c.KillEvery > 0 || c.TermEvery > 0 || c.PauseEvery > 0):
		return errors.New("bench: --kill-every, --term-every and --pause-every need --local")
	case c.PauseEvery > 0 && c.PauseFor <= 0:
		return errors.New("bench: --pause-for must be positive")
	case c.PartitionEvery > 0 && c.Local < 3:
		return errors.New("bench: --partition-every needs --local 3 or more (a majority to cut a node off from)")
	case c.PartitionEvery > 0 && c.PartitionFor <= 0:
		return errors.New("bench: --partition-for must be positive")
	case c.PartitionEvery > 0 && c.Agent == "http":
		return errors.New("bench: --partition-every cannot be used with --agent http: the nodes run in network namespaces that cannot reach an agent endpoint on this host")
	case c.Sessions < 1 || c.Rate <= 0 || c.Duration <= 0 || c.Ramp < 0:
		return errors.New("bench: --sessions, --rate and --duration must be positive")
	case c.Agent != "echo" && c.Agent != "demo" && c.Agent != "http":
		return fmt.Errorf("bench: --agent %q: echo, demo or http", c.Agent)
	case c.AgentURL != "" && c.Agent != "http":
		return fmt.Errorf("bench: --agent-url is for --agent http, not --agent %s", c.Agent)
	case c.Agent == "http" && c.Local == 0:
		return errors.New("bench: --agent http (and --agent-url) need --local: against --url the engine is the deployment's")
	case c.AgentURL != "" && c.AgentSecret == "":
		return errors.New("bench: --agent-url needs --agent-secret S (or TETHER_AGENT_SECRET): the endpoint checks every request's signature")
	case c.Agent == "http" && c.AgentURL == "" && c.AgentScript == "":
		return errors.New("bench: --agent http needs --agent-url (an endpoint you run) or --agent-script (the Python endpoint to start)")
	case c.Window < 0 || c.Down < 0:
		return errors.New("bench: --window and --down must not be negative")
	}
	if c.AgentURL != "" {
		if u, err := url.Parse(c.AgentURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("bench: --agent-url %q is not an http(s) URL such as http://127.0.0.1:9000/agent", c.AgentURL)
		}
	}
	return nil
}
