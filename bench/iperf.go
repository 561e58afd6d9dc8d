package bench

import (
	"encoding/json"
	"errors"
	"fmt"
)

// IperfResult is what the harness takes from one iperf3 --json run of the
// client.
type IperfResult struct {
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
func (r IperfResult) DeliveredPPS() float64 {
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

// ParseIperf reads the --json output of an iperf3 client (3.7 or later:
// the end section has sum_sent and sum_received for TCP and UDP alike).
func ParseIperf(b []byte) (IperfResult, error) {
	var j iperfJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return IperfResult{}, fmt.Errorf("iperf3 json: %w", err)
	}
	if j.Error != "" {
		return IperfResult{}, fmt.Errorf("iperf3: %s", j.Error)
	}
	rcv, snd := j.End.SumReceived, j.End.SumSent
	if rcv == nil || snd == nil {
		return IperfResult{}, errors.New("iperf3 json: no end.sum_received/sum_sent")
	}
	r := IperfResult{
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
