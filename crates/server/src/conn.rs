//! One client connection: decode commands, run them on the engine, write the replies in
//! order once what they report is durable.
//!
//! One task per connection. It executes every command it has bytes for, then waits for the
//! commits those replies depend on (tickets resolve in order) and writes all the replies in
//! one write: a pipelining client gets one write per read, and a request-response client costs
//! no hand-off between tasks. A client that never reads its replies blocks its own write, so
//! it stops being read from (its memory stays bounded) without slowing anyone else down.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tickwheel_proto::{yaml_list, Command, Counted, Decoder, ErrorReply, Frame, Reply};
use tickwheel_queue::{ClientId, Error, JobState, Load, Reserve};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use tickwheel_pg::Peek;
use tickwheel_store::Ticket;

use crate::cluster::active;
use crate::shared::{Pending, Refused, Shared};
use crate::stats;

/// Replies held back (waiting for their commits) before they are written anyway.
const MAX_HELD_REPLIES: usize = 64;

/// Store reads one command may ask for (a far job, or the next range of far jobs each time)
/// before it runs on what is in memory.
const MAX_LOADS: usize = 64;

/// Serves one connection, `client`, until the client quits or disconnects, or the server
/// shuts down. The caller has connected `client` to the engine (the accept loop does, in
/// accept order); this disconnects it at the end.
///
/// The socket comes in its two owned halves (`into_split`): each is the socket itself
/// behind an `Arc`, where `tokio::io::split` would take a lock on every read and write.
pub(crate) async fn serve<R, W>(
    shared: Arc<Shared>,
    client: ClientId,
    mut reader: R,
    mut writer: W,
    max_job_size: usize,
    shutdown: CancellationToken,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    // The connection's own node under the server's token: every read and `reserve` wait
    // polls `cancelled()`, which locks its token's node and registers with its `Notify`; on
    // the one token all connections share, that was a lock every request on every thread
    // took (ADR 0045). Cancelling the server's token cancels this one.
    let shutdown = shutdown.child_token();
    let mut replies = Replies {
        held: Vec::new(),
        out: BytesMut::with_capacity(256),
    };
    let outcome = read_commands(
        &shared,
        client,
        &mut reader,
        &mut writer,
        &mut replies,
        max_job_size,
        &shutdown,
    )
    .await;
    let outcome = match outcome {
        Ok(()) => replies.flush(&shared, &mut writer).await,
        Err(error) => Err(error),
    };
    if let Err(error) = outcome {
        tracing::debug!(client = client.0, %error, "connection closed with an error");
    }
    // Active-active: the database releases the client's jobs before the engine does, so a
    // reserve here that takes one of them claims a free row (released by the engine first,
    // the claim would race the release and could lose).
    if let Some(active) = shared.active.get() {
        active::disconnected(active, client).await;
    }
    let now = shared.now();
    shared.apply(|engine| engine.disconnect(now, client));
}

/// Replies executed but not yet written.
struct Replies {
    held: Vec<Pending>,
    out: BytesMut,
}

impl Replies {
    fn push(&mut self, ticket: Ticket, reply: Reply) {
        self.held.push((ticket, reply));
    }

    /// Waits for the commits of the held replies, in order, and writes them in one go.
    async fn flush<W: AsyncWrite + Unpin>(
        &mut self,
        shared: &Shared,
        writer: &mut W,
    ) -> std::io::Result<()> {
        for (ticket, reply) in self.held.drain(..) {
            shared.settle(&ticket, reply).await.encode(&mut self.out);
        }
        if !self.out.is_empty() {
            writer.write_all(&self.out).await?;
            self.out.clear();
            if self.out.capacity() > 64 * 1024 {
                self.out = BytesMut::with_capacity(256); // don't keep a big buffer per idle client
            }
        }
        Ok(())
    }
}

async fn read_commands<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    shared: &Arc<Shared>,
    client: ClientId,
    reader: &mut R,
    writer: &mut W,
    replies: &mut Replies,
    max_job_size: usize,
    shutdown: &CancellationToken,
) -> std::io::Result<()> {
    let mut decoder = Decoder::new(max_job_size);
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        while let Some(frame) = decoder.decode(&mut buf) {
            let command = match frame {
                Frame::Command(Command::Quit) => return Ok(()),
                Frame::Command(command) => command,
                Frame::Error(error) => {
                    replies.push(Ticket::done(), Reply::Error(error));
                    continue;
                }
                Frame::Counted(error, counted) => {
                    // Counted in stats, as beanstalkd counts a line it parsed before refusing.
                    shared.apply(|engine| match counted {
                        Counted::Put { body_came } => engine.count_failed_put(client, body_came),
                        Counted::PauseTube => engine.count_failed_pause_tube(),
                    });
                    replies.push(Ticket::done(), Reply::Error(error));
                    continue;
                }
            };
            if let Some(active) = shared.active.get() {
                if let Some(reply) = in_cluster(
                    shared, active, client, &command, reader, writer, replies, &mut buf, shutdown,
                )
                .await?
                {
                    replies.push(Ticket::done(), reply);
                    if replies.held.len() >= MAX_HELD_REPLIES {
                        replies.flush(shared, writer).await?;
                    }
                    continue;
                }
            }
            let (ticket, outcome) = execute_with_loads(shared, client, &command).await;
            match outcome {
                Outcome::Reply(reply) => replies.push(ticket, reply),
                Outcome::Load(_) => replies.push(ticket, Reply::InternalError),
                Outcome::Wait(events) => {
                    // Everything before the reserve is answered before the client blocks.
                    replies.flush(shared, writer).await?;
                    let reply =
                        wait_for_job(shared, client, events, reader, &mut buf, shutdown).await?;
                    replies.push(ticket, reply);
                }
            }
            if replies.held.len() >= MAX_HELD_REPLIES {
                replies.flush(shared, writer).await?;
            }
        }
        replies.flush(shared, writer).await?;
        tokio::select! {
            read = reader.read_buf(&mut buf) => {
                if read? == 0 {
                    return Ok(());
                }
            }
            () = shutdown.cancelled() => return Ok(()),
        }
    }
}

