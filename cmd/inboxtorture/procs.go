package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/inboxkit/inboxkit/internal/failpoint"
)

// death is why a consumer process ended.
type death string

const (
	deathKill  death = "kill -9"    // killed by the rig
	deathError death = "error exit" // ended by itself without a failpoint (e.g. broker gone)
	deathClean death = "clean exit" // exit 0 outside the final stop
)

// supervisor runs the consumer processes and restarts each one that ends,
// as a process manager would, until stop.
type supervisor struct {
	name     string                  // what the processes are, in the log ("consumer")
	slotArgs func(slot int) []string // arguments appended for one slot (nil: none)
	args     []string                // inboxctl run ...
	env      []string
	logDir   string
	logf     func(string, ...any)
	startMu  sync.Mutex    // held while (re)starting; stop takes it to end restarts
	stopping chan struct{} // made by the first pause, closed by stop
	stopped  bool          // under startMu and mu

	mu       sync.Mutex
	procs    []*proc
	deaths   map[death]int
	restarts int
	wg       sync.WaitGroup
}

type proc struct {
	slot   int
	gen    int
	cmd    *exec.Cmd
	began  time.Time
	killed bool // by the rig
	paused bool // stopped with SIGSTOP by the rig, not yet continued
	fp     string
	done   chan struct{}
}

func newSupervisor(inboxctl string, args, env []string, logDir string, logf func(string, ...any)) *supervisor {
	return &supervisor{name: "consumer", args: append([]string{inboxctl}, args...), env: env, logDir: logDir, logf: logf, deaths: map[death]int{}}
}

// start starts slot's process (generation gen).
func (s *supervisor) start(slot, gen int) error {
	args := s.args[1:]
	if s.slotArgs != nil {
		args = append(append([]string(nil), args...), s.slotArgs(slot)...)
	}
	cmd := exec.Command(s.args[0], args...)
	cmd.Env = append(os.Environ(), s.env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	logw := io.Discard
	var logFile *os.File
	if s.logDir != "" {
		logFile, err = os.Create(filepath.Join(s.logDir, fmt.Sprintf("%s-%d.%d.log", s.name, slot, gen)))
		if err != nil {
			return err
		}
		logw = logFile
	}
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			logFile.Close()
		}
		return fmt.Errorf("start %s: %w", s.args[0], err)
	}
	p := &proc{slot: slot, gen: gen, cmd: cmd, began: time.Now(), done: make(chan struct{})}
	s.mu.Lock()
	if slot < len(s.procs) {
		s.procs[slot] = p
	} else {
		s.procs = append(s.procs, p)
	}
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var tail []string
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logw, line)
			if name, ok := strings.CutPrefix(line, failpoint.Line); ok {
				name, _, _ = strings.Cut(name, ":")
				s.mu.Lock()
				p.fp = name
				s.mu.Unlock()
			}
			tail = append(tail, line)
			if len(tail) > 5 {
				tail = tail[1:]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		err := cmd.Wait()
		if logFile != nil {
			logFile.Close()
		}
		close(p.done)
		s.ended(p, err, tail)
	}()
	return nil
}

func (s *supervisor) ended(p *proc, err error, tail []string) {
	s.mu.Lock()
	stopped := s.stopped
	var why death
	switch {
	case p.killed:
		why = deathKill
	case p.fp != "":
		why = death("failpoint " + p.fp)
	case stopped && err == nil:
		s.mu.Unlock()
		return
	case err == nil:
		why = deathClean
	default:
		why = deathError
	}
	s.deaths[why]++
	s.mu.Unlock()
	if why == deathError || why == deathClean {
		s.logf("%s %d.%d ended (%v); last lines:\n\t%s", s.name, p.slot, p.gen, err, strings.Join(tail, "\n\t"))
	} else {
		s.logf("%s %d.%d ended: %s", s.name, p.slot, p.gen, why)
	}
	if stopped {
		return
	}
	if time.Since(p.began) < 2*time.Second && why == deathError {
		time.Sleep(time.Second) // a service is down: do not spin
	} else {
		time.Sleep(200 * time.Millisecond)
	}
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if s.stopped {
		return
	}
	s.mu.Lock()
	s.restarts++
	s.mu.Unlock()
	if err := s.start(p.slot, p.gen+1); err != nil {
		s.logf("restart %s %d: %v", s.name, p.slot, err)
	}
}

// kill sends SIGKILL to slot's live process; false when it is not running.
func (s *supervisor) kill(slot int) bool {
	s.mu.Lock()
	p := s.procs[slot]
	select {
	case <-p.done:
		s.mu.Unlock()
		return false
	default:
	}
	if p.paused || p.killed {
		s.mu.Unlock()
		return false // paused: there to be found past its lease; killed: not reaped yet, one kill each
	}
	p.killed = true
	s.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return false
	}
	return true
}

// pause sends SIGSTOP to slot's live process and SIGCONT d later (at
// once when stop comes first); false when it is not running. The process
// keeps its connections and its leases and does nothing meanwhile: the
// broker's heartbeat or ack timeout, or the store's lease, hands its work
// to the others, and the process finds out when it wakes. done is closed
// once the process continues (or ended).
func (s *supervisor) pause(slot int, d time.Duration) (done chan struct{}, ok bool) {
	s.mu.Lock()
	p := s.procs[slot]
	select {
	case <-p.done:
		s.mu.Unlock()
		return nil, false
	default:
	}
	if p.paused || p.cmd.Process.Signal(syscall.SIGSTOP) != nil {
		s.mu.Unlock()
		return nil, false
	}
	p.paused = true
	if s.stopping == nil {
		s.stopping = make(chan struct{})
	}
	stopping := s.stopping
	s.mu.Unlock()
	done = make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-time.After(d):
		case <-p.done:
		case <-stopping:
		}
		s.mu.Lock()
		p.paused = false
		s.mu.Unlock()
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}()
	return done, true
}

// stop ends restarts, sends SIGTERM to every live process (they drain)
// and waits for them; after grace it kills what is left.
func (s *supervisor) stop(grace time.Duration) {
	s.startMu.Lock()
	s.mu.Lock()
	s.stopped = true
	procs := append([]*proc(nil), s.procs...)
	if s.stopping != nil {
		close(s.stopping) // paused processes continue, to take the SIGTERM
	}
	s.mu.Unlock()
	s.startMu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(grace)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
	s.wg.Wait()
}

// size is the number of slots.
func (s *supervisor) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.procs)
}

func (s *supervisor) counts() (map[death]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[death]int{}
	for k, v := range s.deaths {
		m[k] = v
	}
	return m, s.restarts
}
