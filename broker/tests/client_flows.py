"""The reference broker driven by the official Pulsar Python client (its wheels carry the C++
client): each flow produces, consumes, acknowledges and restarts the broker binary, and checks
what is delivered against what the flow acknowledged.

Usage: python client_flows.py BROKER_BINARY [FLOW ...]
Prints one line per flow (PASS or FAIL with the reason) and ends with "N passed, N failed";
the exit code is 1 when a flow failed.

Synchronisation is on events only: the broker prints `listening on ADDR` once it serves and
`flushed N cursors` once a SIGUSR1-requested flush tick is durable; a consumer's close returns
once the broker answered it, which it does only after applying every ack sent before it.
"""

import ctypes
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import pulsar

BINARY = None
RUNNING = []


def die_with_parent():
    """In the broker's child process before exec: SIGKILL it when the flow's process dies, so a
    flow whose client library crashed leaves no broker behind."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Broker:
    """The broker binary on one data directory; restartable after a SIGKILL."""

    def __init__(self, data_dir, extra=()):
        self.data_dir = data_dir
        self.extra = list(extra)
        self.proc = None
        self.url = None
        self.start()

    def start(self, listen="127.0.0.1:0"):
        self.proc = subprocess.Popen(
            [BINARY, "--data-dir", self.data_dir, "--listen", listen,
             "--flush-interval-ms", "100"] + self.extra,
            stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
        RUNNING.append(self.proc)
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), "broker did not start: %r" % line
        self.url = "pulsar://" + line.split()[-1]

    def flush(self):
        """Asks for a flush tick and waits until the broker says it is durable."""
        self.proc.send_signal(signal.SIGUSR1)
        line = self.proc.stdout.readline()
        assert line.startswith("flushed "), "unexpected broker output %r" % line

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def restart_after_kill(self):
        self.kill()
        self.start()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, "broker exit code %s" % self.proc.returncode
        assert "closed" in out, "broker did not close cleanly: %r" % out

    def restart_on_same_port(self):
        """A clean stop, then a start on the same address, so connected clients reconnect."""
        self.stop()
        self.start(self.url[len("pulsar://"):])


def client(broker):
    return pulsar.Client(broker.url, operation_timeout_seconds=30,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def killed_and_restarted(b, c, consumers):
    """Closes `consumers`, flushes the broker, closes client `c`, SIGKILLs the broker and starts
    it again; returns a new client of it."""
    for cons in consumers:
        cons.close()
    b.flush()
    c.close()
    b.restart_after_kill()
    return client(b)


def produce(c, topic, n, batch=None, start=0):
    """Sends n messages whose payloads are their numbers (start..start+n) and waits for every
    receipt; returns the message ids by number."""
    if batch:
        p = c.create_producer(topic, batching_enabled=True, batching_max_messages=batch,
                              batching_max_publish_delay_ms=60000,
                              block_if_queue_full=True, max_pending_messages=20000)
    else:
        p = c.create_producer(topic, batching_enabled=False)
    ids = {}
    errors = []
    done = threading.Semaphore(0)

    def sent(res, msg_id, i):
        if res != pulsar.Result.Ok:
            errors.append((i, res))
        ids[i] = msg_id
        done.release()

    for i in range(start, start + n):
        p.send_async(str(i).encode(), lambda res, mid, i=i: sent(res, mid, i))
    p.flush()
    for _ in range(n):
        assert done.acquire(timeout=60), "a receipt never came"
    assert not errors, "send errors: %r" % errors[:5]
    p.close()
    return ids


def send_and_wait(p, data):
    """Sends one message and returns the outcome; fails when none comes within 30 s (a client
    that resends a message the broker cannot store never gives up by itself)."""
    done = threading.Event()
    outcome = []

    def sent(res, _msg_id):
        outcome.append(res)
        done.set()

    p.send_async(data, sent)
    assert done.wait(timeout=30), "no outcome for a message of %d bytes" % len(data)
    return outcome[0]


def number(msg):
    return int(msg.data())


def receive_until(consumers, want, timeout_ms=10000):
    """Receives round-robin from consumers until `want(msgs)` holds; returns (consumer, msg)
    pairs. Fails when no consumer receives anything for timeout_ms."""
    got = []
    idle_since = time.monotonic()
    while not want(got):
        progressed = False
        for c in consumers:
            # Drain this consumer while it has messages, then look at the next one.
            while not want(got):
                try:
                    m = c.receive(timeout_millis=50)
                except pulsar.Timeout:
                    break
                got.append((c, m))
                progressed = True
            if want(got):
                break
        if progressed:
            idle_since = time.monotonic()
        elif (time.monotonic() - idle_since) * 1000 > timeout_ms:
            raise AssertionError("no message for %d ms after %d received" % (timeout_ms, len(got)))
    return got


def assert_nothing_more(consumers, wait_ms=500):
    for c in consumers:
        try:
            m = c.receive(timeout_millis=wait_ms)
        except pulsar.Timeout:
            continue
        raise AssertionError("unexpected extra message %r" % m.data())


def flow_shared_batch_index_acks_survive_sigkill(tmp):
    """10,000 messages in batches of 100, two Shared consumers with batch-index acks: even
    messages acked, every tenth nacked (then redelivered and left unacked). After the acks are
    flushed and the broker is SIGKILLed and restarted, exactly the odd messages come back."""
    b = Broker(tmp)
    c = client(b)
    topic = "shared-batches"
    n = 10000
    produce(c, topic, n, batch=100)
    consumers = [c.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                             initial_position=pulsar.InitialPosition.Earliest,
                             batch_index_ack_enabled=True,
                             negative_ack_redelivery_delay_ms=100,
                             consumer_name="c%d" % k) for k in range(2)]
    seen = set()
    nacked = set()
    redelivered = set()
    per_consumer = [0, 0]

    def handle(pairs):
        for cons, m in pairs[handle.done:]:
            i = number(m)
            per_consumer[consumers.index(cons)] += 1
            if i in seen:
                # A nack redelivers its whole batch but the acknowledged messages, so
                # messages of that batch not yet acknowledged (or whose ack was still
                # grouped in the client) may come again: acknowledged again if even.
                if i in nacked:
                    redelivered.add(i)
                elif i % 2 == 0:
                    cons.acknowledge(m)
                continue
            seen.add(i)
            if i % 2 == 0:
                cons.acknowledge(m)
            elif i % 10 == 1:
                cons.negative_acknowledge(m)
                nacked.add(i)
        handle.done = len(pairs)
        return len(seen) == n and redelivered >= nacked
    handle.done = 0
    receive_until(consumers, handle)
    assert all(per_consumer), "one consumer received nothing: %r" % per_consumer
    c = killed_and_restarted(b, c, consumers)
    consumers = [c.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                             batch_index_ack_enabled=True, consumer_name="d%d" % k)
                 for k in range(2)]
    want = set(i for i in range(n) if i % 2 == 1)
    got = receive_until(consumers, lambda g: len(g) >= len(want))
    numbers = [number(m) for _, m in got]
    acked = [i for i in numbers if i % 2 == 0]
    assert not acked, "%d acked messages redelivered, e.g. %r" % (len(acked), acked[:5])
    assert len(set(numbers)) == len(numbers), "duplicates after restart"
    assert set(numbers) == want, "missing %r" % sorted(want - set(numbers))[:5]
    assert_nothing_more(consumers)
    c.close()
    b.stop()


def cumulative(tmp, kind):
    b = Broker(tmp)
    c = client(b)
    topic = "cumulative-%s" % kind
    produce(c, topic, 100, batch=10)
    sub_type = pulsar.ConsumerType.Exclusive if kind == "exclusive" else pulsar.ConsumerType.Failover
    count = 1 if kind == "exclusive" else 2
    consumers = [c.subscribe(topic, "sub", consumer_type=sub_type, consumer_name="c%d" % k,
                             initial_position=pulsar.InitialPosition.Earliest)
                 for k in range(count)]
    if kind == "exclusive":
        try:
            c.subscribe(topic, "sub", consumer_type=sub_type)
            raise AssertionError("a second consumer joined an exclusive subscription")
        except pulsar.ConsumerBusy:
            pass
    got = receive_until(consumers, lambda g: len(g) >= 60)
    active = {id(cons) for cons, _ in got}
    assert len(active) == 1, "messages reached %d consumers" % len(active)
    active = got[0][0]
    assert [number(m) for _, m in got] == list(range(60)), "out of order"
    active.acknowledge_cumulative(got[59][1])
    active.close()
    if kind == "failover":
        # The other consumer takes over and receives from the first unacknowledged message.
        other = [x for x in consumers if x is not active]
        got = receive_until(other, lambda g: len(g) >= 40)
        assert [number(m) for _, m in got] == list(range(60, 100)), \
            "takeover delivered %r" % [number(m) for _, m in got][:5]
        other[0].close()
    b.flush()
    c.close()
    b.restart_after_kill()
    c = client(b)
    cons = c.subscribe(topic, "sub", consumer_type=sub_type)
    got = receive_until([cons], lambda g: len(g) >= 40)
    assert [number(m) for _, m in got] == list(range(60, 100)), \
        "after restart %r" % [number(m) for _, m in got][:5]
    assert_nothing_more([cons])
    c.close()
    b.stop()


def flow_cumulative_ack_exclusive(tmp):
    """Exclusive: a cumulative ack of message 59 of 100 (batches of 10) survives a SIGKILL;
    a second consumer is refused."""
    cumulative(tmp, "exclusive")


def flow_cumulative_ack_failover(tmp):
    """Failover: one active consumer, a cumulative ack, the other consumer takes over from
    the first unacknowledged message; the ack survives a SIGKILL."""
    cumulative(tmp, "failover")


def flow_seek_by_id_and_time(tmp):
    """Seek by message id (the broker resets the cursor to that entry; the C++ client then
    delivers from it, or from the one after when it treats the sought id as its exclusive
    start, which depends on whether its consumer's reconnection raced the answer) and by
    publish time (the next message is the first published at or after it), on a durable
    subscription, also across a SIGKILL."""
    b = Broker(tmp)
    c = client(b)
    topic = "seek"
    # Sent one at a time (each waits for its receipt, an fsync), so publish times advance.
    p = c.create_producer(topic, batching_enabled=False)
    ids = [p.send(str(i).encode()) for i in range(100)]
    p.close()
    cons = c.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    got = receive_until([cons], lambda g: len(g) >= 100)
    times = [m.publish_timestamp() for _, m in got]
    for _, m in got:
        cons.acknowledge(m)
    cons.seek(ids[20])
    got = receive_until([cons], lambda g: len(g) >= 3)
    first = number(got[0][1])
    assert first in (20, 21), "seek by id delivered %d" % first
    assert [number(m) for _, m in got] == list(range(first, first + 3)), "after seek by id"
    k = next(k for k in range(50, 100) if times[k] > times[k - 1])
    cons.seek(times[k])
    got = receive_until([cons], lambda g: len(g) >= 1)
    assert number(got[0][1]) == k, "seek by time %d delivered %d, want %d" % (
        times[k], number(got[0][1]), k)
    cons.close()
    c.close()
    b.restart_after_kill()
    c = client(b)
    cons = c.subscribe(topic, "sub")
    got = receive_until([cons], lambda g: len(g) >= 100 - k)
    assert [number(m) for _, m in got] == list(range(k, 100)), "after restart"
    c.close()
    b.stop()


def flow_readers_inclusive_and_exclusive(tmp):
    """Readers start after their start id, or at it with start_message_id_inclusive, on plain
    and batched messages; has_message_available turns false at the end."""
    b = Broker(tmp)
    c = client(b)
    plain = produce(c, "readers-plain", 10)
    batched = produce(c, "readers-batched", 10, batch=5)
    for topic, ids in (("readers-plain", plain), ("readers-batched", batched)):
        for inclusive in (False, True):
            r = c.create_reader(topic, ids[3], start_message_id_inclusive=inclusive)
            first = 3 if inclusive else 4
            seen = []
            while r.has_message_available():
                seen.append(number(r.read_next(timeout_millis=10000)))
            assert seen == list(range(first, 10)), "%s inclusive=%s read %r" % (
                topic, inclusive, seen)
            r.close()
        r = c.create_reader(topic, pulsar.MessageId.earliest)
        assert number(r.read_next(timeout_millis=10000)) == 0
        r.close()
    empty = c.create_reader("readers-empty", pulsar.MessageId.earliest)
    assert not empty.has_message_available(), "an empty topic has a message available"
    empty.close()
    c.close()
    b.stop()


def flow_many_topics_and_subscriptions(tmp):
    """20 topics with 3 subscriptions each, all consumed and acked at once; after a SIGKILL
    nothing acked comes back and an unsubscribed subscription starts again from its initial
    position."""
    b = Broker(tmp)
    c = client(b)
    topics = ["many-%d" % t for t in range(20)]
    consumers = {}
    for t in topics:
        for s in range(3):
            consumers[(t, s)] = c.subscribe(t, "sub-%d" % s, consumer_type=pulsar.ConsumerType.Shared,
                                            initial_position=pulsar.InitialPosition.Earliest)
    for t in topics:
        produce(c, t, 30, batch=10)
    for key, cons in consumers.items():
        got = receive_until([cons], lambda g: len(g) >= 30)
        assert sorted(number(m) for _, m in got) == list(range(30)), "%r" % (key,)
        for _, m in got:
            cons.acknowledge(m)
    for key, cons in consumers.items():
        if key[1] == 2:
            cons.unsubscribe()
        else:
            cons.close()
    b.flush()
    c.close()
    b.restart_after_kill()
    c = client(b)
    for t in topics:
        produce(c, t, 5, start=30)
    # One subscription at a time: the C++ client (3.7) has crashed in `subscribe` while other
    # consumers of its connection were being dispatched to.
    for t in topics:
        for s in range(3):
            cons = c.subscribe(t, "sub-%d" % s, consumer_type=pulsar.ConsumerType.Shared,
                               initial_position=pulsar.InitialPosition.Earliest)
            want = 5 if s < 2 else 35
            got = receive_until([cons], lambda g: len(g) >= want)
            first = 30 if s < 2 else 0
            assert sorted(number(m) for _, m in got) == list(range(first, 35)), (t, s)
            cons.close()
    c.close()
    b.stop()


def flow_receipts_survive_sigkill(tmp):
    """A producer sending while the broker is SIGKILLed: every message whose receipt arrived
    is there after the restart."""
    b = Broker(tmp)
    c = pulsar.Client(b.url, operation_timeout_seconds=5,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    topic = "receipts"
    p = c.create_producer(topic, batching_enabled=True, batching_max_messages=50,
                          batching_max_publish_delay_ms=1, send_timeout_millis=3000,
                          max_pending_messages=20000, block_if_queue_full=True)
    lock = threading.Lock()
    receipts = set()
    enough = threading.Event()

    def sent(res, _mid, i):
        if res == pulsar.Result.Ok:
            with lock:
                receipts.add(i)
                if len(receipts) >= 3000:
                    enough.set()

    for i in range(20000):
        p.send_async(str(i).encode(), lambda res, mid, i=i: sent(res, mid, i))
        if enough.is_set():
            break
    assert enough.wait(timeout=60), "receipts stopped at %d" % len(receipts)
    b.kill()
    with lock:
        confirmed = set(receipts)
    c.close()
    b.start()
    c = client(b)
    r = c.create_reader(topic, pulsar.MessageId.earliest)
    stored = set()
    while r.has_message_available():
        stored.add(number(r.read_next(timeout_millis=10000)))
    lost = confirmed - stored
    assert not lost, "%d confirmed messages lost, e.g. %r" % (len(lost), sorted(lost)[:5])
    c.close()
    b.stop()


def flow_largest_message_and_chunks(tmp):
    """The largest message the client lets through under the size the broker announces
    (5 MiB, metadata included: the client refuses one byte more itself), and a chunked message
    of 12 MiB, each sent once and received intact; the acks survive a SIGKILL."""
    b = Broker(tmp)
    c = client(b)
    p = c.create_producer("largest", batching_enabled=False)
    pattern = bytes(range(256)) * (5 * 1024 * 1024 // 256)
    size = len(pattern)
    while send_and_wait(p, pattern[:size]) == pulsar.Result.MessageTooBig:
        size -= 1
    largest = pattern[:size]
    p.close()
    chunked = bytes(reversed(range(256))) * (12 * 1024 * 1024 // 256)
    p = c.create_producer("chunked", batching_enabled=False, chunking_enabled=True)
    assert send_and_wait(p, chunked) == pulsar.Result.Ok
    p.close()
    for topic, want in (("largest", largest), ("chunked", chunked)):
        cons = c.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        m = cons.receive(timeout_millis=10000)
        assert m.data() == want, "%s: %d bytes came back, want %d" % (
            topic, len(m.data()), len(want))
        cons.acknowledge(m)
        assert_nothing_more([cons])
        cons.close()
    b.flush()
    c.close()
    b.restart_after_kill()
    c = client(b)
    assert_nothing_more([c.subscribe(t, "sub") for t in ("largest", "chunked")])
    c.close()
    b.stop()


def flow_reader_seek_by_time(tmp):
    """A reader that read to the end seeks by publish time: it reads on from the first message
    published at or after it (the broker keeps where the seek left the reader's cursor for the
    reader's next SUBSCRIBE, which names no start), then by id, then by the first message's
    time (no entry before the cursor: the client, which asks whether a message is available
    after a seek by time by comparing the mark-delete position with the last message, is
    answered the position before the first entry)."""
    b = Broker(tmp)
    c = client(b)
    p = c.create_producer("reader-seek", batching_enabled=False)
    ids = [p.send(str(i).encode()) for i in range(30)]
    p.close()
    r = c.create_reader("reader-seek", pulsar.MessageId.earliest)
    times = [r.read_next(timeout_millis=10000).publish_timestamp() for _ in range(30)]
    assert not r.has_message_available()
    k = next(k for k in range(10, 30) if times[k] > times[k - 1])
    r.seek(times[k])
    seen = []
    while r.has_message_available():
        seen.append(number(r.read_next(timeout_millis=10000)))
    assert seen == list(range(k, 30)), "after a seek to %d's time, read %r" % (k, seen[:5])
    r.seek(ids[5])
    seen = []
    while r.has_message_available():
        seen.append(number(r.read_next(timeout_millis=10000)))
    assert seen == list(range(6, 30)), "after a seek to 5's id, read %r" % seen[:5]
    r.seek(times[0])
    seen = []
    while r.has_message_available():
        seen.append(number(r.read_next(timeout_millis=10000)))
    assert seen == list(range(30)), "after a seek to 0's time, read %r" % seen[:5]
    c.close()
    b.stop()


def flow_refused_subscriptions_fail_at_once(tmp):
    """What the broker does not serve fails at once with a clear error, never the client's
    retries until its operation timeout: another kind on a subscription with consumers
    (ConsumerBusy, as from Pulsar), Key_Shared beside them too, and Key_Shared in STICKY mode
    (NotAllowed). The subscription's consumer goes on receiving, and once it left the
    subscription takes the other kind."""
    b = Broker(tmp)
    c = pulsar.Client(b.url, operation_timeout_seconds=5,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    shared = c.subscribe("refusals", "sub", consumer_type=pulsar.ConsumerType.Shared)
    refusals = [
        (pulsar.ConsumerBusy, lambda: c.subscribe(
            "refusals", "sub", consumer_type=pulsar.ConsumerType.Exclusive)),
        (pulsar.ConsumerBusy, lambda: c.subscribe(
            "refusals", "sub", consumer_type=pulsar.ConsumerType.Failover)),
        (pulsar.ConsumerBusy, lambda: c.subscribe(
            "refusals", "sub", consumer_type=pulsar.ConsumerType.KeyShared)),
        (pulsar.NotAllowedError, lambda: c.subscribe(
            "refusals", "sticky", consumer_type=pulsar.ConsumerType.KeyShared,
            key_shared_policy=pulsar.ConsumerKeySharedPolicy(
                key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 65535)]))),
    ]
    for want, subscribe in refusals:
        try:
            subscribe()
            raise AssertionError("subscribed; want %s" % want.__name__)
        except want:
            pass
    produce(c, "refusals", 3)
    got = receive_until([shared], lambda g: len(g) >= 3)
    assert [number(m) for _, m in got] == [0, 1, 2]
    shared.close()
    exclusive = c.subscribe("refusals", "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    got = receive_until([exclusive], lambda g: len(g) >= 3)
    assert [number(m) for _, m in got] == [0, 1, 2], "after the change of kind"
    c.close()
    b.stop()


def produce_keyed(c, topic, n, keys, batch=None):
    """Sends n messages whose payloads are their numbers, message i with partition key
    "k<i % keys>" (batched by key when `batch`), and waits for every receipt."""
    if batch:
        p = c.create_producer(topic, batching_enabled=True, batching_max_messages=batch,
                              batching_max_publish_delay_ms=60000,
                              batching_type=pulsar.BatchingType.KeyBased,
                              block_if_queue_full=True, max_pending_messages=20000)
    else:
        p = c.create_producer(topic, batching_enabled=False)
    errors = []
    done = threading.Semaphore(0)

    def sent(res, _mid, i):
        if res != pulsar.Result.Ok:
            errors.append((i, res))
        done.release()

    for i in range(n):
        p.send_async(str(i).encode(), lambda res, mid, i=i: sent(res, mid, i),
                     partition_key="k%d" % (i % keys))
    p.flush()
    for _ in range(n):
        assert done.acquire(timeout=60), "a receipt never came"
    assert not errors, "send errors: %r" % errors[:5]
    p.close()


def key_shared(c, topic, name, **kw):
    return c.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared,
                       initial_position=pulsar.InitialPosition.Earliest, consumer_name=name, **kw)


def owners(consumers, pairs, keys):
    """The consumer index each key went to; fails when a key went to two consumers."""
    owner = {}
    for cons, m in pairs:
        k, who = number(m) % keys, consumers.index(cons)
        assert owner.setdefault(k, who) == who, \
            "key k%d went to consumers %d and %d" % (k, owner[k], who)
    return owner


def assert_increasing_per_key(numbers, keys, what):
    last = {}
    for i in numbers:
        assert last.get(i % keys, -1) < i, \
            "%s: key k%d: %d after %d" % (what, i % keys, i, last[i % keys])
        last[i % keys] = i


def flow_key_shared_affinity_and_order_with_a_consumer_leaving(tmp):
    """3 Key_Shared consumers (small receive queues) on 3,000 messages of 30 keys, batched by
    key: each key goes to one consumer, in order. The third consumer leaves mid-stream holding
    messages it did not acknowledge: its keys go to the other two (theirs stay where they
    were), which receive its unacknowledged messages before the later ones of those keys;
    every message is acknowledged once, and only those it left come twice (each consumer
    receives every key of its own in order)."""
    b = Broker(tmp)
    c = client(b)
    topic, n, keys = "key-shared", 3000, 30
    consumers = [key_shared(c, topic, "c%d" % k, receiver_queue_size=10) for k in range(3)]
    produce_keyed(c, topic, n, keys, batch=10)
    acked, left = [], set()

    def first_phase(pairs):
        return sum(1 for cons, _ in pairs if cons is consumers[2]) >= 200
    before = receive_until(consumers, first_phase)
    for cons, m in before:
        if cons is consumers[2] and number(m) % 7 == 0:
            left.add(number(m))
        else:
            cons.acknowledge(m)
            acked.append(number(m))
    owner = owners(consumers, before, keys)
    assert sorted(set(owner.values())) == [0, 1, 2], "owners %r" % owner
    assert left, "the leaving consumer acknowledged everything"
    consumers[2].close()
    rest = consumers[:2]

    def second_phase(pairs):
        for cons, m in pairs[second_phase.done:]:
            cons.acknowledge(m)
            acked.append(number(m))
        second_phase.done = len(pairs)
        return len(set(acked)) == n
    second_phase.done = 0
    after = receive_until(rest, second_phase)
    moved = owners(rest, after, keys)
    for k, who in owner.items():
        if who < 2 and k in moved:
            assert moved[k] == who, "key k%d moved from %d to %d" % (k, who, moved[k])
    # What the leaving consumer left comes again first, then what no consumer had of its keys.
    assert_increasing_per_key([number(m) for _, m in before]
                              + [number(m) for _, m in after if number(m) not in left],
                              keys, "across the close")
    for who in range(2):
        assert_increasing_per_key([number(m) for cons, m in before + after
                                   if cons is consumers[who]], keys, "consumer %d" % who)
    twice = set(i for i in acked if acked.count(i) > 1)
    assert not twice, "acknowledged twice: %r" % sorted(twice)[:5]
    again = set(number(m) for _, m in after) & set(number(m) for _, m in before)
    assert again == left, "delivered again %r; left %r" % (sorted(again)[:5], sorted(left)[:5])
    assert_nothing_more(rest)
    c.close()
    b.stop()


def flow_key_shared_acks_survive_sigkill(tmp):
    """3 Key_Shared consumers with batch-index acks on 2,000 messages of 20 keys batched by
    key acknowledge every message but each third. After the acks are flushed and the broker is
    SIGKILLed and restarted, 3 consumers subscribing in the same order receive exactly the
    unacknowledged messages, each consumer its keys in order. Until the last has joined, a
    consumer owns a wider range than it will (the first every key, the second half the hashes, as
    the ranges follow the order of joining), and what it receives meanwhile depends on when the
    others' subscriptions land; the last to join receives only its own keys (those it had before
    the kill). Once all are acknowledged, new messages of each key go to the consumer that had it
    before the kill."""
    b = Broker(tmp)
    c = client(b)
    topic, n, keys = "key-shared-kill", 2000, 20
    consumers = [key_shared(c, topic, "c%d" % k, batch_index_ack_enabled=True)
                 for k in range(3)]
    produce_keyed(c, topic, n, keys, batch=10)

    def handle(pairs):
        for cons, m in pairs[handle.done:]:
            if number(m) % 3 != 0:
                cons.acknowledge(m)
        handle.done = len(pairs)
        return len(pairs) >= n
    handle.done = 0
    got = receive_until(consumers, handle)
    assert sorted(number(m) for _, m in got) == list(range(n)), "first delivery"
    owner = owners(consumers, got, keys)
    for who in range(3):
        assert_increasing_per_key([number(m) for cons, m in got if cons is consumers[who]],
                                  keys, "consumer %d" % who)
    c = killed_and_restarted(b, c, consumers)
    consumers = [key_shared(c, topic, "d%d" % k, batch_index_ack_enabled=True)
                 for k in range(3)]
    want = [i for i in range(n) if i % 3 == 0]

    def ack_all(pairs):
        for cons, m in pairs[ack_all.done:]:
            cons.acknowledge(m)
        ack_all.done = len(pairs)
        return len(pairs) >= ack_all.want
    ack_all.done, ack_all.want = 0, len(want)
    got = receive_until(consumers, ack_all)
    assert sorted(number(m) for _, m in got) == want, "after the restart"
    for who in range(3):
        mine = [number(m) for cons, m in got if cons is consumers[who]]
        assert_increasing_per_key(mine, keys, "consumer %d after the restart" % who)
        stray = [i for i in mine if who == 2 and owner[i % keys] != who]
        assert not stray, "consumer %d received keys of others: %r" % (who, stray[:5])
    assert_nothing_more(consumers)
    for cons in consumers:
        cons.close()
    b.flush()
    consumers = [key_shared(c, topic, "e%d" % k) for k in range(3)]
    produce_keyed(c, topic, 300, keys)
    ack_all.done, ack_all.want = 0, 300
    got = receive_until(consumers, ack_all)
    assert sorted(number(m) for _, m in got) == list(range(300)), "new messages"
    assert owners(consumers, got, keys) == owner, "new messages' keys moved"
    for who in range(3):
        assert_increasing_per_key([number(m) for cons, m in got if cons is consumers[who]],
                                  keys, "consumer %d, new messages" % who)
    assert_nothing_more(consumers)
    c.close()
    b.stop()


def joining(tmp, out_of_order):
    """Consumer A holds 100 messages of 10 keys unacknowledged when B joins, then 100 more
    messages come; returns (A, B, the client, the broker, A's new messages received)."""
    b = Broker(tmp)
    c = client(b)
    topic, keys = "key-shared-join", 10
    policy = pulsar.ConsumerKeySharedPolicy(allow_out_of_order_delivery=out_of_order)
    a = key_shared(c, topic, "a", key_shared_policy=policy)
    produce_keyed(c, topic, 100, keys)
    held = receive_until([a], lambda g: len(g) >= 100)
    joined = key_shared(c, topic, "b", key_shared_policy=policy)
    p = c.create_producer(topic, batching_enabled=False)
    for i in range(100, 200):
        p.send(str(i).encode(), partition_key="k%d" % (i % keys))
    p.close()
    return a, joined, c, b, held


def flow_key_shared_joining_consumer_waits_for_earlier_acks(tmp):
    """In order (the default): a consumer joining while another holds messages of the keys it
    takes over unacknowledged receives nothing newer until they are acknowledged; then each
    key's new messages go to one consumer, in order, after the old ones."""
    a, joined, c, b, held = joining(tmp, out_of_order=False)
    assert_nothing_more([joined])
    for _, m in held:
        a.acknowledge(m)
    got = receive_until([a, joined], lambda g: len(g) >= 100)
    assert sorted(number(m) for _, m in got) == list(range(100, 200))
    owner = owners([a, joined], got, 10)
    assert sorted(set(owner.values())) == [0, 1], "owners %r" % owner
    for cons in (a, joined):
        assert_increasing_per_key([number(m) for x, m in got if x is cons], 10, "new messages")
    assert_nothing_more([a, joined])
    c.close()
    b.stop()


def flow_key_shared_out_of_order_delivery_does_not_wait(tmp):
    """With allow_out_of_order_delivery, the consumer joining receives its keys' new messages
    while the other still holds older ones of those keys unacknowledged."""
    a, joined, c, b, _ = joining(tmp, out_of_order=True)
    got = receive_until([joined], lambda g: len(g) >= 1)
    assert number(got[0][1]) >= 100, "an old message %d" % number(got[0][1])
    c.close()
    b.stop()


def flow_clean_restart_with_clients_connected(tmp):
    """A clean stop (SIGTERM) and a start on the same port while a producer, an Exclusive
    consumer holding unacknowledged messages and a reader are connected: each reconnects by
    itself; the consumer receives every unacknowledged message and no acknowledged one, the
    producer's sends after the restart are stored, the reader reads on without gap or repeat."""
    b = Broker(tmp)
    c = client(b)
    topic = "clean-restart"
    produce(c, topic, 100, batch=10)
    cons = c.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest,
                       batch_index_ack_enabled=True)
    got = receive_until([cons], lambda g: len(g) >= 50)
    for _, m in got:
        if number(m) % 2 == 0:
            cons.acknowledge(m)
    # The close answers after the acks are in the cursor; the consumer subscribes again and
    # holds messages unacknowledged across the restart.
    cons.close()
    cons = c.subscribe(topic, "sub", batch_index_ack_enabled=True)
    receive_until([cons], lambda g: len(g) >= 1)
    p = c.create_producer(topic, batching_enabled=False)
    reader = c.create_reader(topic, pulsar.MessageId.earliest)
    read = [number(reader.read_next(timeout_millis=10000)) for _ in range(33)]
    b.restart_on_same_port()
    for i in range(100, 110):
        p.send(str(i).encode())
    want = set(i for i in range(110) if i >= 50 or i % 2 == 1)
    got = receive_until([cons], lambda g: want <= set(number(m) for _, m in g))
    back = sorted(set(number(m) for _, m in got) - want)
    assert not back, "acknowledged messages came back: %r" % back[:5]
    while len(read) < 110:
        read.append(number(reader.read_next(timeout_millis=10000)))
    assert read == list(range(110)), "the reader read %r" % read[30:40]
    assert not reader.has_message_available()
    c.close()
    b.stop()


def flow_initial_positions_and_unsubscribe(tmp):
    """New subscriptions on a topic with a backlog: Latest receives only what is sent after it,
    Earliest everything; after an unsubscribe the same name starts over at its new initial
    position, and a consumer of a list of topics acknowledges on each of them."""
    b = Broker(tmp)
    c = client(b)
    produce(c, "positions-a", 10)
    produce(c, "positions-b", 10, start=11)
    latest = c.subscribe("positions-a", "latest", initial_position=pulsar.InitialPosition.Latest)
    earliest = c.subscribe("positions-a", "earliest",
                           initial_position=pulsar.InitialPosition.Earliest)
    produce(c, "positions-a", 1, start=10)
    got = receive_until([latest], lambda g: len(g) >= 1)
    assert [number(m) for _, m in got] == [10], "Latest received %r" % number(got[0][1])
    assert_nothing_more([latest], wait_ms=200)
    got = receive_until([earliest], lambda g: len(g) >= 11)
    assert [number(m) for _, m in got] == list(range(11)), "Earliest"
    for _, m in got:
        earliest.acknowledge(m)
    earliest.unsubscribe()
    latest.unsubscribe()
    again = c.subscribe("positions-a", "earliest", initial_position=pulsar.InitialPosition.Earliest)
    got = receive_until([again], lambda g: len(g) >= 11)
    assert [number(m) for _, m in got] == list(range(11)), "Earliest after unsubscribe"
    again.close()
    again = c.subscribe("positions-a", "latest", initial_position=pulsar.InitialPosition.Latest)
    assert_nothing_more([again], wait_ms=200)
    again.close()
    both = c.subscribe(["positions-a", "positions-b"], "list",
                       initial_position=pulsar.InitialPosition.Earliest)
    got = receive_until([both], lambda g: len(g) >= 21)
    assert sorted(number(m) for _, m in got) == list(range(21)), "list of topics"
    for _, m in got:
        if number(m) % 2 == 0:
            both.acknowledge(m)
    c = killed_and_restarted(b, c, [both])
    both = c.subscribe(["positions-a", "positions-b"], "list")
    got = receive_until([both], lambda g: len(g) >= 10)
    assert sorted(number(m) for _, m in got) == list(range(1, 21, 2)), "list after restart"
    assert_nothing_more([both])
    c.close()
    b.stop()


def flow_message_fields_come_back_intact(tmp):
    """What a producer sets comes back as it was sent, compressed (LZ4, ZSTD) or not, batched or
    not: payload, properties, key, event time, and the sequence id the user gave."""
    b = Broker(tmp)
    c = client(b)
    for comp in (pulsar.CompressionType.NONE, pulsar.CompressionType.LZ4,
                 pulsar.CompressionType.ZSTD):
        for batching in (False, True):
            topic = "fields-%s-%s" % (comp, batching)
            p = c.create_producer(topic, compression_type=comp, batching_enabled=batching,
                                  batching_max_publish_delay_ms=60000)
            sent = []
            for i in range(5):
                fields = (("%d" % i).encode() * 200, {"k": "v%d" % i, "\u00e9": ""},
                          "key-%d" % i, 1000 + i)
                sent.append(fields)
                p.send_async(fields[0], None, properties=fields[1], partition_key=fields[2],
                             event_timestamp=fields[3], sequence_id=500 + i)
            p.flush()
            p.close()
            cons = c.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
            for want in sent:
                m = cons.receive(timeout_millis=10000)
                back = (m.data(), m.properties(), m.partition_key(), m.event_timestamp())
                assert back == want, "%s: %r came back as %r" % (topic, want[1:], back[1:])
            cons.close()
    c.close()
    b.stop()


def flow_dead_letter_after_max_redeliveries(tmp):
    """A Shared consumer with a dead-letter policy (at most 2 redeliveries) nacks one message
    every time and acknowledges the others: the broker counts its redeliveries (0, 1, 2), so the
    client sends it to the dead-letter topic after the third delivery, where it is read back;
    nothing else is redelivered."""
    b = Broker(tmp)
    c = client(b)
    topic = "poison"
    # Unbatched: a batch is redelivered whole, and the client would send the whole batch on.
    produce(c, topic, 10)
    cons = c.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                       initial_position=pulsar.InitialPosition.Earliest,
                       negative_ack_redelivery_delay_ms=10,
                       dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
                           max_redeliver_count=2, dead_letter_topic="poison-dlq"))
    counts = []
    received = set()
    while len(received) < 10 or len(counts) < 3:
        m = cons.receive(timeout_millis=10000)
        received.add(number(m))
        if number(m) == 7:
            counts.append(m.redelivery_count())
            assert len(counts) <= 3, "message 7 delivered again, counts %r" % counts
            cons.negative_acknowledge(m)
        else:
            cons.acknowledge(m)
    assert counts == [0, 1, 2], "redelivery counts %r" % counts
    dlq = c.subscribe("poison-dlq", "sub", initial_position=pulsar.InitialPosition.Earliest)
    m = dlq.receive(timeout_millis=10000)
    assert number(m) == 7, "the dead-letter topic holds %r" % m.data()
    assert_nothing_more([cons, dlq])
    c.close()
    b.stop()