/// `stats-job` of a job reserved through another node, from its row: `left_ms` is its lease's
/// time left.
fn held_elsewhere(
    record: &tickwheel_queue::JobRecord,
    left_ms: u64,
    now: u64,
) -> tickwheel_queue::JobStats {
    let h = &record.history;
    tickwheel_queue::JobStats {
        id: record.id,
        tube: record.tube.clone(),
        state: JobState::Reserved,
        priority: record.priority,
        age: now.saturating_sub(record.created),
        delay: h.delay,
        ttr: record.ttr,
        time_left: left_ms,
        reserves: h.reserves,
        timeouts: h.timeouts,
        releases: h.releases,
        buries: h.buries,
        kicks: h.kicks,
    }
}

/// A command on a node serving beside others (active-active), where the database decides:
/// the reply, or `None` when the command runs as on one node. Reserves are claimed in the
/// database (a lost claim drops the job from the engine and the reserve runs again);
/// `delete`, `release`, `bury` and `touch` run there first, checked against the holder, and
/// then on the engine to keep its cache; `pause-tube` pauses the tube on every node too.
#[allow(clippy::too_many_arguments)]
async fn in_cluster<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    shared: &Arc<Shared>,
    active: &Arc<active::Active>,
    client: ClientId,
    command: &Command,
    reader: &mut R,
    writer: &mut W,
    replies: &mut Replies,
    buf: &mut BytesMut,
    shutdown: &CancellationToken,
) -> std::io::Result<Option<Reply>> {
    if let Command::ReserveJob(id) | Command::Peek(id) | Command::StatsJob(id) = command {
        // The job as the database has it, not as this node last heard of it. One held through
        // another node is answered from its row (this node's cache does not know it is
        // reserved); a `reserve-job` of it loses its claim below.
        if let Some((record, left_ms)) = active::refresh(shared, active, *id).await {
            match command {
                Command::Peek(_) => {
                    shared.apply(|engine| engine.count_peek_job());
                    return Ok(Some(Reply::Found(*id, record.body)));
                }
                Command::StatsJob(_) => {
                    bump(&shared.counters.stats_job);
                    let held = held_elsewhere(&record, left_ms, shared.now());
                    return Ok(Some(Reply::Ok(stats::job(&held))));
                }
                _ => {}
            }
        }
    }
    match command {
        Command::Reserve | Command::ReserveWithTimeout(_) | Command::ReserveJob(_) => {
            // Everything before the reserve is answered (and durable) before it may block.
            replies.flush(shared, writer).await?;
            let asked = std::time::Instant::now();
            let mut command = command.clone();
            loop {
                let (ticket, outcome) = execute_with_loads(shared, client, &command).await;
                let reply = match outcome {
                    Outcome::Reply(reply) => shared.settle(&ticket, reply).await,
                    Outcome::Load(_) => return Ok(Some(Reply::InternalError)),
                    Outcome::Wait(events) => {
                        // Other nodes' jobs left to them so far are claimed for this
                        // reserver now (claim on demand).
                        active.wake_claimer();
                        wait_for_job(shared, client, events, reader, buf, shutdown).await?
                    }
                };
                let Reply::Reserved(id, _) = &reply else {
                    return Ok(Some(reply));
                };
                let claimed = if matches!(command, Command::ReserveJob(_)) {
                    active::claim_job(shared, active, client, *id).await
                } else {
                    active::claim(shared, active, client, *id).await
                };
                match claimed {
                    Some(true) => return Ok(Some(reply)),
                    // Another node has it, or it is not due by the database clock: the engine
                    // dropped it; look again, for what is left of the timeout (whole seconds,
                    // rounded up: never shorter than asked).
                    Some(false) if !matches!(command, Command::ReserveJob(_)) => {
                        if let Command::ReserveWithTimeout(Some(secs)) = command {
                            let left = Duration::from_secs(u64::from(secs))
                                .saturating_sub(asked.elapsed());
                            let left =
                                u32::try_from(left.as_millis().div_ceil(1000)).unwrap_or(u32::MAX);
                            command = Command::ReserveWithTimeout(Some(left));
                        }
                    }
                    Some(false) => return Ok(Some(Reply::NotFound)),
                    None => return Ok(Some(Reply::InternalError)),
                }
            }
        }
        Command::Delete(_) | Command::Release { .. } | Command::Bury { .. } | Command::Touch(_) => {
            // Earlier writes of this very job (its put, say) are in the database before this
            // looks; other clients' commits in flight are not waited for.
            let id = match command {
                Command::Delete(id) | Command::Touch(id) => *id,
                Command::Release { id, .. } | Command::Bury { id, .. } => *id,
                _ => unreachable!("matched above"),
            };
            if shared
                .job_ticket(id, &shared.last_ticket())
                .durable()
                .await
                .is_err()
            {
                return Ok(Some(Reply::InternalError));
            }
            let reply = active::run_checked(active, client, command).await;
            if matches!(
                reply,
                Some(Reply::Deleted | Reply::Released | Reply::Buried | Reply::Touched)
            ) {
                // The cache follows; its answer does not count (the database's does). It
                // writes nothing more: the database's statement wrote the row. Written again
                // through the group commit, a release or bury could land after another node
                // took the job and released it with a delay or buried it, and undo that.
                let (now, past_the_ms) = shared.clock_reading();
                let (_, followed) = shared.apply(|engine| match *command {
                    Command::Delete(id) => engine.delete_stored(now, client, id),
                    Command::Release {
                        id,
                        priority,
                        delay,
                    } => engine.release_stored(
                        now,
                        client,
                        id,
                        priority,
                        protocol_ms(delay, past_the_ms),
                    ),
                    Command::Bury { id, priority } => engine.bury_stored(now, client, id, priority),
                    Command::Touch(id) => engine.touch(now, client, id),
                    _ => unreachable!("matched above"),
                });
                if followed.is_ok() && !matches!(command, Command::Touch(_)) {
                    shared.count_record_written();
                }
            }
            Ok(reply)
        }
        Command::Stats => {
            // As `stats-tube`: the job counts are the cluster's, the rest this node's.
            bump(&shared.counters.stats);
            let now = shared.now();
            let (_, mut stats) = shared.apply(|engine| engine.stats_at(now));
            let Some(counts) = active::all_counts(active).await else {
                return Ok(Some(Reply::InternalError));
            };
            stats.urgent = counts.urgent;
            stats.ready = counts.ready;
            stats.reserved = counts.reserved;
            stats.delayed = counts.delayed;
            stats.buried = counts.buried;
            Ok(Some(Reply::Ok(stats::server(shared, &stats))))
        }
        Command::StatsTube(tube) => {
            // The job counts are the cluster's (the database's, by its clock); the rest
            // (clients, command counters) this node's.
            bump(&shared.counters.stats_tube);
            let now = shared.now();
            let (_, local) = shared.apply(|engine| engine.stats_tube(now, tube));
            let Some(counts) = active::tube_counts(active, tube.as_str()).await else {
                return Ok(Some(Reply::InternalError));
            };
            let jobs = counts.ready + counts.reserved + counts.delayed + counts.buried;
            let mut stats = match local {
                Some(stats) => stats,
                None if jobs == 0 => return Ok(Some(Reply::NotFound)),
                None => tickwheel_queue::TubeStats {
                    name: tube.clone(),
                    urgent: 0,
                    ready: 0,
                    reserved: 0,
                    delayed: 0,
                    buried: 0,
                    total_jobs: 0,
                    using: 0,
                    waiting: 0,
                    watching: 0,
                    pause: 0,
                    cmd_delete: 0,
                    cmd_pause_tube: 0,
                    pause_time_left: 0,
                    reserves: 0,
                    timeouts: 0,
                },
            };
            stats.urgent = counts.urgent;
            stats.ready = counts.ready;
            stats.reserved = counts.reserved;
            stats.delayed = counts.delayed;
            stats.buried = counts.buried;
            Ok(Some(Reply::Ok(stats::tube(&stats))))
        }
        Command::Kick(_)
        | Command::KickJob(_)
        | Command::PeekReady
        | Command::PeekDelayed
        | Command::PeekBuried => {
            // Cluster-wide, in the database; this client's earlier writes (a delayed put,
            // say) are there before it looks.
            if shared.last_ticket().durable().await.is_err() {
                return Ok(Some(Reply::InternalError));
            }
            let tube = shared.read(|engine| engine.used_tube(client).cloned());
            let Some(tube) = tube else {
                return Ok(Some(Reply::NotFound));
            };
            let reply = match *command {
                Command::Kick(bound) => active::kick(shared, active, tube.as_str(), bound)
                    .await
                    .map(Reply::Kicked),
                Command::KickJob(id) => active::kick_job(shared, active, id).await.map(|kicked| {
                    if kicked {
                        Reply::KickedJob
                    } else {
                        Reply::NotFound
                    }
                }),
                _ => {
                    let (which, state) = match command {
                        Command::PeekReady => (Peek::Ready, JobState::Ready),
                        Command::PeekDelayed => (Peek::Delayed, JobState::Delayed),
                        _ => (Peek::Buried, JobState::Buried),
                    };
                    shared.apply(|engine| engine.count_peek(state));
                    active::peek(active, which, tube.as_str())
                        .await
                        .map(|found| match found {
                            Some((id, body)) => Reply::Found(id, body.into()),
                            None => Reply::NotFound,
                        })
                }
            };
            Ok(Some(reply.unwrap_or(Reply::InternalError)))
        }
        Command::PauseTube(tube, delay) => {
            if active::pause(active, tube.as_str(), *delay).await {
                Ok(None)
            } else {
                Ok(Some(Reply::InternalError))
            }
        }
        _ => Ok(None),
    }
}

