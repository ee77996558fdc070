"""Throughput of the reference broker through the official Python client: messages/s produced
(send to last receipt), and consumed and acknowledged (first receive to the consumer's close,
which the broker answers once every ack is in the cursor), with cursors persisted as shipped
and with --cursors-in-memory, in the same run, on fresh directories.

Usage: python load.py BROKER_BINARY [--messages N] [--batch B] [--rounds R]
Prints one line per round and mode, then the medians and the ratio as a Markdown table. Also
reports the broker's CPU time (user and system, from /proc) over the consume-and-ack phase:
dispatching and acknowledging, without the client's share of the machine.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import pulsar


def start(binary, data_dir, extra):
    proc = subprocess.Popen([binary, "--data-dir", data_dir, "--listen", "127.0.0.1:0"] + extra,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("listening on "), line
    return proc, "pulsar://" + line.split()[-1]


def cpu_seconds(pid):
    """User and system CPU time of process `pid` so far, in seconds (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(binary, extra, n, batch):
    with tempfile.TemporaryDirectory(prefix="ackstore-broker-load-") as tmp:
        proc, url = start(binary, tmp + "/store", extra)
        try:
            c = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
            cons = c.subscribe("load", "sub", consumer_type=pulsar.ConsumerType.Shared,
                               receiver_queue_size=5000)
            if batch > 1:
                p = c.create_producer("load", batching_enabled=True, batching_max_messages=batch,
                                      batching_max_publish_delay_ms=5, max_pending_messages=50000,
                                      block_if_queue_full=True)
            else:
                p = c.create_producer("load", batching_enabled=False, max_pending_messages=50000,
                                      block_if_queue_full=True)
            done = threading.Semaphore(0)
            payload = b"x" * 100
            t0 = time.monotonic()
            for _ in range(n):
                p.send_async(payload, lambda res, _mid: done.release())
            p.flush()
            for _ in range(n):
                done.acquire()
            produced = time.monotonic() - t0
            t1 = time.monotonic()
            cpu1 = cpu_seconds(proc.pid)
            for _ in range(n):
                m = cons.receive(timeout_millis=30000)
                cons.acknowledge(m)
            cons.close()
            consumed = time.monotonic() - t1
            broker_cpu = cpu_seconds(proc.pid) - cpu1
            p.close()
            c.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        return n / produced, n / consumed, broker_cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--messages", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    modes = [("persisted", []), ("cursors in memory", ["--cursors-in-memory"])]
    results = {name: ([], [], []) for name, _ in modes}
    for r in range(a.rounds):
        for name, extra in modes:
            prod, cons, cpu = one_run(a.binary, extra, a.messages, a.batch)
            results[name][0].append(prod)
            results[name][1].append(cons)
            results[name][2].append(cpu)
            print("round %d %-18s produce %9.0f msg/s  consume+ack %9.0f msg/s  broker CPU %.2f s"
                  % (r, name, prod, cons, cpu), flush=True)
    med = {name: tuple(statistics.median(x) for x in r) for name, r in results.items()}
    print()
    print("| mode | produced msg/s | consumed and acked msg/s | broker CPU s, consume and ack |")
    print("|---|---|---|---|")
    for name, _ in modes:
        print("| %s | %.0f | %.0f | %.2f |" % (name, med[name][0], med[name][1], med[name][2]))
    base = med["cursors in memory"]
    pers = med["persisted"]
    print("| ratio persisted / in memory | %.2f | %.2f | %.2f |"
          % (pers[0] / base[0], pers[1] / base[1], pers[2] / base[2] if base[2] else float("nan")))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    # The client library's threads can hang the interpreter's teardown: leave without it.
    os._exit(0)
