// declbench: durable queue declares through amqp091-go, C connections × H channels, each
// channel keeping one declare in flight (or, with -nowait, no-wait declares then one waited
// one), N in all; prints the rate. docs/benchmarks.md compares Warren and RabbitMQ with it:
//
//	cd tools/bench/declbench && go run . -url amqp://guest:guest@127.0.0.1:5672/ -c 4 -h 16 -n 8000
package main

import (
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Durable queue declares from C connections x H channels each, each channel keeping one
// declare in flight (wait for declare-ok), N declares in all.
func main() {
	url := flag.String("url", "amqp://guest:guest@127.0.0.1:5690/", "")
	conns := flag.Int("c", 1, "connections")
	chans := flag.Int("h", 1, "channels per connection")
	n := flag.Int("n", 10000, "declares")
	prefix := flag.String("p", "dq", "queue name prefix")
	nowait := flag.Bool("nowait", false, "no-wait declares then one sync declare per channel")
	flag.Parse()
	var next int64 = -1
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < *conns; c++ {
		conn, err := amqp.Dial(*url)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		defer conn.Close()
		for h := 0; h < *chans; h++ {
			ch, err := conn.Channel()
			if err != nil {
				fmt.Println(err)
				os.Exit(1)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := atomic.AddInt64(&next, 1)
					if i >= int64(*n) {
						break
					}
					if _, err := ch.QueueDeclare(fmt.Sprintf("%s-%d", *prefix, i), true, false, false, *nowait, nil); err != nil {
						fmt.Println(err)
						os.Exit(1)
					}
				}
				if *nowait {
					ch.QueueDeclare(fmt.Sprintf("%s-sync", *prefix), true, false, false, false, nil)
				}
			}()
		}
	}
	wg.Wait()
	el := time.Since(start)
	fmt.Printf("%d declares in %.2fs: %.0f/s\n", *n, el.Seconds(), float64(*n)/el.Seconds())
}
