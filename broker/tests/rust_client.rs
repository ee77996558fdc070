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
