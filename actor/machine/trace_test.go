package machine

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tether-dev/tether/actor/engine"
	"github.com/tether-dev/tether/wal/record"
)

// The machine's traces (testdata/*.txt), as etcd's raft keeps its own:
// each directive is a typed event, its expected output the typed effects
// Step returns, one line each. A new behaviour of the machine is written
// here first. Run with -rewrite to regenerate the outputs after a
// deliberate change, and read the diff.
//
// Directives (times: each directive may carry +d to move the clock
// first, e.g. +30s):
//
//	new [idle=d] [window=d] [hibernate=d] [last=n]   a machine for session s1 of alice
//	attach conn=c [new] [shared] [last=n] [user=u]
//	detach conn=c
//	send conn=c id=m [content=text] [interrupt]
//	checked id=m conn=c [seq=n]        the answer to a LookupSend
//	appended id=n [err=text|stale]
//	step-done user=n [reply=text] [call=name [approval]] [err=text]   (of the newest step)
//	part text=t                        (of the newest step)
//	tool-done call=id [result=text] [err=text]
//	cancel conn=c [reply-to=n]
//	approve conn=c call=id [deny]
//	context conn=c key=value
//	complete conn=c
//	history conn=c [before=n] [limit=n]
//	rejoin conns=c,c [last=n]          the first event after a hibernation
//	deadline                           (not an event) Deadline, as an offset from t0
//	tick | flush | start | shutdown | query
//	recover boot=d alive=d             boot and last-alive as offsets from t0
func TestMachineTraces(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		tr := &tracer{now: t0, conns: map[string]*tconn{}}
		datadriven.RunTest(t, path, tr.step)
	})
}

type tracer struct {
	m     *Machine
	now   time.Time
	conns map[string]*tconn
}

func (tr *tracer) conn(t *testing.T, td *datadriven.TestData) *tconn {
	var name string
	td.ScanArgs(t, "conn", &name)
	c := tr.conns[name]
	if c == nil {
		c = &tconn{name}
		tr.conns[name] = c
	}
	return c
}

// str is the value of key, "_" standing for a space (directive values
// cannot hold one).
func (tr *tracer) str(td *datadriven.TestData, key, def string) string {
	if a, ok := td.Arg(key); ok && len(a.Vals) > 0 {
		return strings.ReplaceAll(strings.Join(a.Vals, ", "), "_", " ")
	}
	return def
}

func (tr *tracer) step(t *testing.T, td *datadriven.TestData) string {
	for _, a := range td.CmdArgs {
		if strings.HasPrefix(a.Key, "+") {
			d, err := time.ParseDuration(a.Key[1:])
			if err != nil {
				td.Fatalf(t, "bad time step %q: %v", a.Key, err)
			}
			tr.now = tr.now.Add(d)
		}
	}
	if td.Cmd == "new" {
		cfg := machineConfig()
		var d string
		if td.MaybeScanArgs(t, "idle", &d) {
			cfg.IdleTimeout = mustDuration(t, td, d)
		}
		if td.MaybeScanArgs(t, "window", &d) {
			cfg.Window = mustDuration(t, td, d)
		}
		if td.MaybeScanArgs(t, "hibernate", &d) {
			cfg.HibernateAfter = mustDuration(t, td, d)
		}
		h := baseHeader()
		td.MaybeScanArgs(t, "last", &h.LastSeq)
		tr.m, _ = New(cfg, Restore{Data: record.SessionData{Header: h}}, tr.now)
		return "ok"
	}
	if tr.m == nil {
		td.Fatalf(t, "no machine: start with new")
	}
	if td.Cmd == "deadline" {
		if d := tr.m.Deadline(); !d.IsZero() {
			return "+" + d.Sub(t0).String()
		}
		return "never"
	}
	ev := tr.event(t, td)
	return tr.format(tr.m.Step(tr.now, ev))
}

func mustDuration(t *testing.T, td *datadriven.TestData, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		td.Fatalf(t, "bad duration %q: %v", s, err)
	}
	return d
}

