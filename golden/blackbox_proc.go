package golden

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

type bbProc struct {
	n       int
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	err     error
	gone    bool // killed or stopped on purpose
	ready   chan struct{}
	readyAt time.Time // when it printed Ready (zero: not yet)
	once    sync.Once
	line    []byte // output since the last line break, for Ready
}

// procOutput is an instance's stdout and stderr.
type procOutput struct {
	r *bbRun
	p *bbProc
}

func (o procOutput) Write(b []byte) (int, error) {
	if re := o.r.ready; re != nil {
		o.r.mu.Lock()
		o.p.line = append(o.p.line, b...)
		for {
			i := slices.Index(o.p.line, '\n')
			if i < 0 {
				break
			}
			if re.Match(o.p.line[:i]) {
				o.p.once.Do(func() {
					o.p.readyAt = time.Now()
					close(o.p.ready)
				})
			}
			o.p.line = o.p.line[i+1:]
		}
		o.r.mu.Unlock()
	}
	return o.r.Write(b)
}

func (r *bbRun) start(n int) error {
	cmd := exec.Command("sh", "-c", r.bb.Command)
	cmd.Dir = r.bb.Dir
	cmd.Env = r.env(n)
	p := &bbProc{n: n, cmd: cmd, started: time.Now(), done: make(chan struct{}), ready: make(chan struct{})}
	cmd.Stdout = procOutput{r, p}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("golden: start instance %d (sh -c %q): %w", n, r.bb.Command, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	r.mu.Lock()
	if n <= len(r.procs) {
		r.procs[n-1] = p
	} else {
		r.procs = append(r.procs, p)
	}
	r.changes++
	r.mu.Unlock()
	return nil
}

func (r *bbRun) env(n int) []string {
	env := append(os.Environ(), r.bb.Env...)
	env = append(env, r.databaseEnv()...)
	env = append(env,
		EnvBroker+"="+r.bb.Broker,
		EnvQueue+"="+r.queue,
		EnvDLQ+"=DLQ."+r.queue,
		EnvRejectQueue+"="+r.queue+".REJECTED",
		EnvMaxAttempts+"="+strconv.Itoa(r.sc.MaxAttempts),
		EnvMaxRedeliveries+"="+strconv.Itoa(r.sc.BrokerMaxDeliveries-1),
		EnvInstance+"="+strconv.Itoa(n),
		ServiceEnv(r.bb.Service)+"="+r.serviceURL+strconv.Itoa(n),
	)
	if r.openWire != "" {
		env = append(env, EnvOpenWire+"="+r.openWire)
	}
	return env
}

// Write collects the processes' output (the last 8 KiB, for errors).
func (r *bbRun) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.outAt = time.Now()
	r.outBuf = append(r.outBuf, p...)
	if len(r.outBuf) > 8<<10 {
		r.outBuf = append([]byte(nil), r.outBuf[len(r.outBuf)-8<<10:]...)
	}
	r.mu.Unlock()
	return r.bb.Output.Write(p)
}

func (r *bbRun) tail() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.outBuf)
}

// waitReady waits until every instance printed bb.Ready (or, without it,
// for bb.Quiet).
func (r *bbRun) waitReady(ctx context.Context) error {
	if r.ready == nil {
		select {
		case <-time.After(r.bb.Quiet):
			return r.exited()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	deadline := time.After(r.bb.Timeout)
	for _, p := range slices.Clone(r.procs) {
		select {
		case <-p.ready:
		case <-p.done:
			return fmt.Errorf("golden: instance %d exited before it printed %q (%v)", p.n, r.bb.Ready, p.err)
		case <-deadline:
			return fmt.Errorf("golden: instance %d did not print %q within %s", p.n, r.bb.Ready, r.bb.Timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// upSince reports whether every instance is up (printed bb.Ready since its
// last start or, without Ready, was started bb.Quiet ago), and since when.
func (r *bbRun) upSince() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t time.Time
	for _, p := range r.procs {
		up := p.started.Add(r.bb.Quiet)
		if r.ready != nil {
			if p.readyAt.IsZero() {
				return time.Time{}, false
			}
			up = p.readyAt
		}
		if time.Now().Before(up) {
			return time.Time{}, false
		}
		t = later(t, up)
	}
	return t, true
}

func (r *bbRun) lastOutput() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outAt
}

// kill sends SIGKILL to the process group of instance n and waits for it.
func (r *bbRun) kill(n int) {
	r.mu.Lock()
	p := r.procs[n-1]
	p.gone = true
	r.mu.Unlock()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// stopAll sends SIGTERM to every instance, then SIGKILL after 10s.
func (r *bbRun) stopAll() {
	r.mu.Lock()
	procs := slices.Clone(r.procs)
	for _, p := range procs {
		p.gone = true
	}
	r.mu.Unlock()
	for _, p := range procs {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
}

// exited reports an instance that ended without being killed by the recorder.
func (r *bbRun) exited() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		select {
		case <-p.done:
			if !p.gone {
				return fmt.Errorf("golden: instance %d exited on its own (%v)", p.n, p.err)
			}
		default:
		}
	}
	return nil
}
