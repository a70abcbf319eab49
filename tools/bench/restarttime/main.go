// restarttime: spawns a broker command (the arguments after the flags) and times until an
// AMQP client can connect and passively declare a queue: "serving after a restart" as a
// client sees it (issue 30, docs/benchmarks.md "A million durable queues"). It also prints
// the broker's CPU time (user+sys from /proc) at that moment, steadier than the wall time on
// a loaded machine. The broker is left running: stop it by the PID printed on stderr.
//
//	go build -o /tmp/restarttime . && /tmp/restarttime -q dq-999999 warren server --amqp-port 5900 ...
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func main() {
	url := flag.String("url", "amqp://guest:guest@127.0.0.1:5900/", "")
	queue := flag.String("q", "dq-999999", "queue to passively declare")
	flag.Parse()
	args := flag.Args()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	fmt.Fprintf(os.Stderr, "PID %d\n", cmd.Process.Pid)
	var lastErr error
	for time.Since(start) < 300*time.Second {
		conn, err := amqp.Dial(*url)
		if err == nil {
			ch, err2 := conn.Channel()
			if err2 == nil {
				q, err3 := ch.QueueDeclarePassive(*queue, true, false, false, false, nil)
				if err3 == nil {
					stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
					f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
					var ut, st float64
					fmt.Sscan(f[11], &ut)
					fmt.Sscan(f[12], &st)
					fmt.Printf("serving after %.2fs (queue %s, %d messages), broker CPU %.2fs user+sys\n", time.Since(start).Seconds(), q.Name, q.Messages, (ut+st)/100)
					conn.Close()
					os.Exit(0)
				}
				lastErr = err3
			} else {
				lastErr = err2
			}
			conn.Close()
		} else {
			lastErr = err
		}
		if lastErr != nil && !strings.Contains(lastErr.Error(), "connection refused") {
			fmt.Fprintln(os.Stderr, "err:", lastErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Println("timeout", lastErr)
	os.Exit(1)
}
