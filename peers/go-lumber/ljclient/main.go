// ljclient: go-lumber's v2 client (client/v2 SyncClient) as a program, for
// refwire's tests against the real implementation.  It is a `refwire conform
// lumberjack --client --exec` testee (specs/lumberjack/README.md §9):
//
//	ljclient -c {host}:{port} -n {events} [-tls-ca {tls_ca}]
//
// It sends -n distinct events in windows of -batch, each window through
// SyncClient.Send (write, then wait for its acks), and exits 0 once every
// window was acked.  Any error ends it with status 1 and the line
// "send error after K acked: ERR" on stderr: like the library, it neither
// reconnects nor resends (that is libbeat's part, not go-lumber's).
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	v2 "github.com/elastic/go-lumber/client/v2"
)

func main() {
	connect := flag.String("c", "", "HOST:PORT of the server (required)")
	events := flag.Int("n", 1, "number of events to send")
	batch := flag.Int("batch", 2048, "events per window (Beats' default bulk_max_size)")
	compress := flag.Int("compress", 3, "zlib level of the C frame, 0-9 (0: plain J frames)")
	timeout := flag.Duration("timeout", 30*time.Second, "the library's I/O timeout (re-armed by each ack read)")
	tlsCA := flag.String("tls-ca", "", "connect with TLS, verifying the server against this CA file (PEM); empty: plain TCP")
	flag.Parse()
	if *connect == "" || *events < 0 || *batch < 1 {
		flag.Usage()
		os.Exit(2)
	}

	dial := net.Dial
	if *tlsCA != "" {
		pem, err := os.ReadFile(*tlsCA)
		if err != nil {
			fail(0, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fail(0, fmt.Errorf("no certificate in %s", *tlsCA))
		}
		host, _, err := net.SplitHostPort(*connect)
		if err != nil {
			fail(0, err)
		}
		cfg := &tls.Config{RootCAs: pool, ServerName: host}
		dial = func(network, address string) (net.Conn, error) {
			d := &net.Dialer{Timeout: *timeout}
			return tls.DialWithDialer(d, network, address, cfg)
		}
	}

	cl, err := v2.SyncDialWith(dial, *connect, v2.CompressionLevel(*compress), v2.Timeout(*timeout))
	if err != nil {
		fail(0, err)
	}
	defer cl.Close()

	acked := 0
	for start := 0; start < *events; start += *batch {
		end := start + *batch
		if end > *events {
			end = *events
		}
		window := make([]interface{}, 0, end-start)
		for i := start + 1; i <= end; i++ {
			window = append(window, map[string]interface{}{
				"message": fmt.Sprintf("go-lumber event %d of %d", i, *events),
				"n":       i,
			})
		}
		seq, err := cl.Send(window)
		if err != nil {
			fail(acked+seq, err)
		}
		acked += seq
	}
	fmt.Printf("sent %d events, all acked\n", acked)
}

func fail(acked int, err error) {
	fmt.Fprintf(os.Stderr, "send error after %d acked: %v\n", acked, err)
	os.Exit(1)
}
