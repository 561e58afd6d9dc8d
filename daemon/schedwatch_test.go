package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	rtmetrics "runtime/metrics"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// schedWatch samples, every interval, how long each thread of this
// process has waited on a CPU run queue (/proc/self/task/*/schedstat,
// second field) and how many goroutines waited long for a P (the
// runtime's /sched/latencies:seconds), together with a counter of
// interest (the fair queue's expired drops). At each rise of the counter
// it reports the window before: a packet that waited 100 ms for a sealer
// whose thread was off its CPU shows a thread waiting about that long.
// A thread waits on a run queue behind other processes and behind this
// process's own threads alike, and on a loaded machine such waits are
// common (the test logs their base rate): this is necessary evidence, not
// proof. The control that separates CPU starvation from a sealer that did
// not look is the same test under chrt -f (see TestReloadKeepsSessions).
type schedWatch struct {
	counter  func() uint64
	interval time.Duration
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once

	// Written by the sampling goroutine; read after done.
	samples []schedSample
	err     error
}

type schedSample struct {
	at    time.Time
	count uint64
	wait  map[int]uint64 // cumulative run-queue wait by thread, ns
	// slow[k] counts goroutines that waited at least slowBounds[k] for a P.
	slow [len(slowBounds)]uint64
}

// slowBounds are the goroutine scheduling latencies schedWatch counts.
var slowBounds = [...]time.Duration{time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond}

func watchSched(interval time.Duration, counter func() uint64) *schedWatch {
	w := &schedWatch{counter: counter, interval: interval, stop: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w
}

func (w *schedWatch) loop() {
	defer close(w.done)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		s, err := sampleSched(w.counter())
		if err != nil {
			w.err = err
			return
		}
		w.samples = append(w.samples, s)
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
	}
}

func sampleSched(count uint64) (schedSample, error) {
	s := schedSample{at: time.Now(), count: count, wait: map[int]uint64{}}
	threads, err := procfs.AllThreads(os.Getpid())
	if err != nil {
		return s, err
	}
	for _, th := range threads {
		st, err := th.Schedstat()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue // the thread ended
			}
			return s, fmt.Errorf("schedstat of thread %d: %w", th.PID, err)
		}
		s.wait[th.PID] = st.WaitingNanoseconds
	}
	m := []rtmetrics.Sample{{Name: "/sched/latencies:seconds"}}
	rtmetrics.Read(m)
	h := m[0].Value.Float64Histogram()
	for i, c := range h.Counts {
		for k, b := range slowBounds {
			if h.Buckets[i] >= b.Seconds() {
				s.slow[k] += c
			}
		}
	}
	return s, nil
}

// halt stops the sampling goroutine and waits for it; safe to call more
// than once (finish does, and a test's cleanup after a failure).
func (w *schedWatch) halt() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

// schedStall is the window before one rise of the counter.
type schedStall struct {
	at      time.Time
	rise    uint64
	span    time.Duration // the window actually covered by samples
	maxWait time.Duration // the most one thread waited for a CPU
	sumWait time.Duration // all threads together
	threads int
	latency time.Duration // a goroutine waited at least this for a P (0, or one of slowBounds)
}

// starved reports whether the process was short of CPU for about as long
// as the fair queue's time bound: a thread of it waited on a run queue,
// or a goroutine waited for a P, at least bound/2.
func (s schedStall) starved(bound time.Duration) bool {
	return s.maxWait >= bound/2 || s.latency >= bound/2
}

func (s schedStall) String() string {
	return fmt.Sprintf("+%d expired at %s: in the %v before, one thread waited %.1f ms for a CPU, all %d threads %.1f ms; a goroutine waited >= %.0f ms for a P",
		s.rise, s.at.Format("15:04:05.000"), s.span.Round(time.Millisecond), ms(s.maxWait), s.threads, ms(s.sumWait), ms(s.latency))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// finish stops the sampling and returns, for each rise of the counter,
// the window before it, and how many windows of that length the whole
// run had and in how many of them a thread waited at least bound for a
// CPU (the base rate of such stalls, counter or not).
func (w *schedWatch) finish(window, bound time.Duration) (stalls []schedStall, windows, starvedWindows int, err error) {
	w.halt()
	for i := 1; i < len(w.samples); i++ {
		cur := w.samples[i]
		if cur.count <= w.samples[i-1].count {
			continue
		}
		s := w.stall(i, window)
		s.rise = cur.count - w.samples[i-1].count
		stalls = append(stalls, s)
	}
	for i := 1; i < len(w.samples); {
		s := w.stall(i, window)
		windows++
		if s.maxWait >= bound {
			starvedWindows++
		}
		k := i + 1
		for k < len(w.samples) && w.samples[k].at.Sub(w.samples[i].at) < window {
			k++
		}
		i = k
	}
	return stalls, windows, starvedWindows, w.err
}

// stall describes the window of about window ending at sample i.
func (w *schedWatch) stall(i int, window time.Duration) schedStall {
	cur := w.samples[i]
	j := i - 1
	for j > 0 && cur.at.Sub(w.samples[j].at) < window {
		j--
	}
	first := w.samples[j]
	s := schedStall{at: cur.at, span: cur.at.Sub(first.at), threads: len(cur.wait)}
	for tid, v := range cur.wait {
		d := time.Duration(v - first.wait[tid]) // a thread started meanwhile: from 0
		s.sumWait += d
		s.maxWait = max(s.maxWait, d)
	}
	for k := len(slowBounds) - 1; k >= 0; k-- {
		if cur.slow[k] > first.slow[k] {
			s.latency = slowBounds[k]
			break
		}
	}
	return s
}
