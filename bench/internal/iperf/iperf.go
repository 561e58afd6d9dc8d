// Package iperf runs iperf3 clients for the benchmark and reads their
// --json output.
package iperf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Result is what the harness takes from one iperf3 --json run of the
// client.
type Result struct {
	// Seconds is the length of the measured interval at the receiver.
	Seconds float64
	// Bytes and BitsPerSecond are what the receiver got.
	Bytes         float64
	BitsPerSecond float64
	// Retransmits is the sender's TCP retransmissions (TCP only).
	Retransmits float64
	// UDP only: datagrams sent (as numbered by the sender), lost, and the
	// loss in percent, as the receiver counted them.
	Packets     float64
	LostPackets float64
	LostPercent float64
	UDP         bool
}

// DeliveredPPS is the rate of datagrams that reached the receiver.
func (r Result) DeliveredPPS() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return (r.Packets - r.LostPackets) / r.Seconds
}

type iperfSum struct {
	Seconds       float64 `json:"seconds"`
	Bytes         float64 `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Retransmits   float64 `json:"retransmits"`
	Packets       float64 `json:"packets"`
	LostPackets   float64 `json:"lost_packets"`
	LostPercent   float64 `json:"lost_percent"`
}

type iperfJSON struct {
	Start struct {
		TestStart struct {
			Protocol string `json:"protocol"`
		} `json:"test_start"`
	} `json:"start"`
	End struct {
		SumSent     *iperfSum `json:"sum_sent"`
		SumReceived *iperfSum `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
}

// Parse reads the --json output of an iperf3 client (3.7 or later: the
// end section has sum_sent and sum_received for TCP and UDP alike).
func Parse(b []byte) (Result, error) {
	var j iperfJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Result{}, fmt.Errorf("iperf3 json: %w", err)
	}
	if j.Error != "" {
		return Result{}, fmt.Errorf("iperf3: %s", j.Error)
	}
	rcv, snd := j.End.SumReceived, j.End.SumSent
	if rcv == nil || snd == nil {
		return Result{}, errors.New("iperf3 json: no end.sum_received/sum_sent")
	}
	r := Result{
		Seconds:       rcv.Seconds,
		Bytes:         rcv.Bytes,
		BitsPerSecond: rcv.BitsPerSecond,
		Retransmits:   snd.Retransmits,
	}
	if j.Start.TestStart.Protocol == "UDP" {
		r.UDP = true
		r.Packets = rcv.Packets
		r.LostPackets = rcv.LostPackets
		r.LostPercent = rcv.LostPercent
	}
	return r, nil
}

// Exec runs a command (an iperf3 client, in the benchmark's pod A
// namespace) and returns its combined output.
type Exec func(ctx context.Context, args ...string) (string, error)

// Run runs the iperf3 client args (which include -J) with exec, retrying
// a few times when the server is not ready for the next test yet. d is the
// length of the test; a run that takes 30 s longer is stopped.
func Run(ctx context.Context, exec Exec, args []string, d time.Duration) (Result, error) {
	var last error
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return Result{}, ctx.Err()
			case <-time.After(time.Second):
			}
		}
		cctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
		out, err := exec(cctx, args...)
		cancel()
		// iperf3 -J prints JSON (with "error" on failure) even when it
		// exits non-zero.
		if i := strings.IndexByte(out, '{'); i >= 0 {
			r, perr := Parse([]byte(out[i:]))
			if perr == nil {
				return r, nil
			}
			last = perr
		} else if err != nil {
			last = err
		} else {
			last = fmt.Errorf("iperf3: no JSON output")
		}
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
	}
	return Result{}, last
}
