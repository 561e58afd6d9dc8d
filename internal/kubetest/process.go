package kubetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// stopGrace is how long a process may take to exit after SIGTERM before
// it is killed. The API server usually stops in about 1.2 s, but once in
// CI (stop 25's run, a 2-core machine running the whole tree) it took more
// than 10 s; controller-runtime's envtest allows 20 s for the same stop.
const stopGrace = 30 * time.Second

type httpRoundTripper = http.RoundTripper

// process is one child: its command, log file and exit.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	// done is closed when the process has exited; err is its Wait
	// result, written before done is closed.
	done chan struct{}
	err  error
}

func startProcess(bin, logFile string, args ...string) (*process, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// The child dies with the test binary, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{name: filepath.Base(bin), cmd: cmd, log: f, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// waitReady polls url every 50 ms until it answers 200.
func (p *process) waitReady(ctx context.Context, url string, rt http.RoundTripper) error {
	if rt == nil {
		rt = http.DefaultTransport
	}
	client := &http.Client{Transport: rt, Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready: %v (see %s)", p.name, p.err, p.log.Name())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last: %v)", p.name, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM, waits stopGrace, then kills. An exit caused by the
// signal is not an error.
func (p *process) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not exit %v after SIGTERM; killed", p.name, stopGrace)
	}
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		return p.err
	}
	return nil
}

// dumpLogs writes the last lines of each log through logf.
func (e *Env) dumpLogs(logf func(string, ...any)) {
	for _, name := range []string{"etcd.log", "kube-apiserver.log"} {
		lines := tail(filepath.Join(e.WorkDir, name), 40)
		for _, l := range lines {
			logf("%s: %s", name, l)
		}
	}
}

func tail(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines
}