def flow_redelivery_counts_across_close_seek_and_sigkill(tmp):
    """A Shared subscription's redelivery counts as documented: each nack and each redelivery
    request raises the count of what it gives back; a consumer's close gives its messages to the
    next consumer with their counts unchanged; a seek and a SIGKILL start every count again at
    0."""
    b = Broker(tmp)
    c = client(b)
    produce(c, "counts", 3)

    def subscribe():
        return c.subscribe("counts", "sub", consumer_type=pulsar.ConsumerType.Shared,
                           initial_position=pulsar.InitialPosition.Earliest,
                           negative_ack_redelivery_delay_ms=10)

    def receive_all(cons, n=3):
        msgs = [cons.receive(timeout_millis=10000) for _ in range(n)]
        return msgs, sorted((number(m), m.redelivery_count()) for m in msgs)

    cons = subscribe()
    msgs, _ = receive_all(cons)
    for m in msgs:
        cons.negative_acknowledge(m)
    _, counts = receive_all(cons)
    assert counts == [(0, 1), (1, 1), (2, 1)], "after a nack of each: %r" % counts
    cons.close()
    cons = subscribe()
    _, counts = receive_all(cons)
    assert counts == [(0, 1), (1, 1), (2, 1)], "after the close: %r" % counts
    cons.redeliver_unacknowledged_messages()
    _, counts = receive_all(cons)
    assert counts == [(0, 2), (1, 2), (2, 2)], "after a redelivery request: %r" % counts
    cons.seek(pulsar.MessageId.earliest)
    msgs, counts = receive_all(cons)
    assert counts == [(0, 0), (1, 0), (2, 0)], "after a seek: %r" % counts
    for m in msgs:
        if number(m) == 0:
            cons.negative_acknowledge(m)
        else:
            cons.acknowledge(m)
    _, counts = receive_all(cons, 1)
    assert counts == [(0, 1)], "after a nack of 0: %r" % counts
    c = killed_and_restarted(b, c, [cons])
    cons = subscribe()
    _, counts = receive_all(cons, 1)
    assert counts == [(0, 0)], "after the restart: %r" % counts
    assert_nothing_more([cons])
    c.close()
    b.stop()