/// Runs a command; when the engine answers that it needs jobs from the store first
/// ([`Load`]), reads them and runs the command again. The server knows nothing of the engine's
/// memory window: it only carries out the loads the engine asks for.
async fn execute_with_loads(
    shared: &Shared,
    client: ClientId,
    command: &Command,
) -> (Ticket, Outcome) {
    for attempt in 0.. {
        let (ticket, outcome) = execute(shared, client, command.clone());
        let Outcome::Load(load) = outcome else {
            return (ticket, outcome);
        };
        if attempt < MAX_LOADS {
            if let Err(error) = shared.load(load).await {
                tracing::error!(%error, "cannot read jobs from the store");
                return (Ticket::done(), Outcome::Reply(Reply::InternalError));
            }
        } else if attempt < MAX_LOADS + 4 {
            // No progress (the load keeps being overtaken): run on what is in memory.
            shared.apply(|engine| engine.skip_load(load));
        } else {
            tracing::error!(?load, "a command kept asking for the same store read");
            return (Ticket::done(), Outcome::Reply(Reply::InternalError));
        }
    }
    unreachable!("the loop returns")
}

/// What a command leads to.
enum Outcome {
    Reply(Reply),
    /// The client waits in `reserve`; its answer will come on this channel.
    Wait(mpsc::Receiver<Pending>),
    /// Nothing was done: the engine needs this read from the store first.
    Load(Load),
}