func (tr *tracer) event(t *testing.T, td *datadriven.TestData) Event {
	var n uint64
	switch td.Cmd {
	case "attach":
		ev := Attach{Conn: tr.conn(t, td), UserID: tr.str(td, "user", "alice"), Shared: td.HasArg("shared"), AuthTime: tr.now}
		if td.HasArg("new") {
			ev.NewReason = ReasonNew
		}
		td.MaybeScanArgs(t, "last", &ev.LastSeq)
		return ev
	case "detach":
		return Detach{Conn: tr.conn(t, td)}
	case "rejoin":
		var ev Rejoin
		for _, a := range td.CmdArgs {
			if a.Key == "conns" {
				for _, n := range strings.Split(strings.Join(a.Vals, ","), ",") {
					c := tr.conns[n]
					if c == nil {
						c = &tconn{n}
						tr.conns[n] = c
					}
					ev.Conns = append(ev.Conns, c)
				}
			}
		}
		td.MaybeScanArgs(t, "last", &ev.LastSeq)
		return ev
	case "send", "checked":
		s := Send{Conn: tr.conn(t, td), ID: tr.str(td, "id", ""), Content: tr.str(td, "content", "hi"), Interrupt: td.HasArg("interrupt")}
		if td.Cmd == "send" {
			return s
		}
		found := td.MaybeScanArgs(t, "seq", &n)
		return SendChecked{Send: s, Seq: n, Found: found}
	case "appended":
		td.ScanArgs(t, "id", &n)
		var err error
		switch e := tr.str(td, "err", ""); e {
		case "":
		case "stale": // another node fenced this one: the session moved
			err = fmt.Errorf("fenced: %w", record.ErrStaleEpoch)
		default:
			err = fmt.Errorf("%s", e)
		}
		return Appended{ID: n, Err: err}
	case "step-done":
		td.ScanArgs(t, "user", &n)
		ev := StepDone{Step: tr.m.step, UserSeq: n, Action: engine.Action{Reply: tr.str(td, "reply", "")}}
		if name := tr.str(td, "call", ""); name != "" {
			ev.Action = engine.Action{Call: &engine.Call{Name: name, Approval: td.HasArg("approval")}}
		}
		if e := tr.str(td, "err", ""); e != "" {
			ev.Err = fmt.Errorf("%s", e)
		}
		return ev
	case "part":
		return Part{Step: tr.m.step, Text: tr.str(td, "text", "")}
	case "tool-done":
		ev := ToolDone{CallID: tr.str(td, "call", ""), Result: tr.str(td, "result", "")}
		if e := tr.str(td, "err", ""); e != "" {
			ev.Err = fmt.Errorf("%s", e)
		}
		return ev
	case "cancel":
		ev := Cancel{Conn: tr.conn(t, td)}
		td.MaybeScanArgs(t, "reply-to", &ev.ReplyTo)
		return ev
	case "approve":
		return Approve{Conn: tr.conn(t, td), CallID: tr.str(td, "call", ""), Approved: !td.HasArg("deny")}
	case "context":
		set := map[string]any{}
		for _, a := range td.CmdArgs {
			if a.Key != "conn" && !strings.HasPrefix(a.Key, "+") {
				set[a.Key] = strings.Join(a.Vals, ",")
			}
		}
		return SetContext{Conn: tr.conn(t, td), Set: set}
	case "complete":
		return Complete{Conn: tr.conn(t, td)}
	case "history":
		ev := HistoryRequest{Conn: tr.conn(t, td)}
		td.MaybeScanArgs(t, "before", &ev.Before)
		td.MaybeScanArgs(t, "limit", &ev.Limit)
		return ev
	case "tick":
		return Tick{}
	case "flush":
		return Flush{}
	case "start":
		return Start{}
	case "shutdown":
		return Shutdown{}
	case "query":
		return Query{}
	case "recover":
		var boot, alive string
		td.ScanArgs(t, "boot", &boot)
		td.ScanArgs(t, "alive", &alive)
		return Recover{Boot: t0.Add(mustDuration(t, td, boot)), LastAlive: t0.Add(mustDuration(t, td, alive))}
	}
	td.Fatalf(t, "unknown directive %q", td.Cmd)
	return nil
}

// format prints effects one a line, in order; an empty list is "(none)".
func (tr *tracer) format(effs []Effect) string {
	if len(effs) == 0 {
		return "(none)"
	}
	var b strings.Builder
	for _, e := range effs {
		b.WriteString(tr.effect(e))
		b.WriteByte('\n')
	}
	return b.String()
}

func name(c Conn) string {
	if tc, ok := c.(*tconn); ok && tc != nil {
		return tc.name
	}
	return "-"
}