def flow_regex_subscription(tmp):
    """A regex subscription covers the namespace's topics that match (persistent ones; another
    namespace's and a non-matching name's are left out); its acks, on each topic, survive a
    SIGKILL."""
    b = Broker(tmp)
    c = client(b)
    for k, topic in enumerate(["regex-a", "regex-b", "other",
                               "persistent://public/other-ns/regex-c",
                               "non-persistent://public/default/regex-d"]):
        produce(c, topic, 2, start=2 * k)
    pattern = re.compile("persistent://public/default/regex-.*")
    cons = c.subscribe(pattern, "sub", initial_position=pulsar.InitialPosition.Earliest)
    got = receive_until([cons], lambda g: len(g) >= 4)
    assert sorted(number(m) for _, m in got) == [0, 1, 2, 3], \
        "the pattern matched %r" % sorted(m.topic_name() for _, m in got)
    assert_nothing_more([cons])
    for _, m in got:
        if number(m) % 2 == 0:
            cons.acknowledge(m)
    c = killed_and_restarted(b, c, [cons])
    cons = c.subscribe(pattern, "sub")
    got = receive_until([cons], lambda g: len(g) >= 2)
    assert sorted(number(m) for _, m in got) == [1, 3], "after the restart"
    assert_nothing_more([cons])
    c.close()
    b.stop()


