//! One client connection: reads frames, answers each command, and routes sends to producers and
//! acks, flow and seeks to subscriptions.
//!
//! Owns the connection's producers and consumers (by the ids the client gave them). Commands
//! are handled one at a time in the order they arrive, so an ack is applied to its cursor before
//! any later command of the same connection (a `CLOSE_CONSUMER` answered means every ack sent
//! before it is in the cursor). A frame that does not parse, or a command that lacks its body,
//! closes this connection only: it reaches no cursor or topic, and other connections never see
//! it.

use std::collections::HashMap;
use std::sync::Arc;

use ackstore::{AppendMeta, InitialPosition, MAX_BATCH_SIZE};
use futures::{SinkExt, StreamExt};
use prost::Message as _;
use pulsar::message::Message;
use pulsar::proto::{self, BaseCommand, ServerError, base_command::Type};
use tokio::net::TcpStream;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::broker::{Broker, Start};
use crate::frame::{BrokerCodec, MAX_MESSAGE_SIZE};
use crate::ids::{Target, target};
use crate::producer::{Producer, Send};
use crate::subscription::{Backlog, Kind, SeekTo, Subscription, backlog_size};

/// The newest protocol version this broker speaks (that of the `pulsar` crate's protocol file).
const PROTOCOL_VERSION: i32 = 19;

/// A consumer of this connection.
struct Consumer {
    key: u64,
    topic: String,
    sub: Arc<Subscription>,
}

impl Consumer {
    /// Leaves the subscription; a reader's subscription ends with its consumer.
    fn detach(&self) {
        if !self.sub.detach(self.key) && self.sub.reader {
            self.sub.close();
        }
    }
}

/// Why a connection ends.
type Fatal = String;

struct Connection {
    broker: Arc<Broker>,
    out: UnboundedSender<Message>,
    /// What `out` holds unwritten of the messages dispatched to this connection's consumers.
    backlog: Arc<Backlog>,
    connected: bool,
    producers: HashMap<u64, Producer>,
    consumers: HashMap<u64, Consumer>,
    /// Where a seek left the cursor of a reader whose subscription it ended (the entry after
    /// this one), by topic and subscription name: the reader's next `SUBSCRIBE` (which names no
    /// start after a seek by time) reads on from there, as a Pulsar broker keeps a non-durable
    /// subscription across a seek. Only a position: a reader its client closed meanwhile
    /// subscribes no more.
    sought: HashMap<(String, String), InitialPosition>,
}

/// Serves one client until it disconnects or sends a bad frame.
pub async fn serve(broker: Arc<Broker>, stream: TcpStream) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string());
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let mut input = FramedRead::new(rd, BrokerCodec::new());
    let (out, mut outbound) = unbounded_channel::<Message>();
    let backlog = Arc::new(Backlog::default());
    let drained = backlog.clone();
    let writer = tokio::spawn(async move {
        let mut sink = FramedWrite::new(wr, BrokerCodec::new());
        while let Some(m) = outbound.recv().await {
            // Send what is queued in one write, then flush; what was written leaves the
            // backlog.
            let mut written = 0;
            let mut next = Some(m);
            while let Some(m) = next {
                written += backlog_size(&m);
                if sink.feed(m).await.is_err() {
                    return;
                }
                next = outbound.try_recv().ok();
            }
            if sink.flush().await.is_err() {
                return;
            }
            drained.written(written);
        }
    });
    let mut conn = Connection {
        broker,
        out,
        backlog,
        connected: false,
        producers: HashMap::new(),
        consumers: HashMap::new(),
        sought: HashMap::new(),
    };
    while let Some(frame) = input.next().await {
        let outcome = match frame {
            Ok(m) => tokio::task::block_in_place(|| conn.handle(m)),
            Err(e) => Err(e.to_string()),
        };
        if let Err(why) = outcome {
            log::warn!("connection {peer}: closed: {why}");
            break;
        }
    }
    drop(input);
    conn.release();
    drop(conn);
    let _ = writer.await;
}

fn reply(command: BaseCommand) -> Message {
    crate::subscription::command(command)
}