func (tr *tracer) effect(e Effect) string {
	switch e := e.(type) {
	case Append:
		s := fmt.Sprintf("append #%d", e.ID)
		if e.Lazy {
			s += " lazy"
		}
		s += " status=" + string(e.Batch.Header.Status)
		for _, en := range e.Batch.Entries {
			s += " " + entryString(en)
		}
		for _, sd := range e.Batch.Sends {
			s += fmt.Sprintf(" send:%s→%d", sd.ID, sd.Seq)
		}
		if e.Batch.Context != nil {
			s += " +context"
		}
		return s
	case Deliver:
		return "deliver " + name(e.Conn) + " " + outString(e.Out)
	case CloseConn:
		return fmt.Sprintf("close %s why=%d %q", name(e.Conn), e.Why, e.Msg)
	case Replay:
		return fmt.Sprintf("replay %s after=%d %s first=%s", name(e.Conn), e.After, spanString(e.Messages), spanString(e.First))
	case History:
		return fmt.Sprintf("history %s %s", name(e.Conn), spanString(e.Messages))
	case LookupSend:
		return "lookup-send " + e.Send.ID
	case RunStep:
		steps := make([]string, len(e.Steps))
		for i, sp := range e.Steps {
			steps[i] = spanString(sp)
		}
		return fmt.Sprintf("run-step #%d user=%s history=%s steps=[%s]", e.Step, spanString(e.User), spanString(e.History), strings.Join(steps, " "))
	case FlushAfter:
		return "flush-after " + e.After.String()
	case RunTool:
		return fmt.Sprintf("run-tool %s %s attempt=%d", e.Call.CallID, e.Call.Name, e.Call.Attempts)
	case CancelTurn:
		return "cancel-turn"
	case Answer:
		if e.Result.Err != nil {
			return "answer err=" + e.Result.Err.Error()
		}
		return "answer " + e.Result.Reason
	case Report:
		v := e.View
		return fmt.Sprintf("report status=%s last=%d messages=%s", v.Header.Status, v.Header.LastSeq, spanString(v.Messages))
	case Ended:
		return "ended " + string(e.Status)
	case Fail:
		return fmt.Sprintf("fail moved=%v interrupt=%v: %v", e.Moved, e.Interrupt, e.Err)
	case Stop:
		return "stop"
	case Hibernate:
		names := make([]string, len(e.Conns))
		for i, c := range e.Conns {
			names[i] = name(c)
		}
		return fmt.Sprintf("hibernate conns=%s last=%d", strings.Join(names, ","), e.LastSeq)
	}
	return fmt.Sprintf("%T", e)
}

func entryString(e record.Entry) string {
	s := fmt.Sprintf("%d:%s:%q", e.Seq, e.Role, e.Content)
	if len(e.Metadata) > 0 {
		keys := make([]string, 0, len(e.Metadata))
		for k := range e.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		md := make([]string, len(keys))
		for i, k := range keys {
			md[i] = fmt.Sprintf("%s=%v", k, e.Metadata[k])
		}
		s += "{" + strings.Join(md, ",") + "}"
	}
	return s
}

func spanString(sp Span) string {
	if sp.Lo >= sp.Hi {
		return "[]"
	}
	return fmt.Sprintf("[%d,%d) held=%d", sp.Lo, sp.Hi, len(sp.Held))
}

func outString(o Out) string {
	switch o := o.(type) {
	case *SessionOut:
		return fmt.Sprintf("session %s reason=%s status=%s last=%d", o.SessionID, o.Reason, o.Status, o.LastSeq)
	case *AckOut:
		return fmt.Sprintf("ack %s seq=%d", o.ID, o.Seq)
	case *EntryOut:
		return "entry " + entryString(o.Entry)
	case *DeltaOut:
		return fmt.Sprintf("delta seq=%d parts=%d..%d %q", o.Seq, o.From, o.Part, o.Text)
	case *ContextOut:
		keys := make([]string, 0, len(o.Context))
		for k, v := range o.Context {
			keys = append(keys, fmt.Sprintf("%s=%v", k, v))
		}
		sort.Strings(keys)
		return "context " + strings.Join(keys, ",")
	case *CompletedOut:
		return "completed"
	case *ErrorOut:
		return fmt.Sprintf("error %s %q", o.Code, o.Message)
	case *BatchOut:
		return fmt.Sprintf("batch %d entries omitted=%d", len(o.Messages), o.Omitted)
	}
	return fmt.Sprintf("%T", o)
}
