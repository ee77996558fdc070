//! A producer: the thread that appends its `SEND`s to the topic in order and answers each with
//! a receipt once the entry is durable.
//!
//! Owns the producer's queue of sends. Invariant: a `SEND_RECEIPT` leaves only after a
//! `ManagedLedger::sync` that returned `Ok` covers the entry, so a receipt the client saw
//! survives a SIGKILL or a power cut. Sends that queued up while a sync ran share the next
//! one (group commit); receipts go out in the order of the sends, as clients require.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

use ackstore::{AppendMeta, ManagedLedger};
use pulsar::message::Message;
use pulsar::proto::{self, BaseCommand, base_command::Type};
use tokio::sync::mpsc::UnboundedSender;

use crate::ids::{encode_entry, message_id};

/// One `SEND`: a batch (or a single message) that becomes one entry.
pub struct Send {
    /// The client's sequence id of the batch's first message.
    pub sequence_id: u64,
    /// The sequence id of its last message.
    pub highest_sequence_id: u64,
    /// The entry's bytes (see [`crate::ids::StoredEntry`]).
    pub entry: Vec<u8>,
    /// Messages in the batch and publish time.
    pub meta: AppendMeta,
}

impl Send {
    /// A send from its command fields and payload parts.
    pub fn new(
        cmd: &proto::CommandSend,
        metadata: &[u8],
        payload: &[u8],
        meta: AppendMeta,
    ) -> Self {
        Self {
            sequence_id: cmd.sequence_id,
            highest_sequence_id: cmd.highest_sequence_id.unwrap_or(0).max(cmd.sequence_id),
            entry: encode_entry(metadata, payload),
            meta,
        }
    }
}

/// The sends one sync covers at most: a bound on what a receipt waits for.
const GROUP: usize = 1024;

/// The producer's side in a connection: dropping it ends the thread once its queue is done.
pub struct Producer {
    sends: Sender<Send>,
}

impl Producer {
    /// Starts producer `producer_id` of a connection on `topic`; its receipts and errors go to
    /// `out`.
    pub fn start(
        producer_id: u64,
        topic: Arc<ManagedLedger>,
        out: UnboundedSender<Message>,
    ) -> std::io::Result<Self> {
        let (sends, queue) = channel();
        std::thread::Builder::new()
            .name(format!("producer-{producer_id}"))
            .spawn(move || run(producer_id, &topic, &queue, &out))?;
        Ok(Self { sends })
    }

    /// Queues a send; `false` when the producer's thread is gone.
    pub fn send(&self, send: Send) -> bool {
        self.sends.send(send).is_ok()
    }
}

fn run(
    producer_id: u64,
    topic: &ManagedLedger,
    queue: &Receiver<Send>,
    out: &UnboundedSender<Message>,
) {
    while let Ok(first) = queue.recv() {
        let mut group = vec![first];
        while group.len() < GROUP {
            match queue.try_recv() {
                Ok(s) => group.push(s),
                Err(_) => break,
            }
        }
        let appended: Vec<_> = group
            .iter()
            .map(|s| topic.append_with(&s.entry, s.meta))
            .collect();
        let synced = topic.sync();
        for (send, result) in group.iter().zip(appended) {
            let stored = match (result, &synced) {
                (Ok(pos), Ok(())) => Ok(pos),
                (Err(e), _) => Err(e.to_string()),
                (Ok(_), Err(e)) => Err(e.to_string()),
            };
            let reply = match stored {
                Ok(pos) => BaseCommand {
                    r#type: Type::SendReceipt as i32,
                    send_receipt: Some(proto::CommandSendReceipt {
                        producer_id,
                        sequence_id: send.sequence_id,
                        message_id: Some(message_id(pos, None)),
                        highest_sequence_id: Some(send.highest_sequence_id),
                    }),
                    ..Default::default()
                },
                Err(e) => {
                    log::warn!(
                        "producer {producer_id}: send {} failed: {e}",
                        send.sequence_id
                    );
                    BaseCommand {
                        r#type: Type::SendError as i32,
                        send_error: Some(proto::CommandSendError {
                            producer_id,
                            sequence_id: send.sequence_id,
                            error: proto::ServerError::PersistenceError as i32,
                            message: e,
                        }),
                        ..Default::default()
                    }
                }
            };
            if out
                .send(Message {
                    command: reply,
                    payload: None,
                })
                .is_err()
            {
                return;
            }
        }
    }
}