/// Blocks the connection in `reserve` until the engine answers it, the client hangs up
/// (`TIMED_OUT`, as beanstalkd answers a half-closed connection) or the server stops.
async fn wait_for_job<R: AsyncRead + Unpin>(
    shared: &Arc<Shared>,
    client: ClientId,
    mut rx: mpsc::Receiver<Pending>,
    reader: &mut R,
    buf: &mut BytesMut,
    shutdown: &CancellationToken,
) -> std::io::Result<Reply> {
    let answer = loop {
        tokio::select! {
            event = rx.recv() => break event,
            read = reader.read_buf(buf), if buf.len() < 64 * 1024 => {
                if read? == 0 {
                    // Half-closed: stop waiting.
                    break None;
                }
                // Pipelined commands wait in the buffer until the reserve is answered.
            }
            () = shutdown.cancelled() => break None,
        }
    };
    shared
        .waiters
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&client);
    match answer {
        Some((ticket, reply)) => Ok(shared.settle(&ticket, reply).await),
        None => Ok(Reply::TimedOut),
    }
}

/// Runs one command on the engine (under its lock) and returns the reply and the ticket it
/// waits for.
fn execute(shared: &Shared, client: ClientId, command: Command) -> (Ticket, Outcome) {
    if let Some(bytes) = write_bytes(&command, shared.write_reserve_job) {
        if let Err(refused) = shared.admit(bytes) {
            // beanstalkd answers a put its full disk cannot hold with OUT_OF_MEMORY.
            let reply = match (refused, &command) {
                (Refused::LowSpace, Command::Put { .. }) => Reply::OutOfMemory,
                _ => Reply::InternalError,
            };
            return (Ticket::done(), Outcome::Reply(reply));
        }
    }
    let (now, past_the_ms) = shared.clock_reading();
    let secs = |seconds: u32| protocol_ms(seconds, past_the_ms);
    let (ticket, outcome) = shared.apply(|engine| run(shared, engine, client, command, now, secs));
    match &outcome {
        // A reservation is not durable: the reply waits only for its job's own changes.
        Outcome::Reply(Reply::Reserved(id, _)) => (shared.job_ticket(*id, &ticket), outcome),
        _ => (ticket, outcome),
    }
}

/// A delay from the protocol, in ms, rounded so that the deadline it makes is never before
/// the true time plus the delay: one ms more when the clock reading that goes with it was
/// past its whole ms (`past_the_ms`, from [`Shared::clock_reading`]). (A TTR needs no
/// rounding: the engine ends a lease strictly after its deadline.)
fn protocol_ms(seconds: u32, past_the_ms: bool) -> u64 {
    match seconds {
        0 => 0,
        s => u64::from(s) * 1000 + u64::from(past_the_ms),
    }
}

