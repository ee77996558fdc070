//! The broker binary driven by a Rust Pulsar client (the `pulsar` crate): produce, consume,
//! individual and cumulative acks across a SIGKILL, a reader, and a bad frame that closes only
//! its own connection.
//!
//! Synchronisation is on events: the broker prints `listening on ADDR` once it serves and
//! `flushed N cursors` once a SIGUSR1-requested flush tick is durable; a consumer's close is
//! answered only after the acks sent before it are applied.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use futures::TryStreamExt;
use pulsar::consumer::InitialPosition;
use pulsar::message::Payload;
use pulsar::proto::{self, BaseCommand, MessageIdData, base_command::Type};
use pulsar::{Consumer, ConsumerOptions, Pulsar, SubType, TokioExecutor};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The broker binary on one directory.
struct Broker {
    child: Child,
    out: BufReader<ChildStdout>,
    addr: String,
}

impl Broker {
    fn start(dir: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ackstore-broker"))
            .arg("--data-dir")
            .arg(dir)
            .args(["--listen", "127.0.0.1:0", "--flush-interval-ms", "100"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("broker starts");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("broker output");
        let addr = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected broker output {line:?}"))
            .trim()
            .to_owned();
        Self { child, out, addr }
    }

    fn url(&self) -> String {
        format!("pulsar://{}", self.addr)
    }

    /// Asks for a flush tick and waits until the broker reports it durable.
    fn flush(&mut self) {
        let status = Command::new("kill")
            .args(["-USR1", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let mut line = String::new();
        self.out.read_line(&mut line).expect("broker output");
        assert!(
            line.starts_with("flushed "),
            "unexpected broker output {line:?}"
        );
    }

    fn sigkill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("broker reaped");
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn client(broker: &Broker) -> Pulsar<TokioExecutor> {
    Pulsar::builder(broker.url(), TokioExecutor)
        .build()
        .await
        .expect("client connects")
}

async fn produce(pulsar: &Pulsar<TokioExecutor>, topic: &str, range: std::ops::Range<u32>) {
    let mut producer = pulsar
        .producer()
        .with_topic(topic)
        .build()
        .await
        .expect("producer");
    for i in range {
        producer
            .send_non_blocking(i.to_string())
            .await
            .expect("send")
            .await
            .expect("receipt");
    }
    producer.close().await.expect("producer close");
}

async fn consumer(
    pulsar: &Pulsar<TokioExecutor>,
    topic: &str,
    sub: &str,
    kind: SubType,
) -> Consumer<String, TokioExecutor> {
    pulsar
        .consumer()
        .with_topic(topic)
        .with_subscription(sub)
        .with_subscription_type(kind)
        .with_options(ConsumerOptions::default().with_initial_position(InitialPosition::Earliest))
        .build()
        .await
        .expect("consumer")
}

/// Receives `n` messages (failing after 20 s without one).
async fn receive(
    consumer: &mut Consumer<String, TokioExecutor>,
    n: usize,
) -> Vec<pulsar::consumer::Message<String>> {
    let mut got = Vec::new();
    while got.len() < n {
        let msg = tokio::time::timeout(Duration::from_secs(20), consumer.try_next())
            .await
            .unwrap_or_else(|_| panic!("no message after {} received", got.len()))
            .expect("receive")
            .expect("stream open");
        got.push(msg);
    }
    got
}

fn number(msg: &pulsar::consumer::Message<String>) -> u32 {
    msg.deserialize().expect("utf-8").parse().expect("a number")
}

#[tokio::test(flavor = "multi_thread")]
async fn individual_acks_survive_sigkill_and_only_unacked_messages_return() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broker = Broker::start(dir.path());
    let pulsar = client(&broker).await;
    produce(&pulsar, "acks", 0..200).await;
    let mut c = consumer(&pulsar, "acks", "sub", SubType::Shared).await;
    for msg in receive(&mut c, 200).await {
        if !number(&msg).is_multiple_of(3) {
            c.ack(&msg).await.expect("ack");
        }
    }
    c.close().await.expect("close");
    broker.flush();
    drop(pulsar);
    broker.sigkill();

    let broker = Broker::start(dir.path());
    let pulsar = client(&broker).await;
    let mut c = consumer(&pulsar, "acks", "sub", SubType::Shared).await;
    let want: BTreeSet<u32> = (0..200u32).filter(|i| i.is_multiple_of(3)).collect();
    let got: Vec<u32> = receive(&mut c, want.len())
        .await
        .iter()
        .map(number)
        .collect();
    let unique: BTreeSet<u32> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len(), "duplicates: {got:?}");
    assert_eq!(unique, want);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cumulative_ack_on_exclusive_survives_sigkill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broker = Broker::start(dir.path());
    let pulsar = client(&broker).await;
    produce(&pulsar, "cumulative", 0..50).await;
    let mut c = consumer(&pulsar, "cumulative", "sub", SubType::Exclusive).await;
    let got = receive(&mut c, 30).await;
    assert_eq!(
        got.iter().map(number).collect::<Vec<_>>(),
        (0..30).collect::<Vec<_>>()
    );
    c.cumulative_ack(&got[29]).await.expect("cumulative ack");
    c.close().await.expect("close");
    broker.flush();
    drop(pulsar);
    broker.sigkill();

    let broker = Broker::start(dir.path());
    let pulsar = client(&broker).await;
    let mut c = consumer(&pulsar, "cumulative", "sub", SubType::Exclusive).await;
    let got: Vec<u32> = receive(&mut c, 20).await.iter().map(number).collect();
    assert_eq!(got, (30..50).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reader_reads_from_earliest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let pulsar = client(&broker).await;
    produce(&pulsar, "reader", 0..10).await;
    let mut reader = pulsar
        .reader()
        .with_topic("reader")
        .with_options(ConsumerOptions::default().with_initial_position(InitialPosition::Earliest))
        .into_reader::<String>()
        .await
        .expect("reader");
    let mut got = Vec::new();
    while got.len() < 10 {
        let msg = tokio::time::timeout(Duration::from_secs(20), reader.try_next())
            .await
            .expect("a message in time")
            .expect("read")
            .expect("stream open");
        got.push(number(&msg));
    }
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

/// Sends `bytes` on a new connection and waits until the broker closes it.
async fn closed_after(addr: &str, bytes: &[u8]) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(bytes).await.expect("write");
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf))
            .await
            .expect("the broker closes a connection that sent a bad frame")
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_frame_closes_its_connection_only_and_changes_nothing_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let pulsar = client(&broker).await;
    produce(&pulsar, "bad", 0..10).await;
    let mut c = consumer(&pulsar, "bad", "sub", SubType::Shared).await;
    for msg in receive(&mut c, 5).await {
        c.ack(&msg).await.expect("ack");
    }

    // A frame size beyond the limit, one below the smallest frame, a command size beyond its
    // frame, and a command that is not protobuf.
    closed_after(&broker.addr, &u32::MAX.to_be_bytes()).await;
    closed_after(&broker.addr, &[0, 0, 0, 1, 0]).await;
    closed_after(&broker.addr, &[0, 0, 0, 8, 0, 0, 0, 9, 1, 2, 3, 4]).await;
    closed_after(
        &broker.addr,
        &[0, 0, 0, 8, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff],
    )
    .await;

    // The good connection still works and its subscription is as it was.
    let rest: Vec<u32> = receive(&mut c, 5).await.iter().map(number).collect();
    assert_eq!(rest, (5..10).collect::<Vec<_>>());
    produce(&pulsar, "bad", 10..11).await;
    let next: Vec<u32> = receive(&mut c, 1).await.iter().map(number).collect();
    assert_eq!(next, vec![10]);
}

/// A client that writes protocol commands itself: what the client libraries never send.
struct Raw(tokio_util::codec::Framed<tokio::net::TcpStream, pulsar::message::Codec>);

impl Raw {
    async fn connect(addr: &str) -> Self {
        let s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut raw = Self(tokio_util::codec::Framed::new(s, pulsar::message::Codec));
        raw.send(BaseCommand {
            r#type: Type::Connect as i32,
            connect: Some(proto::CommandConnect {
                client_version: "raw".into(),
                protocol_version: Some(19),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
        raw.expect(Type::Connected).await;
        raw
    }

    async fn send(&mut self, command: BaseCommand) {
        self.send_with(command, None).await;
    }

    async fn send_with(&mut self, command: BaseCommand, payload: Option<Payload>) {
        use futures::SinkExt;
        self.0
            .send(pulsar::message::Message { command, payload })
            .await
            .expect("write");
    }

    /// The next frame from the broker, `None` once it closed the connection (failing after
    /// 20 s without either).
    async fn next(&mut self) -> Option<pulsar::message::Message> {
        use futures::StreamExt;
        tokio::time::timeout(Duration::from_secs(20), self.0.next())
            .await
            .expect("the broker answers in time")
            .and_then(Result::ok)
    }

    /// The next frame of type `t`, skipping the others (an error answer fails).
    async fn expect(&mut self, t: Type) -> pulsar::message::Message {
        let frames = self.until(t).await;
        frames
            .into_iter()
            .last()
            .expect("`until` ends with a frame of the type")
    }

    /// Opens producer 1 on `topic`.
    async fn producer(&mut self, topic: &str) {
        self.send(BaseCommand {
            r#type: Type::Producer as i32,
            producer: Some(proto::CommandProducer {
                topic: topic.into(),
                producer_id: 1,
                request_id: 1,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
        self.expect(Type::ProducerSuccess).await;
    }

    /// Sends one entry of `batch` messages from producer 1, without waiting for its answer.
    async fn send_entry(&mut self, sequence_id: u64, batch: i32) {
        let metadata = proto::MessageMetadata {
            producer_name: "raw".into(),
            sequence_id,
            publish_time: 1 + sequence_id,
            num_messages_in_batch: Some(batch),
            ..Default::default()
        };
        let command = BaseCommand {
            r#type: Type::Send as i32,
            send: Some(proto::CommandSend {
                producer_id: 1,
                sequence_id,
                num_messages: Some(batch),
                ..Default::default()
            }),
            ..Default::default()
        };
        let payload = Payload {
            metadata,
            data: b"opaque".to_vec(),
        };
        self.send_with(command, Some(payload)).await;
    }

    /// Stores `n` entries of one message each from producer 1, one after the other; their ids.
    async fn store_entries(&mut self, n: u64) -> Vec<(u64, u64)> {
        let mut entries = Vec::new();
        for sequence_id in 0..n {
            let id = self.store_entry(sequence_id, 1).await;
            entries.push((id.ledger_id, id.entry_id));
        }
        entries
    }

    /// Sends one unbatched entry of `data` from producer 1 with `metadata` (its producer name
    /// and sequence id set here), without waiting for its answer.
    async fn send_unbatched(
        &mut self,
        sequence_id: u64,
        metadata: proto::MessageMetadata,
        data: Vec<u8>,
    ) {
        let command = BaseCommand {
            r#type: Type::Send as i32,
            send: Some(proto::CommandSend {
                producer_id: 1,
                sequence_id,
                ..Default::default()
            }),
            ..Default::default()
        };
        let metadata = proto::MessageMetadata {
            producer_name: "raw".into(),
            sequence_id,
            ..metadata
        };
        self.send_with(command, Some(Payload { metadata, data }))
            .await;
    }

    /// Sends one entry of `batch` messages from producer 1 and waits for its receipt: the id of
    /// the entry stored.
    async fn store_entry(&mut self, sequence_id: u64, batch: i32) -> MessageIdData {
        self.send_entry(sequence_id, batch).await;
        let receipt = self.expect(Type::SendReceipt).await;
        let id = receipt.command.send_receipt.and_then(|r| r.message_id);
        id.expect("a receipt names its entry")
    }

    /// Subscribes consumer 1 to `sub` (Shared, from the earliest entry) with `permits`.
    async fn subscribe(&mut self, topic: &str, sub: &str, permits: u32) {
        self.subscribe_as(1, topic, sub, permits).await;
    }

    /// Subscribes `consumer_id` to `sub` (Shared, from the earliest entry) with `permits`; the
    /// frames before the subscription's answer hold no `MESSAGE`.
    async fn subscribe_as(&mut self, consumer_id: u64, topic: &str, sub: &str, permits: u32) {
        let shared = proto::command_subscribe::SubType::Shared;
        self.subscribe_kind(consumer_id, topic, sub, shared, permits)
            .await;
    }

    /// Subscribes `consumer_id` to `sub` as `kind` (from the earliest entry) with `permits`;
    /// the frames before the subscription's answer hold no `MESSAGE`.
    async fn subscribe_kind(
        &mut self,
        consumer_id: u64,
        topic: &str,
        sub: &str,
        kind: proto::command_subscribe::SubType,
        permits: u32,
    ) {
        self.send(BaseCommand {
            r#type: Type::Subscribe as i32,
            subscribe: Some(proto::CommandSubscribe {
                topic: topic.into(),
                subscription: sub.into(),
                sub_type: kind as i32,
                consumer_id,
                request_id: 2,
                initial_position: Some(proto::command_subscribe::InitialPosition::Earliest as i32),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
        let before = self.until(Type::Success).await;
        assert_eq!(
            messages_for(&before, None),
            0,
            "a MESSAGE before SUBSCRIBE's answer"
        );
        self.flow(consumer_id, permits).await;
    }

    /// Grants `consumer_id` more permits.
    async fn flow(&mut self, consumer_id: u64, permits: u32) {
        self.send(BaseCommand {
            r#type: Type::Flow as i32,
            flow: Some(proto::CommandFlow {
                consumer_id,
                message_permits: permits,
            }),
            ..Default::default()
        })
        .await;
    }

    /// The frames from the broker up to and including the first of type `t` (an error answer
    /// fails).
    async fn until(&mut self, t: Type) -> Vec<pulsar::message::Message> {
        let mut frames = Vec::new();
        loop {
            let m = self.next().await.expect("the connection stays open");
            assert_ne!(m.command.r#type, Type::Error as i32, "{:?}", m.command);
            let last = m.command.r#type == t as i32;
            frames.push(m);
            if last {
                return frames;
            }
        }
    }

    /// The frames from the broker up to its answer to a `PING` sent now: what it had queued
    /// for this connection before it read the `PING`.
    async fn until_pong(&mut self) -> Vec<pulsar::message::Message> {
        self.send(BaseCommand {
            r#type: Type::Ping as i32,
            ping: Some(proto::CommandPing {}),
            ..Default::default()
        })
        .await;
        self.until(Type::Pong).await
    }

    /// Acknowledges `ids` individually for consumer 1, in one `ACK`, and waits for the answer.
    async fn ack(&mut self, ids: Vec<MessageIdData>) {
        self.send(BaseCommand {
            r#type: Type::Ack as i32,
            ack: Some(proto::CommandAck {
                consumer_id: 1,
                ack_type: proto::command_ack::AckType::Individual as i32,
                message_id: ids,
                request_id: Some(3),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
        self.expect(Type::AckResponse).await;
    }

    /// Consumer 1's unacknowledged entries are delivered again.
    async fn redeliver(&mut self) {
        self.send(BaseCommand {
            r#type: Type::RedeliverUnacknowledgedMessages as i32,
            redeliver_unacknowledged_messages: Some(
                proto::CommandRedeliverUnacknowledgedMessages {
                    consumer_id: 1,
                    ..Default::default()
                },
            ),
            ..Default::default()
        })
        .await;
    }

    /// Consumer 1's mark-delete position is before the entry `id` names (entry ids read as a
    /// client does, signed: entry -1 of a ledger is before its first).
    async fn assert_mark_delete_before(&mut self, id: &MessageIdData) {
        let (_, mark) = self.last_message_id().await;
        let at = |m: &MessageIdData| (m.ledger_id, m.entry_id as i64);
        assert!(
            mark.as_ref().is_none_or(|m| at(m) < at(id)),
            "entry {}:{} is acknowledged: mark-delete {mark:?}",
            id.ledger_id,
            id.entry_id
        );
    }

    /// The topic's last message id and consumer 1's mark-delete position.
    async fn last_message_id(&mut self) -> (MessageIdData, Option<MessageIdData>) {
        self.send(BaseCommand {
            r#type: Type::GetLastMessageId as i32,
            get_last_message_id: Some(proto::CommandGetLastMessageId {
                consumer_id: 1,
                request_id: 4,
            }),
            ..Default::default()
        })
        .await;
        let r = self.expect(Type::GetLastMessageIdResponse).await;
        let r = r.command.get_last_message_id_response.expect("body");
        (r.last_message_id, r.consumer_mark_delete_position)
    }
}

/// How many of `frames` are `MESSAGE`s for `consumer_id` (for any consumer with `None`).
fn messages_for(frames: &[pulsar::message::Message], consumer_id: Option<u64>) -> usize {
    frames
        .iter()
        .filter_map(|m| m.command.message.as_ref())
        .filter(|m| consumer_id.is_none_or(|id| m.consumer_id == id))
        .count()
}

fn entry_of(m: &pulsar::message::Message) -> (u64, u64) {
    let id = &m.command.message.as_ref().expect("a MESSAGE").message_id;
    (id.ledger_id, id.entry_id)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_ack_claiming_another_batch_size_acknowledges_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let mut raw = Raw::connect(&broker.addr).await;
    raw.producer("batch-size").await;
    let id = raw.store_entry(0, 10).await;
    raw.subscribe("batch-size", "sub", 100).await;
    let m = raw.expect(Type::Message).await;
    assert_eq!(entry_of(&m), (id.ledger_id, id.entry_id));

    // Message 0 of a batch the client says holds 1 message: the entry holds 10, so the ack
    // names no message of it.
    let message = |ack_set: Vec<i64>, batch_size: i32| MessageIdData {
        ledger_id: id.ledger_id,
        entry_id: id.entry_id,
        ack_set,
        batch_size: Some(batch_size),
        ..Default::default()
    };
    raw.ack(vec![message(vec![!1], 1)]).await;
    raw.assert_mark_delete_before(&id).await;
    raw.redeliver().await;
    let again = raw.expect(Type::Message).await;
    assert_eq!(entry_of(&again), (id.ledger_id, id.entry_id));
    assert_eq!(
        again.command.message.expect("body").ack_set,
        Vec::<i64>::new()
    );

    // The same ack with the entry's own size acknowledges message 0 only.
    raw.ack(vec![message(vec![!1], 10)]).await;
    raw.redeliver().await;
    let again = raw.expect(Type::Message).await;
    assert_eq!(entry_of(&again), (id.ledger_id, id.entry_id));
    assert_eq!(again.command.message.expect("body").ack_set, vec![0x3fe]);
}

/// Ids of the entries of `topic` as `ACK`s name them (12 entries, the 7th a batch of 10
/// messages), sent by producer 1 of `raw`.
async fn twelve_entries(raw: &mut Raw, topic: &str) -> Vec<MessageIdData> {
    raw.producer(topic).await;
    let mut ids = Vec::new();
    for sequence_id in 0..12 {
        let batch = if sequence_id == 6 { 10 } else { 1 };
        ids.push(raw.store_entry(sequence_id, batch).await);
    }
    ids
}

/// The commands of [`one_ack_of_many_ids_acknowledges_what_its_ids_one_by_one_do`], each a
/// list of individual acks: ids of entries, a duplicate, an entry already acknowledged, one at
/// mark-delete (as a trimmed entry is), two entries that do not exist (past the last entry of
/// its ledger, in a ledger that does not exist) and a batch ack set among them.
fn mixed_acks(ids: &[MessageIdData]) -> Vec<Vec<MessageIdData>> {
    let e = |i: usize| MessageIdData {
        ledger_id: ids[i].ledger_id,
        entry_id: ids[i].entry_id,
        ..Default::default()
    };
    let past_end = MessageIdData {
        entry_id: ids[11].entry_id + 100,
        ..e(11)
    };
    let no_ledger = MessageIdData {
        ledger_id: ids[11].ledger_id + 1000,
        entry_id: 0,
        ..Default::default()
    };
    // Messages 0 to 4 of the batch of 10 (a set bit: not acknowledged).
    let half_batch = MessageIdData {
        ack_set: vec![0x3e0],
        batch_size: Some(10),
        ..e(6)
    };
    vec![
        vec![e(2), e(3), e(2)],
        vec![
            e(0),
            e(4),
            past_end,
            e(3),
            e(4),
            half_batch,
            e(8),
            e(9),
            no_ledger,
            e(10),
            e(0),
        ],
        vec![e(0), e(11), e(11)],
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn one_ack_of_many_ids_acknowledges_what_its_ids_one_by_one_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broker = Broker::start(dir.path());
    let mut producer = Raw::connect(&broker.addr).await;
    let ids = twelve_entries(&mut producer, "grouped").await;
    let commands = mixed_acks(&ids);
    let entry = |i: usize| (ids[i].ledger_id, ids[i].entry_id);

    // Subscription "grouped" gets each command as sent; "single" gets every id as an `ACK` of
    // its own, the ids in the same order: the model of the grouped one.
    let mut subs = Vec::new();
    for name in ["grouped", "single"] {
        let mut raw = Raw::connect(&broker.addr).await;
        raw.subscribe("grouped", name, 100).await;
        for i in 0..12 {
            assert_eq!(entry_of(&raw.expect(Type::Message).await), entry(i));
        }
        subs.push(raw);
    }
    for command in &commands {
        subs[0].ack(command.clone()).await;
        for id in command {
            subs[1].ack(vec![id.clone()]).await;
        }
    }

    // Both deliver again exactly the entries left unacknowledged, the batch with the messages
    // still to deliver: an acknowledged entry left the consumer's pending entries, and no
    // other did.
    let unacked = [entry(1), entry(5), entry(6), entry(7)];
    for raw in &mut subs {
        let (_, mark) = raw.last_message_id().await;
        assert_eq!(mark.map(|m| (m.ledger_id, m.entry_id)), Some(entry(0)));
        raw.redeliver().await;
        for want in unacked {
            let m = raw.expect(Type::Message).await;
            assert_eq!(entry_of(&m), want);
            let ack_set = &m.command.message.expect("body").ack_set;
            if want == entry(6) {
                assert_eq!(ack_set, &vec![0x3e0]);
            } else {
                assert!(ack_set.is_empty(), "{ack_set:?}");
            }
        }
    }
    broker.flush();
    drop(subs);
    drop(producer);
    broker.sigkill();

    // The cursors as stored: the same state, the known one.
    let store = ackstore::Store::open(dir.path(), ackstore::StoreConfig::default()).expect("open");
    let topic = store.topic("grouped").expect("topic");
    let state = |name: &str| {
        let options = ackstore::CursorOptions {
            initial_position: ackstore::InitialPosition::Earliest,
            ..Default::default()
        };
        let cursor = topic.open_cursor(name, options).expect("cursor");
        let batch = ackstore::Position::new(ids[6].ledger_id, ids[6].entry_id);
        let indexes: Vec<bool> = (0..10)
            .map(|i| cursor.is_batch_index_acked(batch, i).expect("batch index"))
            .collect();
        (
            cursor.mark_delete_position().expect("mark-delete"),
            cursor.acked_ranges().expect("ranges"),
            indexes,
        )
    };
    let grouped = state("grouped");
    assert_eq!(grouped, state("single"));
    let p = |i: usize| ackstore::Position::new(ids[i].ledger_id, ids[i].entry_id);
    assert_eq!(grouped.0, Some(p(0)));
    assert_eq!(
        grouped.1,
        vec![(p(2), p(4)), (p(8), p(11))],
        "individually acknowledged ranges"
    );
    assert_eq!(grouped.2, (0..10).map(|i| i < 5).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_send_of_more_messages_than_a_batch_may_hold_closes_its_connection_unstored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let mut raw = Raw::connect(&broker.addr).await;
    raw.producer("huge-batch").await;
    let id = raw.store_entry(0, 1).await;
    let too_many = i32::try_from(ackstore::MAX_BATCH_SIZE).expect("fits") + 1;
    raw.send_entry(1, too_many).await;
    if let Some(m) = raw.next().await {
        panic!("the connection stays open: {:?}", m.command);
    }

    let mut other = Raw::connect(&broker.addr).await;
    other.subscribe("huge-batch", "sub", 100).await;
    let m = other.expect(Type::Message).await;
    assert_eq!(entry_of(&m), (id.ledger_id, id.entry_id));
    let (last, _) = other.last_message_id().await;
    assert_eq!((last.ledger_id, last.entry_id), (id.ledger_id, id.entry_id));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_changing_kind_delivers_what_its_last_consumer_left_unacked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let pulsar = client(&broker).await;
    produce(&pulsar, "kinds", 0..10).await;
    let mut c = consumer(&pulsar, "kinds", "sub", SubType::Shared).await;
    let got = receive(&mut c, 10).await;
    for msg in &got[..4] {
        c.ack(msg).await.expect("ack");
    }
    c.close().await.expect("close");

    let mut c = consumer(&pulsar, "kinds", "sub", SubType::Exclusive).await;
    let got: Vec<u32> = receive(&mut c, 6).await.iter().map(number).collect();
    assert_eq!(got, (4..10).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_seek_to_a_batch_index_beyond_its_batch_skips_no_later_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let mut raw = Raw::connect(&broker.addr).await;
    raw.producer("seek-index").await;
    let mut ids = Vec::new();
    for sequence_id in 0..3 {
        ids.push(raw.store_entry(sequence_id, 10).await);
    }
    raw.subscribe("seek-index", "sub", 100).await;
    raw.expect(Type::Message).await;

    // Message 15 of the first entry, which holds 10: the seek goes no further than the
    // entry after it, which is delivered whole.
    raw.send(BaseCommand {
        r#type: Type::Seek as i32,
        seek: Some(proto::CommandSeek {
            consumer_id: 1,
            request_id: 5,
            message_id: Some(MessageIdData {
                batch_index: Some(15),
                ..ids[0].clone()
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await;
    raw.expect(Type::Success).await;
    raw.subscribe("seek-index", "sub", 100).await;
    let m = raw.expect(Type::Message).await;
    assert_eq!(entry_of(&m), (ids[1].ledger_id, ids[1].entry_id));
    assert_eq!(m.command.message.expect("body").ack_set, Vec::<i64>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cumulative_batch_ack_on_the_first_entry_of_a_ledger_covers_the_ledger_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let mut raw = Raw::connect(&broker.addr).await;
    raw.producer("cumulative-ledgers").await;
    let mut ids = Vec::new();
    for sequence_id in 0..3 {
        ids.push(raw.store_entry(sequence_id, 1).await);
    }
    drop(raw);
    broker.sigkill();

    // The restarted broker appends to a new ledger.
    let broker = Broker::start(dir.path());
    let mut raw = Raw::connect(&broker.addr).await;
    raw.producer("cumulative-ledgers").await;
    let batch = raw.store_entry(3, 10).await;
    let last_before = ids[2].clone();
    assert_ne!(batch.ledger_id, last_before.ledger_id);
    assert_eq!(batch.entry_id, 0);
    let exclusive = proto::command_subscribe::SubType::Exclusive;
    raw.subscribe_kind(1, "cumulative-ledgers", "sub", exclusive, 100)
        .await;
    for _ in 0..4 {
        raw.expect(Type::Message).await;
    }

    // Everything before the batch, and its first 5 messages.
    raw.send(BaseCommand {
        r#type: Type::Ack as i32,
        ack: Some(proto::CommandAck {
            consumer_id: 1,
            ack_type: proto::command_ack::AckType::Cumulative as i32,
            message_id: vec![MessageIdData {
                ack_set: vec![0x3e0],
                batch_size: Some(10),
                ..batch.clone()
            }],
            request_id: Some(3),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await;
    raw.expect(Type::AckResponse).await;
    let (_, mark) = raw.last_message_id().await;
    let mark = mark.map(|m| (m.ledger_id, m.entry_id));
    assert_eq!(mark, Some((last_before.ledger_id, last_before.entry_id)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_that_never_reads_is_not_handed_the_backlog() {
    const ENTRIES: u64 = 600;
    const WANT: usize = 400;
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let mut raw = Raw::connect(&broker.addr).await;
    raw.producer("never-reads").await;
    for sequence_id in 0..ENTRIES {
        let metadata = proto::MessageMetadata::default();
        raw.send_unbatched(sequence_id, metadata, vec![7; 64 * 1024])
            .await;
    }
    for _ in 0..ENTRIES {
        raw.expect(Type::SendReceipt).await;
    }

    // A Shared consumer first in turn, with every permit, that reads nothing: what it cannot
    // take goes to the consumer that reads, beyond what socket buffers and the broker's
    // per-connection bound (1 MiB) hold for the first. The entries are 37.5 MiB; the reader
    // needs two thirds of them, so the socket buffers of a connection that never reads (a
    // send buffer of at most `net.ipv4.tcp_wmem`, 4 MiB by default, and an initial receive
    // window) may hold up to 11 MiB. Without the bound the first consumer takes half.
    let mut stalled = Raw::connect(&broker.addr).await;
    stalled.subscribe("never-reads", "sub", u32::MAX).await;
    let mut reading = Raw::connect(&broker.addr).await;
    reading.subscribe("never-reads", "sub", u32::MAX).await;
    let mut got = BTreeSet::new();
    while got.len() < WANT {
        let m = reading.expect(Type::Message).await;
        got.insert(entry_of(&m));
    }
    drop(stalled);
}

/// What a client may be sent for a consumer: nothing before its subscription is answered,
/// nothing beyond its permits, nothing once its close is answered or the broker closed it for a
/// seek (a client that let the consumer go meets a `MESSAGE` for an id it no longer serves).
#[tokio::test(flavor = "multi_thread")]
async fn no_message_reaches_a_consumer_beyond_its_permits_or_after_its_close_or_seek_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let mut producer = Raw::connect(&broker.addr).await;
    producer.producer("lifecycle").await;
    let entries = producer.store_entries(10).await;
    // Consumer 1 of `a`, with 3 permits, takes the first 3 entries; consumer 1 of `b`, joining
    // after, takes the 7 others, and `a` is handed nothing more (the `PING` is read after
    // every entry was dispatched).
    let mut a = Raw::connect(&broker.addr).await;
    a.subscribe_as(1, "lifecycle", "sub", 3).await;
    let mut first = Vec::new();
    for _ in 0..3 {
        first.push(entry_of(&a.expect(Type::Message).await));
    }
    assert_eq!(first, entries[..3]);
    let mut b = Raw::connect(&broker.addr).await;
    b.subscribe_as(1, "lifecycle", "sub", 100).await;
    let mut rest = Vec::new();
    for _ in 0..7 {
        rest.push(entry_of(&b.expect(Type::Message).await));
    }
    assert_eq!(rest, entries[3..]);
    let frames = a.until_pong().await;
    assert_eq!(
        messages_for(&frames, None),
        0,
        "a MESSAGE beyond the permits"
    );

    // `a` closes its consumer while it holds permits: the 3 entries it held go to `b`, and
    // none reaches `a` after the answer.
    a.flow(1, 100).await;
    a.send(BaseCommand {
        r#type: Type::CloseConsumer as i32,
        close_consumer: Some(proto::CommandCloseConsumer {
            consumer_id: 1,
            request_id: 10,
        }),
        ..Default::default()
    })
    .await;
    a.until(Type::Success).await;
    let mut again = Vec::new();
    for _ in 0..3 {
        again.push(entry_of(&b.expect(Type::Message).await));
    }
    again.sort_unstable();
    assert_eq!(again, entries[..3]);
    let frames = a.until_pong().await;
    assert_eq!(
        messages_for(&frames, None),
        0,
        "a MESSAGE after CLOSE_CONSUMER's answer"
    );

    // A seek closes `b`'s consumer (a `CLOSE_CONSUMER` from the broker before the answer):
    // nothing reaches it after, and consumer 2 subscribing again receives from the entry
    // sought.
    b.send(BaseCommand {
        r#type: Type::Seek as i32,
        seek: Some(proto::CommandSeek {
            consumer_id: 1,
            request_id: 11,
            message_id: Some(MessageIdData {
                ledger_id: entries[5].0,
                entry_id: entries[5].1,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await;
    let frames = b.until(Type::Success).await;
    let closed = frames
        .iter()
        .position(|m| m.command.close_consumer.as_ref().map(|c| c.consumer_id) == Some(1));
    let closed = closed.expect("the broker closes the consumer that sought");
    assert_eq!(
        messages_for(&frames[closed..], None),
        0,
        "a MESSAGE after the close"
    );
    b.subscribe_as(2, "lifecycle", "sub", 100).await;
    let mut frames = Vec::new();
    while messages_for(&frames, Some(2)) < 5 {
        frames.push(b.next().await.expect("the connection stays open"));
    }
    frames.extend(b.until_pong().await);
    assert_eq!(
        messages_for(&frames, Some(1)),
        0,
        "a MESSAGE after the seek"
    );
    let after: Vec<(u64, u64)> = frames
        .iter()
        .filter(|m| m.command.message.is_some())
        .map(entry_of)
        .take(5)
        .collect();
    assert_eq!(after, entries[5..]);
}

/// An individual batch-index ack acknowledges the messages its set names and nothing else,
/// also for an entry the consumer gave back for redelivery and not yet received again.
#[tokio::test(flavor = "multi_thread")]
async fn an_individual_batch_ack_of_an_entry_queued_for_redelivery_acknowledges_nothing_before_it()
{
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let mut raw = Raw::connect(&broker.addr).await;
    raw.producer("redelivered-batch").await;
    let first = raw.store_entry(0, 10).await;
    let second = raw.store_entry(1, 10).await;
    // Permits for the two entries only: what is given back stays queued.
    raw.subscribe("redelivered-batch", "sub", 20).await;
    for want in [&first, &second] {
        let m = raw.expect(Type::Message).await;
        assert_eq!(entry_of(&m), (want.ledger_id, want.entry_id));
    }
    raw.send(BaseCommand {
        r#type: Type::RedeliverUnacknowledgedMessages as i32,
        redeliver_unacknowledged_messages: Some(proto::CommandRedeliverUnacknowledgedMessages {
            consumer_id: 1,
            message_ids: vec![second.clone()],
            ..Default::default()
        }),
        ..Default::default()
    })
    .await;

    // Message 0 of the second entry, as a client grouping its acks sends it after the nack.
    raw.ack(vec![MessageIdData {
        ack_set: vec![!1 & 0x3ff],
        batch_size: Some(10),
        ..second.clone()
    }])
    .await;
    raw.assert_mark_delete_before(&first).await;

    // Both come back once given back and granted permits: the first whole, the second with
    // message 0 left out.
    raw.redeliver().await;
    raw.flow(1, 100).await;
    let mut again = Vec::new();
    for _ in 0..2 {
        let m = raw.expect(Type::Message).await;
        let ack_set = m.command.message.as_ref().expect("body").ack_set.clone();
        again.push((entry_of(&m), ack_set));
    }
    again.sort();
    let entry = |id: &MessageIdData| (id.ledger_id, id.entry_id);
    assert_eq!(
        again,
        vec![(entry(&first), vec![]), (entry(&second), vec![0x3fe])]
    );
}

/// The entries of the next two `MESSAGE`s `raw` receives, in the order received.
async fn two_entries(raw: &mut Raw) -> [(u64, u64); 2] {
    let first = entry_of(&raw.expect(Type::Message).await);
    [first, entry_of(&raw.expect(Type::Message).await)]
}

/// Stores one unbatched entry with partition key `key` from producer 1; its id.
async fn store_keyed(raw: &mut Raw, sequence_id: u64, key: &str) -> (u64, u64) {
    let metadata = proto::MessageMetadata {
        partition_key: Some(key.into()),
        ..Default::default()
    };
    raw.send_unbatched(sequence_id, metadata, b"keyed".to_vec())
        .await;
    let receipt = raw.expect(Type::SendReceipt).await;
    let id = receipt.command.send_receipt.and_then(|r| r.message_id);
    let id = id.expect("a receipt names its entry");
    (id.ledger_id, id.entry_id)
}

/// Two Key_Shared consumers of `topic`'s subscription "sub", each consumer 1 on its own
/// connection, the first subscribing (from the earliest entry) before the second, with
/// `permits` each; then a producer of `topic` on a third connection.
async fn key_shared_pair(addr: &str, topic: &str, permits: [u32; 2]) -> (Raw, Raw, Raw) {
    let key_shared = proto::command_subscribe::SubType::KeyShared;
    let mut first = Raw::connect(addr).await;
    first
        .subscribe_kind(1, topic, "sub", key_shared, permits[0])
        .await;
    let mut second = Raw::connect(addr).await;
    second
        .subscribe_kind(1, topic, "sub", key_shared, permits[1])
        .await;
    let mut producer = Raw::connect(addr).await;
    producer.producer(topic).await;
    (first, second, producer)
}

/// Two Key_Shared consumers: the first owns hashes 32768..65536, the second, joining, takes
/// 0..32768. Key "c" hashes to 54879 and key "a" to 27058 (Pulsar's Murmur3 hash modulo
/// 65,536), so each goes to one consumer. An entry whose consumer has no permits waits, the
/// other key's entries going on; with permits for one message its consumer receives its oldest
/// entry, then the rest in order.
#[tokio::test(flavor = "multi_thread")]
async fn key_shared_entries_wait_for_their_keys_consumer_and_come_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let (mut first, mut second, mut producer) = key_shared_pair(&broker.addr, "keys", [0, 0]).await;
    let mut ids = Vec::new();
    for (sequence_id, key) in ["c", "a", "c", "a", "c"].into_iter().enumerate() {
        ids.push(store_keyed(&mut producer, sequence_id as u64, key).await);
    }
    second.flow(1, 10).await;
    let a = two_entries(&mut second).await;
    assert_eq!(
        a,
        [ids[1], ids[3]],
        "key a's entries to the second consumer, in order"
    );
    first.flow(1, 1).await;
    assert_eq!(entry_of(&first.expect(Type::Message).await), ids[0]);
    assert_eq!(
        messages_for(&first.until_pong().await, None),
        0,
        "beyond its permit"
    );
    first.flow(1, 10).await;
    let c = two_entries(&mut first).await;
    assert_eq!(
        c,
        [ids[2], ids[4]],
        "key c's later entries to the first consumer, in order"
    );
    assert_eq!(
        messages_for(&second.until_pong().await, None),
        0,
        "key c on the second"
    );
}

/// The broker's dispatcher threads of subscriptions whose name starts with `prefix` (a thread
/// is named `dispatch-` and its subscription's name, cut to 15 bytes by the kernel).
fn dispatchers(broker: &Broker, prefix: &str) -> usize {
    let tasks = format!("/proc/{}/task", broker.child.id());
    let want = format!("dispatch-{prefix}");
    std::fs::read_dir(tasks)
        .expect("the broker's threads")
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|name| name.trim_end().starts_with(&want))
        .count()
}

/// Subscribes reader `consumer_id` (a non-durable subscription `sub`, from the earliest
/// entry, naming no start as a reader subscribing again after a seek by time does) and receives
/// the entries `want`.
async fn reader_reads(
    raw: &mut Raw,
    topic: &str,
    sub: &str,
    consumer_id: u64,
    want: &[(u64, u64)],
) {
    raw.send(BaseCommand {
        r#type: Type::Subscribe as i32,
        subscribe: Some(proto::CommandSubscribe {
            topic: topic.into(),
            subscription: sub.into(),
            sub_type: proto::command_subscribe::SubType::Exclusive as i32,
            consumer_id,
            request_id: 20,
            durable: Some(false),
            initial_position: Some(proto::command_subscribe::InitialPosition::Earliest as i32),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await;
    raw.until(Type::Success).await;
    raw.flow(consumer_id, 100).await;
    let mut got = Vec::new();
    for _ in want {
        got.push(entry_of(&raw.expect(Type::Message).await));
    }
    assert_eq!(got, want, "reader {sub}");
}

/// Seeks reader `consumer_id` to publish time 2 (entries are stamped 1, 2, 3): the broker
/// closes the consumer and answers.
async fn seek_to_time_2(raw: &mut Raw, consumer_id: u64) {
    raw.send(BaseCommand {
        r#type: Type::Seek as i32,
        seek: Some(proto::CommandSeek {
            consumer_id,
            request_id: 21,
            message_publish_time: Some(2),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await;
    let frames = raw.until(Type::Success).await;
    assert!(
        frames.iter().any(|m| m.command.close_consumer.is_some()),
        "the seek closes the reader's consumer"
    );
}

/// Readers closed by their client while a seek by publish time had their consumer closed
/// (the client then sends nothing: its consumer is not connected) leave no subscription behind
/// on a connection that stays open: each one's dispatcher thread ends, round after round. A
/// reader that does subscribe again reads on from the entry sought, though its dispatcher was
/// waiting for entries when the seek came.
#[tokio::test(flavor = "multi_thread")]
async fn readers_gone_after_a_seek_by_time_leave_no_dispatcher_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let mut raw = Raw::connect(&broker.addr).await;
    raw.producer("sought").await;
    let entries = raw.store_entries(3).await;
    for round in 0..20 {
        let (sub, consumer_id) = (format!("gone{round}"), 10 + round);
        reader_reads(&mut raw, "sought", &sub, consumer_id, &entries).await;
        seek_to_time_2(&mut raw, consumer_id).await;
    }
    reader_reads(&mut raw, "sought", "back", 1, &entries).await;
    seek_to_time_2(&mut raw, 1).await;
    reader_reads(&mut raw, "sought", "back", 1, &entries[1..]).await;
    // The threads end on their own once told to; the connection stays open meanwhile.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut left = dispatchers(&broker, "gone");
    while left > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        left = dispatchers(&broker, "gone");
    }
    assert_eq!(left, 0, "dispatcher threads of readers gone after a seek");
}

/// The topics a `GET_TOPICS_OF_NAMESPACE` of `namespace` and `mode` answers, sorted.
async fn topics_of(
    raw: &mut Raw,
    namespace: &str,
    mode: proto::command_get_topics_of_namespace::Mode,
) -> Vec<String> {
    raw.send(BaseCommand {
        r#type: Type::GetTopicsOfNamespace as i32,
        get_topics_of_namespace: Some(proto::CommandGetTopicsOfNamespace {
            request_id: 30,
            namespace: namespace.into(),
            mode: Some(mode as i32),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await;
    let answer = raw.expect(Type::GetTopicsOfNamespaceResponse).await;
    let answer = answer
        .command
        .get_topics_of_namespace_response
        .expect("body");
    assert_eq!(answer.request_id, 30);
    let mut topics = answer.topics;
    topics.sort();
    topics
}

/// A namespace's topics are those directly in it, of the mode asked for: not those of a
/// namespace its name is a prefix of, of a namespace inside it, or of another tenant; an odd
/// namespace answers none; a topic a producer has just created (no entry yet) is listed.
#[tokio::test(flavor = "multi_thread")]
async fn the_topics_of_a_namespace_are_its_own_of_the_mode_asked_for() {
    use proto::command_get_topics_of_namespace::Mode;
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let topics = [
        "persistent://public/default/a",
        "persistent://public/default2/b",
        "persistent://public2/default/c",
        "non-persistent://public/default/d",
        "persistent://public/default/x/e",
    ];
    for topic in topics {
        Raw::connect(&broker.addr).await.producer(topic).await;
    }
    let mut raw = Raw::connect(&broker.addr).await;
    let cases: [(&str, Mode, &[&str]); 10] = [
        ("public/default", Mode::Persistent, &[topics[0]]),
        ("public/default", Mode::NonPersistent, &[topics[3]]),
        ("public/default", Mode::All, &[topics[3], topics[0]]),
        ("public/default2", Mode::Persistent, &[topics[1]]),
        ("public2/default", Mode::All, &[topics[2]]),
        ("public/default/x", Mode::Persistent, &[topics[4]]),
        ("public/defaul", Mode::All, &[]),
        ("public", Mode::All, &[]),
        ("public/default/", Mode::All, &[]),
        ("", Mode::All, &[]),
    ];
    for (namespace, mode, want) in cases {
        assert_eq!(
            topics_of(&mut raw, namespace, mode).await,
            want,
            "{namespace:?} {mode:?}"
        );
    }
    raw.producer("persistent://public/default/new").await;
    assert_eq!(
        topics_of(&mut raw, "public/default", Mode::Persistent).await,
        [topics[0], "persistent://public/default/new"]
    );
}

/// A subscription with nothing acknowledged answers `GET_LAST_MESSAGE_ID` with a mark-delete
/// position just before its first entry (entry -1 of that entry's ledger, as a Pulsar cursor):
/// after a seek by publish time a client compares it with the last message to tell whether one
/// is available, and without one it answers that none is.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_with_nothing_acknowledged_answers_the_position_before_its_first_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let mut raw = Raw::connect(&broker.addr).await;
    raw.producer("unacknowledged").await;
    let first = raw.store_entry(0, 1).await;
    let second = raw.store_entry(1, 1).await;
    raw.subscribe("unacknowledged", "sub", 0).await;
    let (last, mark) = raw.last_message_id().await;
    assert_eq!(
        (last.ledger_id, last.entry_id),
        (second.ledger_id, second.entry_id)
    );
    let mark = mark.expect("a mark-delete position");
    assert_eq!(
        (mark.ledger_id, mark.entry_id as i64),
        (first.ledger_id, first.entry_id as i64 - 1)
    );
}

/// A producer naming an initial subscription (as a client's dead-letter producer does for its
/// policy's `initialSubscriptionName`) has it created from the topic's first entry: a consumer
/// subscribing to it later, at the latest entry, receives what was sent before.
#[tokio::test(flavor = "multi_thread")]
async fn a_producers_initial_subscription_holds_what_is_sent_before_its_consumer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let mut raw = Raw::connect(&broker.addr).await;
    raw.send(BaseCommand {
        r#type: Type::Producer as i32,
        producer: Some(proto::CommandProducer {
            topic: "dead-letters".into(),
            producer_id: 1,
            request_id: 1,
            initial_subscription_name: Some("initial".into()),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await;
    raw.expect(Type::ProducerSuccess).await;
    let sent = raw.store_entry(0, 1).await;
    raw.send(BaseCommand {
        r#type: Type::Subscribe as i32,
        subscribe: Some(proto::CommandSubscribe {
            topic: "dead-letters".into(),
            subscription: "initial".into(),
            sub_type: proto::command_subscribe::SubType::Exclusive as i32,
            consumer_id: 1,
            request_id: 2,
            initial_position: Some(proto::command_subscribe::InitialPosition::Latest as i32),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await;
    raw.until(Type::Success).await;
    raw.flow(1, 10).await;
    let m = raw.expect(Type::Message).await;
    assert_eq!(entry_of(&m), (sent.ledger_id, sent.entry_id));
}

/// A cumulative `ACK` from consumer 1 of `raw` of the entry `id` names; waits for the answer.
async fn ack_cumulative(raw: &mut Raw, (ledger_id, entry_id): (u64, u64)) {
    raw.send(BaseCommand {
        r#type: Type::Ack as i32,
        ack: Some(proto::CommandAck {
            consumer_id: 1,
            ack_type: proto::command_ack::AckType::Cumulative as i32,
            message_id: vec![MessageIdData {
                ledger_id,
                entry_id,
                ..Default::default()
            }],
            request_id: Some(3),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await;
    raw.expect(Type::AckResponse).await;
}

/// A cumulative ack on Key_Shared (which Pulsar's clients refuse to send and its broker
/// ignores) acknowledges nothing: not the entries of its own consumer, nor key "a"'s entry the
/// second consumer holds, which comes to the first consumer once the second leaves (the
/// first's entries come back to it too, as it never acknowledged them one by one).
#[tokio::test(flavor = "multi_thread")]
async fn a_cumulative_ack_on_key_shared_acknowledges_no_other_consumers_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let (mut first, mut second, mut producer) =
        key_shared_pair(&broker.addr, "cumulative-keys", [10, 10]).await;
    let mut ids = Vec::new();
    for (sequence_id, key) in ["c", "a", "c"].into_iter().enumerate() {
        ids.push(store_keyed(&mut producer, sequence_id as u64, key).await);
    }
    assert_eq!(entry_of(&second.expect(Type::Message).await), ids[1]);
    let c = two_entries(&mut first).await;
    assert_eq!(c, [ids[0], ids[2]]);
    ack_cumulative(&mut first, ids[2]).await;
    let (ledger_id, entry_id) = ids[0];
    first
        .assert_mark_delete_before(&MessageIdData {
            ledger_id,
            entry_id,
            ..Default::default()
        })
        .await;
    drop(second);
    first.redeliver().await;
    let mut again = BTreeSet::new();
    for _ in 0..3 {
        again.insert(entry_of(&first.expect(Type::Message).await));
    }
    assert_eq!(again, ids.iter().copied().collect());
}

/// Three Key_Shared consumers: key "d" hashes to 5235, the second consumer's (0..32768) until
/// the third joins and takes 0..16384; key "c" (54879) is the first's throughout. The second,
/// with one permit, holds key d's first entry unacknowledged while its second waits; the third
/// joins (in order) and must not receive that second entry before the first is acknowledged.
/// Key c's entries, each received by the first consumer, mark where the dispatcher has been.
#[tokio::test(flavor = "multi_thread")]
async fn a_joining_key_shared_consumer_receives_no_entry_of_a_key_held_unacked_elsewhere() {
    let key_shared = proto::command_subscribe::SubType::KeyShared;
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    let (mut first, mut second, mut producer) =
        key_shared_pair(&broker.addr, "joining", [10, 1]).await;
    let d0 = store_keyed(&mut producer, 0, "d").await;
    let d1 = store_keyed(&mut producer, 1, "d").await;
    let c2 = store_keyed(&mut producer, 2, "c").await;
    assert_eq!(entry_of(&first.expect(Type::Message).await), c2);
    let held = second.expect(Type::Message).await;
    assert_eq!(entry_of(&held), d0);
    let mut third = Raw::connect(&broker.addr).await;
    third
        .subscribe_kind(1, "joining", "sub", key_shared, 10)
        .await;
    assert_eq!(messages_for(&third.until_pong().await, None), 0);
    for sequence_id in [3, 4] {
        let c = store_keyed(&mut producer, sequence_id, "c").await;
        assert_eq!(entry_of(&first.expect(Type::Message).await), c);
    }
    assert_eq!(
        messages_for(&third.until_pong().await, None),
        0,
        "key d's second entry while its first is unacknowledged on the second consumer"
    );
    let id = held.command.message.expect("a MESSAGE").message_id;
    second.ack(vec![id]).await;
    assert_eq!(entry_of(&third.expect(Type::Message).await), d1);
}
