package modes

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/bridgehead/bridgehead/bench/internal/lab"
	"github.com/bridgehead/bridgehead/bench/internal/promtext"
)

// metricsListen is where a bridgehead gateway of the lab serves its
// metrics, on its own namespace's loopback.
const metricsListen = "127.0.0.1:9641"

// ScrapeBridgehead fetches the metrics of the bridgehead gateway in
// namespace ns.
func ScrapeBridgehead(ctx context.Context, ns string) ([]promtext.Sample, error) {
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := lab.InNetns(ns, func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsListen+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", ns, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics of %s: %s", ns, resp.Status)
	}
	return promtext.Parse(b)
}