/// The engine part of [`execute`], under the engine lock.
fn run(
    shared: &Shared,
    engine: &mut tickwheel_queue::Engine,
    client: ClientId,
    command: Command,
    now: u64,
    secs: impl Fn(u32) -> u64,
) -> Outcome {
    use Outcome::Reply as R;
    let not_found = |r: Result<(), Error>, ok: Reply| answer(r.map(|()| ok));
    match command {
        Command::Put {
            priority,
            delay,
            ttr,
            body,
        } => R(
            match engine.put(
                now,
                client,
                priority,
                secs(delay),
                u64::from(ttr) * 1000,
                body,
            ) {
                Ok(id) => Reply::Inserted(id),
                Err(Error::Draining) => Reply::Draining,
                Err(Error::JobTooBig) => Reply::Error(ErrorReply::JobTooBig),
                Err(_) => Reply::InternalError,
            },
        ),
        Command::Use(tube) => {
            engine.use_tube(now, client, &tube);
            R(Reply::Using(tube))
        }
        Command::Reserve => reserve(shared, engine, now, client, None),
        Command::ReserveWithTimeout(timeout) => {
            shared
                .counters
                .reserve_with_timeout
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            reserve(shared, engine, now, client, timeout.map(secs))
        }
        Command::ReserveJob(id) => answer(
            engine
                .reserve_job(now, client, id)
                .map(|job| Reply::Reserved(job.id, job.body)),
        ),
        Command::Delete(id) => not_found(engine.delete(now, client, id), Reply::Deleted),
        Command::Release {
            id,
            priority,
            delay,
        } => not_found(
            engine.release(now, client, id, priority, secs(delay)),
            Reply::Released,
        ),
        Command::Bury { id, priority } => {
            not_found(engine.bury(now, client, id, priority), Reply::Buried)
        }
        Command::Touch(id) => not_found(engine.touch(now, client, id), Reply::Touched),
        Command::Watch(tube) => R(Reply::Watching(engine.watch(now, client, &tube))),
        Command::Ignore(tube) => R(match engine.ignore(now, client, &tube) {
            Ok(n) => Reply::Watching(n),
            Err(_) => Reply::NotIgnored,
        }),
        Command::Peek(id) => found(engine.peek(now, id)),
        Command::PeekReady => found(engine.peek_state(now, client, JobState::Ready)),
        Command::PeekDelayed => found(engine.peek_state(now, client, JobState::Delayed)),
        Command::PeekBuried => found(engine.peek_state(now, client, JobState::Buried)),
        Command::Kick(bound) => answer(engine.kick(now, client, bound).map(Reply::Kicked)),
        Command::KickJob(id) => not_found(engine.kick_job(now, id), Reply::KickedJob),
        Command::StatsJob(id) => {
            let outcome = answer(engine.stats_job(now, id).map(|s| Reply::Ok(stats::job(&s))));
            if !matches!(outcome, Outcome::Load(_)) {
                bump(&shared.counters.stats_job);
            }
            outcome
        }
        Command::StatsTube(tube) => {
            bump(&shared.counters.stats_tube);
            R(engine
                .stats_tube(now, &tube)
                .map_or(Reply::NotFound, |s| Reply::Ok(stats::tube(&s))))
        }
        Command::Stats => {
            bump(&shared.counters.stats);
            R(Reply::Ok(stats::server(shared, &engine.stats_at(now))))
        }
        Command::ListTubes => {
            bump(&shared.counters.list_tubes);
            let names = engine.tube_names();
            R(Reply::Ok(yaml_list(names.iter().map(|t| t.as_str()))))
        }
        Command::ListTubeUsed => {
            bump(&shared.counters.list_tube_used);
            R(engine
                .used_tube(client)
                .map_or(Reply::InternalError, |t| Reply::Using(t.clone())))
        }
        Command::ListTubesWatched => {
            bump(&shared.counters.list_tubes_watched);
            let names = engine.watched_tubes(client);
            R(Reply::Ok(yaml_list(names.iter().map(|t| t.as_str()))))
        }
        Command::PauseTube(tube, delay) => {
            not_found(engine.pause_tube(now, &tube, secs(delay)), Reply::Paused)
        }
        Command::Quit => R(Reply::InternalError), // handled by the reader
    }
}

/// For a command that may make durable changes ([`tickwheel_queue::Change`]s), about how many
/// bytes it writes; `None` for one that never does. The server asks the store whether it
/// takes that much ([`Shared::writable`]) before the command may touch the engine.
///
/// Durable: `put` (the job, and now and then a block of ids), `delete`, `release`, `bury`,
/// `kick`, `kick-job`, and, where the engine writes it (`write_reserve_job`, nodes serving
/// side by side), `reserve-job` (of a delayed or buried job: it becomes ready; it is checked
/// whatever the job's state, as the state is known only under the engine lock). Not durable:
/// `reserve` and otherwise `reserve-job` (a reservation is not stored, a lease dies with the
/// server), `touch` and `pause-tube` (leases and pauses are not stored), and every read. An
/// update rewrites the job's record with its body, which the estimate does not know; the
/// reserve covers that.
fn write_bytes(command: &Command, write_reserve_job: bool) -> Option<u64> {
    /// Keys, index entries and framing of one change, rounded up (as the store's estimate).
    const SMALL: u64 = 256;
    match command {
        Command::Put { body, .. } => Some(SMALL + body.len() as u64),
        Command::Delete(_)
        | Command::Release { .. }
        | Command::Bury { .. }
        | Command::Kick(_)
        | Command::KickJob(_) => Some(SMALL),
        Command::ReserveJob(_) => write_reserve_job.then_some(SMALL),
        Command::Use(_)
        | Command::Reserve
        | Command::ReserveWithTimeout(_)
        | Command::Touch(_)
        | Command::Watch(_)
        | Command::Ignore(_)
        | Command::Peek(_)
        | Command::PeekReady
        | Command::PeekDelayed
        | Command::PeekBuried
        | Command::StatsJob(_)
        | Command::StatsTube(_)
        | Command::Stats
        | Command::ListTubes
        | Command::ListTubeUsed
        | Command::ListTubesWatched
        | Command::PauseTube(..)
        | Command::Quit => None,
    }
}

