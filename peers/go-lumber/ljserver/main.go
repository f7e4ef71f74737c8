// ljserver: go-lumber's Lumberjack server (v1 and v2) as a program, for refwire's
// tests against the real implementation.
//
// Every batch the library hands over is written to -out (one JSON event per
// line, flushed) before the batch is acked; -ack-delay sleeps before the ack.
// The line "listening on HOST:PORT" on stdout says the server accepts connections.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/elastic/go-lumber/server"
)

func main() {
	bind := flag.String("bind", "127.0.0.1:5044", "address to listen on (port 0: any free port)")
	out := flag.String("out", "", "append each event's JSON as one line to this file, flushed before the batch is acked")
	ackDelay := flag.Duration("ack-delay", 0, "sleep this long before acking each batch")
	maxWin := flag.Uint("maxwin", server.DefaultMaxWindowSize, "largest window (events) a client may announce; 0: no limit")
	timeout := flag.Duration("timeout", 30*time.Second, "read timeout inside a batch (the library's Timeout option)")
	keepalive := flag.Duration("keepalive", 3*time.Second, "v2 keepalive (A 0) interval while a batch waits for its ack; 0: none")
	v1 := flag.Bool("v1", true, "accept protocol version 1")
	v2 := flag.Bool("v2", true, "accept protocol version 2")
	quiet := flag.Bool("q", false, "no line per batch on stderr")
	flag.Parse()
	log.SetFlags(log.Lmicroseconds)

	var sink *bufio.Writer
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		sink = bufio.NewWriterSize(f, 1<<16)
	}

	l, err := net.Listen("tcp", *bind)
	if err != nil {
		log.Fatal(err)
	}
	s, err := server.NewWithListener(l,
		server.V1(*v1),
		server.V2(*v2),
		server.MaxWindowSize(uint32(*maxWin)),
		server.Timeout(*timeout),
		server.Keepalive(*keepalive),
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on %s\n", l.Addr())
	_ = os.Stdout.Sync()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		_ = s.Close()
	}()

	for batch := range s.ReceiveChan() {
		if sink != nil {
			for _, event := range batch.Events {
				line, err := json.Marshal(event)
				if err != nil {
					log.Fatalf("cannot encode an event: %v", err)
				}
				_, _ = sink.Write(line)
				_ = sink.WriteByte('\n')
			}
			if err := sink.Flush(); err != nil {
				log.Fatalf("cannot write %s: %v", *out, err)
			}
		}
		if !*quiet {
			log.Printf("batch of %d events from %s", len(batch.Events), batch.RemoteAddr)
		}
		if *ackDelay > 0 {
			time.Sleep(*ackDelay)
		}
		batch.ACK()
	}
}