fn error(request_id: u64, error: ServerError, message: String) -> Message {
    reply(BaseCommand {
        r#type: Type::Error as i32,
        error: Some(proto::CommandError {
            request_id,
            error: error as i32,
            message,
        }),
        ..Default::default()
    })
}

fn success(request_id: u64) -> Message {
    reply(BaseCommand {
        r#type: Type::Success as i32,
        success: Some(proto::CommandSuccess {
            request_id,
            schema: None,
        }),
        ..Default::default()
    })
}

/// The body of a command, or the end of the connection when the frame lacks it.
fn body<T>(part: Option<T>, what: &str) -> Result<T, Fatal> {
    part.ok_or_else(|| format!("{what} command without its body"))
}

impl Connection {
    fn send(&self, m: Message) {
        let _ = self.out.send(m);
    }

    /// Detaches every consumer and stops every producer of the connection.
    fn release(&mut self) {
        for (_, c) in self.consumers.drain() {
            c.detach();
        }
        self.producers.clear();
    }

    fn handle(&mut self, m: Message) -> Result<(), Fatal> {
        let Message { command, payload } = m;
        log::debug!("command {:?}", command);
        let kind = Type::try_from(command.r#type)
            .map_err(|_| format!("unknown command type {}", command.r#type))?;
        if !self.connected && kind != Type::Connect {
            return Err(format!("{kind:?} before CONNECT"));
        }
        match kind {
            Type::Connect => {
                let c = body(command.connect, "CONNECT")?;
                self.connected = true;
                let version = c.protocol_version.unwrap_or(0).clamp(0, PROTOCOL_VERSION);
                self.send(reply(BaseCommand {
                    r#type: Type::Connected as i32,
                    connected: Some(proto::CommandConnected {
                        server_version: concat!("ackstore-broker ", env!("CARGO_PKG_VERSION"))
                            .to_owned(),
                        protocol_version: Some(version),
                        max_message_size: Some(MAX_MESSAGE_SIZE as i32),
                    }),
                    ..Default::default()
                }));
            }
            Type::Ping => self.send(reply(BaseCommand {
                r#type: Type::Pong as i32,
                pong: Some(proto::CommandPong {}),
                ..Default::default()
            })),
            Type::Pong => {}
            Type::PartitionedMetadata => {
                let c = body(command.partition_metadata, "PARTITIONED_METADATA")?;
                self.send(reply(BaseCommand {
                    r#type: Type::PartitionedMetadataResponse as i32,
                    partition_metadata_response: Some(
                        proto::CommandPartitionedTopicMetadataResponse {
                            partitions: Some(0),
                            request_id: c.request_id,
                            response: Some(
                                proto::command_partitioned_topic_metadata_response::LookupType::Success
                                    as i32,
                            ),
                            ..Default::default()
                        },
                    ),
                    ..Default::default()
                }));
            }
            Type::Lookup => {
                let c = body(command.lookup_topic, "LOOKUP")?;
                self.send(reply(BaseCommand {
                    r#type: Type::LookupResponse as i32,
                    lookup_topic_response: Some(proto::CommandLookupTopicResponse {
                        broker_service_url: Some(self.broker.url.clone()),
                        response: Some(
                            proto::command_lookup_topic_response::LookupType::Connect as i32,
                        ),
                        request_id: c.request_id,
                        authoritative: Some(true),
                        proxy_through_service_url: Some(false),
                        ..Default::default()
                    }),
                    ..Default::default()
                }));
            }
            Type::GetSchema => {
                let c = body(command.get_schema, "GET_SCHEMA")?;
                self.send(reply(BaseCommand {
                    r#type: Type::GetSchemaResponse as i32,
                    get_schema_response: Some(proto::CommandGetSchemaResponse {
                        request_id: c.request_id,
                        error_code: Some(ServerError::TopicNotFound as i32),
                        error_message: Some("the topic has no schema".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }));
            }
            Type::GetTopicsOfNamespace => {
                let c = body(command.get_topics_of_namespace, "GET_TOPICS_OF_NAMESPACE")?;
                let topics = self.topics_of_namespace(&c);
                self.send(reply(BaseCommand {
                    r#type: Type::GetTopicsOfNamespaceResponse as i32,
                    get_topics_of_namespace_response: Some(
                        proto::CommandGetTopicsOfNamespaceResponse {
                            request_id: c.request_id,
                            topics,
                            filtered: Some(false),
                            topics_hash: None,
                            changed: Some(true),
                        },
                    ),
                    ..Default::default()
                }));
            }
            Type::Producer => self.producer(body(command.producer, "PRODUCER")?),
            Type::Send => {
                let c = body(command.send, "SEND")?;
                let payload = body(payload, "SEND payload of")?;
                let Some(producer) = self.producers.get(&c.producer_id) else {
                    return Err(format!("SEND for unknown producer {}", c.producer_id));
                };
                let num_messages = payload
                    .metadata
                    .num_messages_in_batch
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(1)
                    .max(1);
                // A batch no cursor could acknowledge message by message is not stored: every
                // count a subscription derives from an entry stays within this bound.
                if num_messages > MAX_BATCH_SIZE {
                    return Err(format!(
                        "SEND of a batch of {num_messages} messages (at most {MAX_BATCH_SIZE})"
                    ));
                }
                let meta = AppendMeta {
                    num_messages,
                    timestamp: payload.metadata.publish_time,
                };
                let metadata = payload.metadata.encode_to_vec();
                if !producer.send(Send::new(&c, &metadata, &payload.data, meta)) {
                    return Err(format!("producer {} stopped", c.producer_id));
                }
            }
            Type::CloseProducer => {
                let c = body(command.close_producer, "CLOSE_PRODUCER")?;
                self.producers.remove(&c.producer_id);
                self.send(success(c.request_id));
            }
            Type::Subscribe => self.subscribe(body(command.subscribe, "SUBSCRIBE")?),
            Type::Flow => {
                let c = body(command.flow, "FLOW")?;
                if let Some(consumer) = self.consumers.get(&c.consumer_id) {
                    consumer.sub.flow(consumer.key, c.message_permits);
                }
            }
            Type::Ack => {
                let c = body(command.ack, "ACK")?;
                if let Some(consumer) = self.consumers.get(&c.consumer_id) {
                    consumer.sub.ack(consumer.key, &c);
                }
                if let Some(request_id) = c.request_id {
                    self.send(reply(BaseCommand {
                        r#type: Type::AckResponse as i32,
                        ack_response: Some(proto::CommandAckResponse {
                            consumer_id: c.consumer_id,
                            request_id: Some(request_id),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }));
                }
            }
            Type::RedeliverUnacknowledgedMessages => {
                let c = body(
                    command.redeliver_unacknowledged_messages,
                    "REDELIVER_UNACKNOWLEDGED_MESSAGES",
                )?;
                if let Some(consumer) = self.consumers.get(&c.consumer_id) {
                    consumer
                        .sub
                        .redeliver(consumer.key, &c.message_ids, c.consumer_epoch);
                }
            }
            Type::Seek => {
                let c = body(command.seek, "SEEK")?;
                let to = match (&c.message_id, c.message_publish_time) {
                    (Some(id), _) => Some(SeekTo::Id(target(id))),
                    (None, Some(t)) => Some(SeekTo::Time(t)),
                    (None, None) => None,
                };
                let answer = match (self.consumers.get(&c.consumer_id), to) {
                    (None, _) => error(
                        c.request_id,
                        ServerError::ConsumerNotFound,
                        format!("no consumer {}", c.consumer_id),
                    ),
                    (Some(_), None) => error(
                        c.request_id,
                        ServerError::MetadataError,
                        "SEEK names neither a message id nor a publish time".into(),
                    ),
                    (Some(consumer), Some(to)) => {
                        // The subscription closes its consumers on the client side after the
                        // answer; the client subscribes again.
                        let (tx, sub) = (self.out.clone(), consumer.sub.clone());
                        match sub.seek_then(to, || {
                            let _ = tx.send(success(c.request_id));
                        }) {
                            Ok(resume) => {
                                if let Some(consumer) = self.consumers.remove(&c.consumer_id)
                                    && let Some(at) = resume
                                {
                                    self.sought.insert((consumer.topic, sub.name.clone()), at);
                                }
                                return Ok(());
                            }
                            Err(e) => error(c.request_id, ServerError::UnknownError, e.to_string()),
                        }
                    }
                };
                self.send(answer);
            }
            Type::GetLastMessageId => {
                let c = body(command.get_last_message_id, "GET_LAST_MESSAGE_ID")?;
                let answer = match self.consumers.get(&c.consumer_id) {
                    None => error(
                        c.request_id,
                        ServerError::ConsumerNotFound,
                        format!("no consumer {}", c.consumer_id),
                    ),
                    Some(consumer) => match consumer.sub.last_message_id() {
                        Ok((last, mark)) => reply(BaseCommand {
                            r#type: Type::GetLastMessageIdResponse as i32,
                            get_last_message_id_response: Some(
                                proto::CommandGetLastMessageIdResponse {
                                    last_message_id: last,
                                    request_id: c.request_id,
                                    consumer_mark_delete_position: mark,
                                },
                            ),
                            ..Default::default()
                        }),
                        Err(e) => error(c.request_id, ServerError::UnknownError, e.to_string()),
                    },
                };
                self.send(answer);
            }
            Type::Unsubscribe => {
                let c = body(command.unsubscribe, "UNSUBSCRIBE")?;
                let answer = match self.consumers.get(&c.consumer_id) {
                    None => error(
                        c.request_id,
                        ServerError::ConsumerNotFound,
                        format!("no consumer {}", c.consumer_id),
                    ),
                    Some(consumer) => match consumer.sub.unsubscribe(consumer.key) {
                        Ok(()) => {
                            if !consumer.sub.reader {
                                self.broker.forget(&consumer.topic, &consumer.sub.name);
                            }
                            self.consumers.remove(&c.consumer_id);
                            success(c.request_id)
                        }
                        Err(e) => error(c.request_id, ServerError::MetadataError, e),
                    },
                };
                self.send(answer);
            }
            Type::CloseConsumer => {
                let c = body(command.close_consumer, "CLOSE_CONSUMER")?;
                if let Some(consumer) = self.consumers.remove(&c.consumer_id) {
                    consumer.detach();
                }
                self.send(success(c.request_id));
            }
            other => {
                let request_id = request_id(&command);
                log::info!("unsupported command {other:?}");
                match request_id {
                    Some(id) => self.send(error(
                        id,
                        ServerError::NotAllowedError,
                        format!("{other:?} is not supported by this broker"),
                    )),
                    None => return Err(format!("unsupported command {other:?}")),
                }
            }
        }
        Ok(())
    }

    /// The store's topics of a namespace (`tenant/namespace`) of the kinds `c` asks for, by
    /// their full names; the client matches them against its pattern (a regex subscription).
    fn topics_of_namespace(&self, c: &proto::CommandGetTopicsOfNamespace) -> Vec<String> {
        use proto::command_get_topics_of_namespace::Mode;
        let ns = &c.namespace;
        let prefixes = match c.mode() {
            Mode::Persistent => vec![format!("persistent://{ns}/")],
            Mode::NonPersistent => vec![format!("non-persistent://{ns}/")],
            Mode::All => vec![
                format!("persistent://{ns}/"),
                format!("non-persistent://{ns}/"),
            ],
        };
        self.broker
            .store
            .topic_names()
            .into_iter()
            .filter(|t| {
                prefixes.iter().any(|p| {
                    t.strip_prefix(p.as_str())
                        .is_some_and(|local| !local.is_empty() && !local.contains('/'))
                })
            })
            .collect()
    }

    fn producer(&mut self, c: proto::CommandProducer) {
        // The producer's initial subscription (a client's dead-letter producer names its
        // policy's), made before the producer is answered.
        if let Some(name) = c.initial_subscription_name.as_deref()
            && let Err(e) = self.broker.initial_subscription(&c.topic, name)
        {
            self.send(error(c.request_id, ServerError::ServiceNotReady, e));
            return;
        }
        let answer = match self.broker.topic(&c.topic) {
            Err(e) => error(c.request_id, ServerError::ServiceNotReady, e),
            Ok(topic) => match Producer::start(c.producer_id, topic, self.out.clone()) {
                Err(e) => error(c.request_id, ServerError::ServiceNotReady, e.to_string()),
                Ok(p) => {
                    self.producers.insert(c.producer_id, p);
                    let name = c.producer_name.clone().unwrap_or_else(|| {
                        format!("ackstore-{}-{}", std::process::id(), self.broker.next_key())
                    });
                    reply(BaseCommand {
                        r#type: Type::ProducerSuccess as i32,
                        producer_success: Some(proto::CommandProducerSuccess {
                            request_id: c.request_id,
                            producer_name: name,
                            last_sequence_id: Some(-1),
                            producer_ready: Some(true),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                }
            },
        };
        self.send(answer);
    }

    fn subscribe(&mut self, c: proto::CommandSubscribe) {
        // A consumer id subscribing again (after the broker closed it) replaces its old self.
        if let Some(old) = self.consumers.remove(&c.consumer_id) {
            old.detach();
        }
        let kind = Kind::from_proto(c.sub_type());
        let meta = c.key_shared_meta.as_ref();
        if kind == Kind::KeyShared
            && meta.is_some_and(|m| m.key_shared_mode() == proto::KeySharedMode::Sticky)
        {
            self.send(error(
                c.request_id,
                ServerError::NotAllowedError,
                "Key_Shared subscriptions in STICKY mode (fixed hash ranges) are not supported \
                 by this broker; AUTO_SPLIT is"
                    .into(),
            ));
            return;
        }
        let in_order = !meta.is_some_and(|m| m.allow_out_of_order_delivery());
        let initial = match c.initial_position() {
            proto::command_subscribe::InitialPosition::Latest => InitialPosition::Latest,
            proto::command_subscribe::InitialPosition::Earliest => InitialPosition::Earliest,
        };
        let opened = if c.durable() {
            self.broker.durable(
                &c.topic,
                &c.subscription,
                kind,
                Start {
                    position: initial,
                    inclusive: false,
                },
            )
        } else {
            let sought = self
                .sought
                .remove(&(c.topic.clone(), c.subscription.clone()));
            let start = match (sought, c.start_message_id.as_ref().map(target)) {
                // Where a seek of this reader left its cursor.
                (Some(position), _) => Start {
                    position,
                    inclusive: false,
                },
                (None, None) => Start {
                    position: initial,
                    inclusive: false,
                },
                (None, Some(Target::Earliest)) => Start {
                    position: InitialPosition::Earliest,
                    inclusive: false,
                },
                (None, Some(Target::Latest)) => Start {
                    position: InitialPosition::Latest,
                    inclusive: false,
                },
                // As a Pulsar broker: reading starts at the entry the id names; the client
                // discards what comes before its start id, and the start message itself
                // unless the reader is `startMessageIdInclusive`.
                (None, Some(Target::At(pos, _))) => Start {
                    position: InitialPosition::At(pos),
                    inclusive: true,
                },
            };
            self.broker
                .reader(&c.topic, &c.subscription, start)
                .map_err(|e| (ServerError::ServiceNotReady, e))
        };
        let sub = match opened {
            Ok(sub) => sub,
            Err((code, e)) => {
                self.send(error(c.request_id, code, e));
                return;
            }
        };
        let key = self.broker.next_key();
        match sub.attach(
            key,
            c.consumer_id,
            &self.out,
            &self.backlog,
            in_order,
            success(c.request_id),
        ) {
            Ok(()) => {
                self.backlog.watch(&sub);
                self.consumers.insert(
                    c.consumer_id,
                    Consumer {
                        key,
                        topic: c.topic.clone(),
                        sub,
                    },
                );
            }
            Err(e) => {
                if sub.reader {
                    sub.close();
                }
                self.send(error(c.request_id, ServerError::ConsumerBusy, e));
            }
        }
    }
}

/// The request id of a command that carries one.
fn request_id(c: &BaseCommand) -> Option<u64> {
    c.consumer_stats.as_ref().map(|x| x.request_id)
}