fn reserve(
    shared: &Shared,
    engine: &mut tickwheel_queue::Engine,
    now: u64,
    client: ClientId,
    timeout: Option<u64>,
) -> Outcome {
    match engine.reserve(now, client, timeout) {
        Reserve::Job(job) => Outcome::Reply(Reply::Reserved(job.id, job.body)),
        Reserve::DeadlineSoon => Outcome::Reply(Reply::DeadlineSoon),
        Reserve::TimedOut => Outcome::Reply(Reply::TimedOut),
        Reserve::Waiting => {
            // Registered before the engine lock is released, so no answer can be missed.
            let (tx, rx) = mpsc::channel::<Pending>(1);
            shared
                .waiters
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(client, tx);
            Outcome::Wait(rx)
        }
    }
}

/// The outcome of an engine result: the reply, `NOT_FOUND` for any refusal, or the load the
/// engine asks for.
fn answer(r: Result<Reply, Error>) -> Outcome {
    match r {
        Ok(reply) => Outcome::Reply(reply),
        Err(Error::NeedsLoad(load)) => Outcome::Load(load),
        Err(_) => Outcome::Reply(Reply::NotFound),
    }
}

fn found(job: Result<tickwheel_queue::JobView, Error>) -> Outcome {
    answer(job.map(|j| Reply::Found(j.id, j.body)))
}