FLOWS = [f for name, f in sorted(globals().items()) if name.startswith("flow_")]


def run_one(f):
    """Runs flow `f` in this process; returns 0 when it passed."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ackstore-broker-") as tmp:
        try:
            f(os.path.join(tmp, "store"))
            print("PASS %s (%.1f s)" % (f.__name__[5:], time.monotonic() - started), flush=True)
            return 0
        except Exception:
            print("FAIL %s: %s" % (f.__name__[5:], traceback.format_exc()), flush=True)
            return 1
        finally:
            for proc in RUNNING:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            RUNNING.clear()


def main(argv):
    """`client_flows.py BINARY [FLOW...]` runs each flow (all by default) in a process of its
    own, so no client library state outlives a flow; `--one` runs one flow in this process.

    A flow's process that dies by a signal crashed inside the client library (the broker runs
    in processes of its own, and a wrong answer fails an assertion instead): it is reported and
    the flow runs once more, and a second crash fails it."""
    global BINARY
    BINARY = argv[1]
    if len(argv) == 4 and argv[2] == "--one":
        return run_one(next(f for f in FLOWS if f.__name__[5:] == argv[3]))
    chosen = [f for f in FLOWS if len(argv) < 3 or f.__name__[5:] in argv[2:]]
    passed = failed = 0
    for f in chosen:
        name = f.__name__[5:]
        for attempt in (1, 2):
            code = subprocess.call([sys.executable, os.path.abspath(__file__), BINARY, "--one", name])
            if code >= 0 or attempt == 2:
                break
            print("CRASH %s: the client's process died by signal %d; the flow runs once more"
                  % (name, -code), flush=True)
        if code == 0:
            passed += 1
        else:
            failed += 1
            if code < 0:
                print("FAIL %s: the client's process died by signal %d twice" % (name, -code),
                      flush=True)
    print("%d passed, %d failed" % (passed, failed), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    # The client library's threads can hang the interpreter's teardown: leave without it.
    os._exit(code)