fn bump(counter: &std::sync::atomic::AtomicU64) {
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use bytes::BytesMut;
    use tickwheel_proto::{Command, Decoder, Frame};
    use tickwheel_queue::{Change, Engine, JobId, JobRecord};
    use tickwheel_store::{MemStore, Recovered, Store, StoreError};

    use super::{execute, write_bytes, Outcome};
    use crate::shared::Shared;

    /// A test store over [`MemStore`] with two switches: while `full` is set its disk is
    /// "full" (below the reserve), and while the commit gate is closed its commits block (a
    /// commit in flight, on demand).
    #[derive(Default)]
    struct Gate {
        inner: MemStore,
        full: AtomicBool,
        closed: std::sync::Mutex<bool>,
        opened: std::sync::Condvar,
    }

    impl Gate {
        fn set_closed(&self, closed: bool) {
            *self.closed.lock().expect("gate lock") = closed;
            self.opened.notify_all();
        }
    }

    impl Store for Gate {
        fn writable(&self, bytes: u64) -> Result<(), StoreError> {
            if self.full.load(Ordering::Relaxed) {
                return Err(StoreError::LowSpace {
                    path: "/gate".into(),
                    free: 0,
                    need: bytes,
                    reserve: 1,
                });
            }
            Ok(())
        }
        fn commit(&self, batch: &[Change]) -> Result<(), StoreError> {
            let mut closed = self.closed.lock().expect("gate lock");
            while *closed {
                closed = self.opened.wait(closed).expect("gate lock");
            }
            self.inner.commit(batch)
        }
        fn recover(&self, window_end_ms: u64) -> Result<Recovered, StoreError> {
            self.inner.recover(window_end_ms)
        }
        fn get(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
            self.inner.get(id)
        }
        fn delayed_between(
            &self,
            from_ms: u64,
            to_ms: u64,
            limit: usize,
        ) -> Result<Vec<JobRecord>, StoreError> {
            self.inner.delayed_between(from_ms, to_ms, limit)
        }
    }

    /// Runs `line` and returns the reply as text (data blocks included).
    fn reply(shared: &Shared, client: tickwheel_queue::ClientId, line: &str) -> String {
        let (ticket, outcome) = execute(shared, client, command(line));
        let Outcome::Reply(reply) = outcome else {
            panic!("{line:?}: not a plain reply");
        };
        ticket.wait().expect("in-memory commit");
        let mut out = BytesMut::new();
        reply.encode(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Below the reserve, every command that would change the store is refused (a put with
    /// `OUT_OF_MEMORY`, the others with `INTERNAL_ERROR`) and changes nothing (engine or
    /// store); reads, `reserve`, `reserve-job` and `touch` work; once space returns, writes work
    /// again.
    #[test]
    fn below_the_reserve_writes_are_refused_before_the_engine_and_reads_work() {
        let gate = Arc::new(Gate::default());
        let shared = Shared::new(
            Engine::new(tickwheel_queue::Config::default(), 0),
            gate.clone(),
            Arc::new(tickwheel::SystemClock),
            false,
        )
        .expect("commit thread");
        let client = shared.next_client_id();
        shared.apply(|engine| engine.connect(client));
        assert!(reply(&shared, client, "put 0 0 60 3\r\none\r\n").starts_with("INSERTED 1"));
        assert!(reply(&shared, client, "put 0 0 60 3\r\ntwo\r\n").starts_with("INSERTED 2"));
        assert!(reply(&shared, client, "put 0 100 60 5\r\nthree\r\n").starts_with("INSERTED 3"));
        gate.full.store(true, Ordering::Relaxed);
        let batches = shared.batches_submitted();
        let stats = |shared: &Shared| {
            let text = reply(shared, client, "stats-tube default\r\n");
            text.lines()
                .filter(|l| l.starts_with("current-jobs-") || l.starts_with("total-jobs"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert!(reply(&shared, client, "reserve-with-timeout 0\r\n").starts_with("RESERVED 1 3"));
        assert_eq!(reply(&shared, client, "touch 1\r\n"), "TOUCHED\r\n");
        let before = stats(&shared);
        assert!(before.len() >= 5, "{before:?}");
        assert_eq!(
            reply(&shared, client, "put 0 0 60 4\r\nfour\r\n"),
            "OUT_OF_MEMORY\r\n",
            "beanstalkd's answer to a put its full disk cannot hold"
        );
        for line in [
            "delete 2\r\n",
            "delete 1\r\n",
            "release 1 0 0\r\n",
            "bury 1 0\r\n",
            "kick 1\r\n",
            "kick-job 3\r\n",
        ] {
            assert_eq!(
                reply(&shared, client, line),
                "INTERNAL_ERROR\r\n",
                "{line:?}"
            );
        }
        assert_eq!(
            stats(&shared),
            before,
            "the refused commands changed nothing"
        );
        assert_eq!(
            shared.batches_submitted(),
            batches,
            "nor submitted anything"
        );
        assert!(reply(&shared, client, "peek 2\r\n").starts_with("FOUND 2 3\r\ntwo"));
        assert!(reply(&shared, client, "stats-job 1\r\n").contains("state: reserved"));
        assert!(reply(&shared, client, "peek-delayed\r\n").starts_with("FOUND 3 5"));
        // A reserve-job writes nothing (as in beanstalkd, whose full disk does not refuse it).
        let other = shared.next_client_id();
        shared.apply(|engine| engine.connect(other));
        assert!(reply(&shared, other, "reserve-job 3\r\n").starts_with("RESERVED 3 5"));
        assert_eq!(
            shared.batches_submitted(),
            batches,
            "reserve-job wrote nothing"
        );
        assert_eq!(
            reply(&shared, other, "release 3 0 100\r\n"),
            "INTERNAL_ERROR\r\n"
        );
        // Space returns: the same commands work, no restart.
        gate.full.store(false, Ordering::Relaxed);
        assert_eq!(reply(&shared, client, "delete 1\r\n"), "DELETED\r\n");
        assert_eq!(reply(&shared, other, "release 3 0 100\r\n"), "RELEASED\r\n");
        assert_eq!(reply(&shared, client, "kick-job 3\r\n"), "KICKED\r\n");
        assert!(reply(&shared, client, "put 0 0 60 4\r\nfour\r\n").starts_with("INSERTED 4"));
        assert!(shared.batches_submitted() > batches);
    }

    /// Opens the gate when dropped, so a failed assertion cannot leave the committer blocked.
    struct Reopen(Arc<Gate>);

    impl Drop for Reopen {
        fn drop(&mut self) {
            self.0.set_closed(false);
        }
    }

    /// Whether `ticket` is settled now (without waiting, and without committing: the server's
    /// group commit has its own committer thread).
    fn settled(ticket: &tickwheel_store::Ticket) -> bool {
        let mut durable = std::pin::pin!(ticket.durable());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::future::Future::poll(durable.as_mut(), &mut cx) {
            std::task::Poll::Ready(r) => {
                r.expect("the commit succeeds");
                true
            }
            std::task::Poll::Pending => false,
        }
    }

    fn text(reply: &tickwheel_proto::Reply) -> String {
        let mut out = BytesMut::new();
        reply.encode(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// A `RESERVED` reply waits for its own job's changes only: a job whose put is durable is
    /// handed out at once while another client's commit is in flight (directly, and to a
    /// reserver waiting when a delayed job falls due), and a job whose put is in flight is
    /// not. (Every reservation used to wait for the latest batch submitted: on PostgreSQL,
    /// where a commit can take tens of ms under load, every due job waited for one.)
    #[test]
    fn a_reservation_waits_for_its_own_job_not_for_other_commits_in_flight() {
        let clock = Arc::new(tickwheel::ManualClock::new());
        let store = Arc::new(Gate::default());
        let start = crate::shared::wall_millis(tickwheel::Clock::system_time(&*clock)).0;
        let shared = Shared::new(
            Engine::new(tickwheel_queue::Config::default(), start),
            store.clone(),
            clock.clone(),
            false,
        )
        .expect("commit thread");
        let _reopen = Reopen(store.clone());
        let clients: Vec<_> = (0..4)
            .map(|_| {
                let c = shared.next_client_id();
                shared.apply(|engine| engine.connect(c));
                c
            })
            .collect();
        let (producer, worker, waiter, other) = (clients[0], clients[1], clients[2], clients[3]);
        assert!(reply(&shared, producer, "put 0 0 60 1\r\na\r\n").starts_with("INSERTED 1"));
        assert!(reply(&shared, producer, "put 0 10 60 1\r\nb\r\n").starts_with("INSERTED 2"));

        // Another client's put is being committed (and stays so until the gate opens).
        store.set_closed(true);
        let (in_flight, outcome) = execute(&shared, other, command("put 0 0 60 1\r\nc\r\n"));
        assert!(matches!(
            outcome,
            Outcome::Reply(tickwheel_proto::Reply::Inserted(3))
        ));
        assert!(!settled(&in_flight), "the gate holds the commit");

        // Job 1 was put durably before: its reservation does not wait for job 3's commit.
        let (ticket, outcome) = execute(&shared, worker, command("reserve-with-timeout 0\r\n"));
        let Outcome::Reply(r) = outcome else {
            panic!("reserve-with-timeout 0 waits")
        };
        assert_eq!(text(&r), "RESERVED 1 1\r\na\r\n");
        assert!(
            settled(&ticket),
            "RESERVED 1 waits for another job's commit"
        );

        // Job 3's put is in flight: its reservation waits for it.
        let (ticket3, outcome) = execute(&shared, worker, command("reserve-with-timeout 0\r\n"));
        let Outcome::Reply(r) = outcome else {
            panic!("reserve-with-timeout 0 waits")
        };
        assert_eq!(text(&r), "RESERVED 3 1\r\nc\r\n");
        assert!(
            !settled(&ticket3),
            "RESERVED 3 sent before job 3 is durable"
        );

        // A reserver waiting when job 2 (put durably) falls due gets it without waiting for
        // the commit in flight.
        let (_, outcome) = execute(&shared, waiter, command("reserve\r\n"));
        let Outcome::Wait(mut rx) = outcome else {
            panic!("reserve with nothing ready does not wait")
        };
        clock.advance(std::time::Duration::from_secs(11));
        let now = shared.now();
        shared.apply(|engine| engine.advance(now));
        let (ticket, r) = rx.try_recv().expect("job 2 handed to the waiter");
        assert_eq!(text(&r), "RESERVED 2 1\r\nb\r\n");
        assert!(
            settled(&ticket),
            "RESERVED 2 waits for another job's commit"
        );

        // Once the gate opens, everything settles.
        store.set_closed(false);
        in_flight.wait().expect("commit");
        assert!(settled(&ticket3));
    }

    fn command(line: &str) -> Command {
        let mut buf = BytesMut::from(line.as_bytes());
        match Decoder::new(1 << 16).decode(&mut buf) {
            Some(Frame::Command(c)) => c,
            other => panic!("{line:?} does not decode: {other:?}"),
        }
    }

    /// Every command that makes a durable change is one the server checks with the store
    /// first (`write_bytes` is `Some`), so a full disk can refuse it before the engine runs.
    /// Each command below succeeds, so the ones that can change something do.
    /// With and without `write_reserve_job`: a `reserve-job` of a delayed job is checked first
    /// where it is written, and writes nothing (as beanstalkd) where it is not.
    #[test]
    fn every_command_that_changes_the_store_is_checked_first() {
        for write_reserve_job in [false, true] {
            changes_are_checked_first(write_reserve_job);
        }
    }

    fn changes_are_checked_first(write_reserve_job: bool) {
        let config = tickwheel_queue::Config {
            write_reserve_job,
            ..tickwheel_queue::Config::default()
        };
        let shared = Shared::new(
            Engine::new(config, 0),
            Arc::new(MemStore::new()),
            Arc::new(tickwheel::SystemClock),
            false,
        )
        .expect("commit thread");
        let client = shared.next_client_id();
        shared.apply(|engine| engine.connect(client));
        // Job 1 ready, job 2 delayed: one command of every kind, each answered successfully.
        let script = [
            ("put 0 0 60 3\r\none\r\n", "INSERTED"),
            ("put 0 100 60 3\r\ntwo\r\n", "INSERTED"),
            ("use default\r\n", "USING"),
            ("watch default\r\n", "WATCHING"),
            ("watch other\r\n", "WATCHING"),
            ("ignore other\r\n", "WATCHING"),
            ("peek 1\r\n", "FOUND"),
            ("peek-ready\r\n", "FOUND"),
            ("peek-delayed\r\n", "FOUND"),
            ("stats-job 1\r\n", "OK"),
            ("stats-tube default\r\n", "OK"),
            ("stats\r\n", "OK"),
            ("list-tubes\r\n", "OK"),
            ("list-tube-used\r\n", "USING"),
            ("list-tubes-watched\r\n", "OK"),
            ("reserve-with-timeout 0\r\n", "RESERVED"),
            ("touch 1\r\n", "TOUCHED"),
            ("release 1 5 0\r\n", "RELEASED"),
            ("reserve\r\n", "RESERVED"),
            ("bury 1 0\r\n", "BURIED"),
            ("peek-buried\r\n", "FOUND"),
            ("kick 1\r\n", "KICKED"),
            ("reserve-job 2\r\n", "RESERVED"),
            ("release 2 0 100\r\n", "RELEASED"),
            ("kick-job 2\r\n", "KICKED"),
            ("pause-tube default 100\r\n", "PAUSED"),
            ("delete 2\r\n", "DELETED"),
        ];
        let mut changed = Vec::new();
        for (line, expect) in script {
            let cmd = command(line);
            let before = shared.batches_submitted();
            let (_, outcome) = execute(&shared, client, cmd.clone());
            let reply = match outcome {
                Outcome::Reply(r) => r,
                _ => panic!("{line:?}: not a plain reply"),
            };
            let mut out = BytesMut::new();
            reply.encode(&mut out);
            assert!(
                out.starts_with(expect.as_bytes()),
                "{line:?} answered {:?}",
                String::from_utf8_lossy(&out)
            );
            if shared.batches_submitted() > before {
                assert!(
                    write_bytes(&cmd, write_reserve_job).is_some(),
                    "{line:?} changed the store without being checked first"
                );
                changed.push(line.split(' ').next().unwrap_or_default());
            }
        }
        // The observation works: these are the commands that changed the store.
        let mut expected = vec!["put", "put", "release", "bury", "kick"];
        if write_reserve_job {
            expected.push("reserve-job");
        }
        expected.extend(["release", "kick-job", "delete"]);
        assert_eq!(changed, expected, "write_reserve_job: {write_reserve_job}");
    }
}
