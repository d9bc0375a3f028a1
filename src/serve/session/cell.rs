//! A code cell as an event of the session's one loop (`session_loop.rs`).
//!
//! A cell that runs is a [`RunningCell`], state the session owns: its interpreter's
//! control socket, its output pipes (through the one collector, `jail::Output`) and its
//! client are tagged sources of the loop's one poll; its deadlines (the time limit, then
//! the interrupt's grace; the next look whether the interpreter that replied waits again)
//! come out of the loop's one `next_deadline`; its end — the reply confirmed by the
//! kernel, a cut, its interpreter's death — is decided in [`Session::finish_cell`] with
//! `outcome::decide`, and its reply is sent then. Meanwhile the session serves everything
//! else, cells of other contexts included (each context is its own interpreter); a cell
//! for a context that runs one waits in that context's queue ([`MAX_QUEUED`]).

use super::session_loop::Source;
use super::session_process::{CellStream, Listener};
use super::*;
use crate::serve::reply::ExecReply;
use std::collections::{BTreeMap, VecDeque};

/// Cells that may wait behind the running one of a context; one more is refused.
pub const MAX_QUEUED: usize = 16;

/// The cells of a session: those running (by their interpreter's program id) and those
/// waiting for their context (by context id, in order).
#[derive(Default)]
pub(super) struct Cells {
    pub running: BTreeMap<u32, RunningCell>,
    pub queued: HashMap<String, VecDeque<Pending>>,
    /// Interpreters on their way to their first request (`starting.rs`), by program id.
    pub starting: BTreeMap<u32, super::starting::Starting>,
    /// Why a context's interpreter was replaced before its next cell (that cell says it).
    lost: HashMap<String, String>,
}

/// Which descriptor of a running cell a [`Source::Cell`] is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum CellFd {
    /// Its interpreter's control socket (its reply).
    Control,
    /// Its interpreter's stdout (0) or stderr (1).
    Output(usize),
    /// Its client (hang-up; room for streamed frames).
    Client,
}

/// A cell accepted and checked, not yet handed to its interpreter.
pub(super) struct Pending {
    cell: Cell,
    target: context::Target,
    time_limit: Option<Duration>,
    limit: u64,
    peer: Peer,
    connection: OwnedFd,
    memfd: OwnedFd,
}

/// A cell its interpreter runs.
pub(super) struct RunningCell {
    target: context::Target,
    /// Its interpreter's program id in the jail, and pid as this runner sees it.
    id: u32,
    pid: Option<u32>,
    /// The cell's number, which its reply must carry.
    number: u64,
    code: String,
    peer: Peer,
    connection: OwnedFd,
    memfd: OwnedFd,
    /// Its output streamed as it is read, when it asked for that.
    streaming: Option<CellStream>,
    output: Output,
    limit: u64,
    time_limit: Option<Duration>,
    started: Instant,
    /// Its time limit; after the interrupt, the end of its grace; none once killed.
    deadline: Option<Instant>,
    cut: Option<Cut>,
    /// Its output passed the limit.
    over: bool,
    /// The reply as it came, until the kernel shows the interpreter waiting again.
    reply: Option<CellReply>,
    /// The reply, confirmed.
    answer: Option<CellReply>,
    cpu_before: (Duration, Duration),
    cpu_after: Option<(Duration, Duration)>,
    broken: Option<String>,
    unconfirmed: Option<Cut>,
    /// How long until brig looks again whether the interpreter waits (doubling), and when.
    pause: Duration,
    confirm_at: Option<Instant>,
    /// Once brig has sent SIGKILL, nothing the interpreter says counts.
    killed: bool,
    died: Option<Ended>,
    oom_before: u64,
    /// What its interpreter saw before the cell (it was replaced).
    lost_before: Option<String>,
}

impl RunningCell {
    /// When the loop must look at it without an event: its deadline, or the next look
    /// whether its interpreter waits again.
    fn wake(&self) -> Option<Instant> {
        // Its interpreter's end, noted outside its turn (`launch_queued`), is seen at once.
        if self.died.is_some() {
            return Some(Instant::now());
        }
        let confirm = self
            .confirm_at
            .filter(|_| self.reply.is_some() && !self.killed);
        sooner(self.deadline, confirm)
    }

    /// Reads what its pipes hold now (streamed, or kept for the reply); false once the
    /// output passed the limit.
    fn pump(&mut self) -> bool {
        let (output, streaming) = (&mut self.output, &mut self.streaming);
        let mut within = true;
        for index in 0..2 {
            within &= output.pump_to(index, |index, kept| {
                if let Some(stream) = streaming.as_mut() {
                    stream.send(index, kept);
                }
            });
        }
        within
    }
}

impl Cells {
    /// The running cells' descriptors, to poll, with what each is.
    pub fn poll_fds<'a>(
        &'a self,
        interpreters: &'a HashMap<String, Interpreter>,
    ) -> (Vec<Source>, Vec<PollFd<'a>>) {
        let mut sources = Vec::new();
        let mut fds = Vec::new();
        for (id, cell) in &self.running {
            if !cell.killed
                && let Some(interpreter) = interpreters.get(&cell.target.id)
            {
                sources.push(Source::Cell(*id, CellFd::Control));
                fds.push(PollFd::new(interpreter.control.as_fd(), PollFlags::POLLIN));
            }
            for (index, pipe) in cell.output.open_pipes() {
                sources.push(Source::Cell(*id, CellFd::Output(index)));
                fds.push(PollFd::new(pipe, PollFlags::POLLIN));
            }
            // Its client's hang-up, until it is cut (then it is over soon anyway).
            if cell.cut.is_none() {
                let flags = match &cell.streaming {
                    Some(stream) if stream.client.has_pending() => {
                        PollFlags::POLLIN | PollFlags::POLLOUT
                    }
                    _ => PollFlags::POLLIN,
                };
                sources.push(Source::Cell(*id, CellFd::Client));
                fds.push(PollFd::new(cell.connection.as_fd(), flags));
            }
        }
        (sources, fds)
    }

    /// The soonest of the running cells' deadlines.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.running
            .values()
            .map(RunningCell::wake)
            .fold(None, sooner)
    }

    /// Whether a cell runs or waits (the session is not idle).
    pub fn busy(&self) -> bool {
        !self.running.is_empty()
            || !self.starting.is_empty()
            || self.queued.values().any(|queue| !queue.is_empty())
    }

    /// The running cell of context `key`.
    fn running_in(&self, key: &str) -> Option<u32> {
        self.running
            .iter()
            .find(|(_, cell)| cell.target.id == key)
            .map(|(id, _)| *id)
    }

    /// The interpreters that run a cell (but `but`): a sweep keeps their process groups
    /// (what those cells started).
    fn interpreters_running(&self, but: u32) -> Vec<u32> {
        self.running
            .keys()
            .copied()
            .filter(|id| *id != but)
            .collect()
    }
}

impl<'p> Session<'p> {
    /// A `session_exec` with code: checked, then run at once when its context is free,
    /// else queued behind its context's cells (at most [`MAX_QUEUED`]).
    pub(super) fn take_cell(
        &mut self,
        request: Request,
        peer: Peer,
        connection: OwnedFd,
        memfd: OwnedFd,
    ) {
        let pending = match self.check_cell(request) {
            Ok((cell, target, time_limit, limit)) => Pending {
                cell,
                target,
                time_limit,
                limit,
                peer,
                connection,
                memfd,
            },
            Err(err) => return self.refuse(connection, memfd, &err),
        };
        let key = pending.target.id.clone();
        // The head of a queue whose interpreter starts is that context's next cell, as
        // a running one: 16 more may wait behind it.
        let next = usize::from(self.starting_of(&key).is_some());
        let queue = self.cells.queued.entry(key.clone()).or_default();
        if queue.len() >= MAX_QUEUED + next {
            let err = Error::input(format!(
                "session_exec: context {key:?} runs a cell and has {MAX_QUEUED} more waiting \
                 (the most); wait for one to end, or run it in another context \
                 (session_context \"create\")"
            ));
            return self.refuse_pending(pending, &err);
        }
        queue.push_back(pending);
        self.launch_queued();
    }

    /// A cell that will not run: its client gets `err`.
    pub(super) fn refuse_pending(&mut self, pending: Pending, err: &Error) {
        self.refuse(pending.connection, pending.memfd, err);
    }

    /// The one-line error of a request answered at once.
    fn refuse(&mut self, connection: OwnedFd, memfd: OwnedFd, err: &Error) {
        let mut client = Listener::new(connection).answering(Some(memfd));
        client.queue(&error_reply(err), None);
        self.close_client(client);
    }

    /// A cell's fields, its context and its limits, or the one-line error.
    fn check_cell(
        &self,
        request: Request,
    ) -> Result<(Cell, context::Target, Option<Duration>, u64)> {
        let Request::SessionExec {
            command,
            code: Some(code),
            language,
            context,
            time_limit,
            output_limit,
            stream,
            background,
            tag,
            ..
        } = request
        else {
            return Err(Error::input(EXEC_FORM));
        };
        if !command.is_empty() {
            return Err(Error::input(EXEC_FORM));
        }
        let form = session_loop::Form {
            stream,
            background,
            tag,
        };
        session_loop::check_form(&form, true)?;
        let target = self.target(context.as_deref(), language, &code)?;
        let (time_limit, limit) = self.limits(time_limit, output_limit)?;
        Ok((Cell { code, stream }, target, time_limit, limit))
    }

    /// Hands a cell to its context's interpreter; its client is answered at once when
    /// that fails.
    fn launch(&mut self, pending: Pending) {
        match self.begin_cell(pending) {
            Ok(running) => {
                self.cells.running.insert(running.id, running);
            }
            Err((pending, err)) => self.refuse_pending(*pending, &err),
        }
    }

    /// The cell given to its context's interpreter: the running cell; or why not, with
    /// the cell.
    fn begin_cell(
        &mut self,
        pending: Pending,
    ) -> std::result::Result<RunningCell, (Box<Pending>, Error)> {
        let streaming = match pending.cell.stream {
            true => match pending.connection.try_clone() {
                Ok(connection) => Some(CellStream::new(connection)),
                Err(err) => {
                    let err = Error::setup(format!("keep the client's connection: {err}"));
                    return Err((Box::new(pending), err));
                }
            },
            false => None,
        };
        let key = pending.target.id.as_str();
        let oom_before = self.oom_kills();
        let gone = || Error::setup("the session's interpreter went away; run the cell again");
        let Some(interpreter) = self.interpreters.get_mut(key) else {
            return Err((Box::new(pending), gone()));
        };
        // The cell's output: kept for the reply, or streamed as it is read.
        let mut output = match interpreter.collector(pending.limit) {
            Ok(output) => output,
            Err(err) => return Err((Box::new(pending), err)),
        };
        match pending.cell.stream {
            true => output.to_caller(),
            false => output.capture(pending.limit),
        }
        interpreter.cells += 1;
        let number = interpreter.cells;
        let (id, pid) = (interpreter.id, interpreter.pid);
        let cpu_before = pid.and_then(kernel::cpu_time).unwrap_or_default();
        let line = context::request_line(pending.target.language, number, &pending.cell.code);
        if interpreter.control.write_all(&line).is_err() {
            let key = key.to_string();
            self.stop_interpreter(&key);
            return Err((Box::new(pending), gone()));
        }
        let lost_before = self.cells.lost.remove(key);
        let started = Instant::now();
        Ok(RunningCell {
            id,
            pid,
            number,
            code: pending.cell.code,
            peer: pending.peer,
            connection: pending.connection,
            memfd: pending.memfd,
            streaming,
            output,
            limit: pending.limit,
            time_limit: pending.time_limit,
            started,
            deadline: pending.time_limit.map(|limit| started + limit),
            cut: None,
            over: false,
            reply: None,
            answer: None,
            cpu_before,
            cpu_after: None,
            broken: None,
            unconfirmed: None,
            pause: CONFIRM_FIRST,
            confirm_at: None,
            killed: false,
            died: None,
            oom_before,
            lost_before,
            target: pending.target,
        })
    }

    /// The running cells after a turn of the loop (`ready`: its sources that were):
    /// each advanced, those that ended answered, and the next cell of a context that
    /// became free handed to it.
    pub(super) fn serve_cells(&mut self, ready: &[Source]) {
        self.advance_starting();
        let ids: Vec<u32> = self.cells.running.keys().copied().collect();
        for id in ids {
            let client_ready = ready
                .iter()
                .any(|source| matches!(source, Source::Cell(of, CellFd::Client) if *of == id));
            match self.advance_cell(id, client_ready) {
                Ok(false) => {}
                Ok(true) => self.finish_cell(id),
                Err(err) => self.fail_cell(id, &err),
            }
        }
        self.launch_queued();
    }

    /// The next cell of each context that runs none and whose interpreter does not
    /// start: handed to its interpreter, or its interpreter started (the cell waits at
    /// the head of its queue). Not while the session drains.
    fn launch_queued(&mut self) {
        if self.drain_by.is_some() {
            return;
        }
        let free: Vec<String> = (self.cells.queued.keys())
            .filter(|key| self.cells.running_in(key).is_none() && self.starting_of(key).is_none())
            .cloned()
            .collect();
        if !free.is_empty() {
            // An interpreter that died since the loop's turn is forgotten first (its
            // next cell starts a fresh one).
            self.absorb_events();
        }
        for key in free {
            while let Some(queue) = self.cells.queued.get_mut(&key) {
                let Some(pending) = queue.front() else {
                    break;
                };
                // A client that left while its cell waited is not run for.
                if client_gone(&pending.connection) {
                    queue.pop_front();
                    continue;
                }
                // A line from an idle interpreter: it is replaced (the cell says why).
                if let Some(why) = self.check_idle_interpreter(&key) {
                    self.cells.lost.insert(key.clone(), why);
                }
                let head = |cells: &mut Cells| {
                    let queue = cells.queued.get_mut(&key).expect("queued");
                    queue.pop_front().expect("at the head")
                };
                if self.interpreters.contains_key(&key) {
                    let pending = head(&mut self.cells);
                    self.launch(pending);
                    break;
                }
                let target = self.cells.queued[&key][0].target.clone();
                match self.start_context(&target) {
                    Ok(()) => break,
                    Err(err) => {
                        let pending = head(&mut self.cells);
                        self.refuse_pending(pending, &err);
                    }
                }
            }
        }
        self.cells.queued.retain(|_, queue| !queue.is_empty());
    }

    /// The processes a cell's sweep keeps: the interpreters (but `but`), and the process
    /// groups of the session's watched programs and of the other running cells.
    fn sweep_for(&mut self, cell: u32, but: Option<u32>) -> Result<()> {
        let keep = self.interpreter_ids(but);
        let mut groups = self.processes.running_ids();
        groups.extend(self.cells.interpreters_running(cell));
        self.jail.sweep(&keep, &groups)
    }

    /// One step of cell `id` (its interpreter's program id): its output read, its
    /// interpreter's lines, its client, its deadlines. Whether it has ended.
    fn advance_cell(&mut self, id: u32, client_ready: bool) -> Result<bool> {
        let cell = self.cells.running.get_mut(&id).expect("running");
        cell.over |= !cell.pump();
        if let Some(stream) = cell.streaming.as_mut() {
            stream.client.flush();
        }
        if !cell.killed {
            match self.interpreters.get_mut(&cell.target.id) {
                // Forgotten (ended) without its end reaching the cell: it died.
                None => {
                    cell.died.get_or_insert_with(Ended::default);
                }
                Some(interpreter) => {
                    while let Some(line) = interpreter.next_line() {
                        match (
                            &cell.reply,
                            cell_reply(&line, cell.number, cell.target.language),
                        ) {
                            (None, Ok(received)) => {
                                cell.reply = Some(received);
                                cell.confirm_at = Some(Instant::now() + cell.pause);
                            }
                            (Some(_), _) => cell.broken = Some("a second reply to one cell".into()),
                            (None, Err(why)) => cell.broken = Some(why),
                        }
                        if cell.broken.is_some() {
                            break;
                        }
                    }
                    if let Some(stranger) = interpreter.stranger {
                        cell.broken = Some(format!(
                            "a line on its control descriptor written by another process of the jail (pid {stranger})"
                        ));
                    }
                    // The reply ends the cell once the kernel shows the interpreter back
                    // waiting for its next request: a cell that wrote it is still running.
                    if cell.broken.is_none() && cell.reply.is_some() {
                        match interpreter.waiting() {
                            Ok(true) => {
                                cell.cpu_after = cell.pid.and_then(kernel::cpu_time);
                                cell.answer = cell.reply.take();
                                return Ok(true);
                            }
                            Ok(false) => {
                                let now = Instant::now();
                                if cell.confirm_at.is_some_and(|at| now >= at) {
                                    cell.pause = (cell.pause * 2).min(CONFIRM_MOST);
                                    cell.confirm_at = Some(now + cell.pause);
                                }
                            }
                            Err(why) => {
                                cell.broken = Some(format!(
                                    "brig could not see whether it was waiting for its next request ({why})"
                                ))
                            }
                        }
                    }
                    if cell.broken.is_some() {
                        // Its channel is no longer its own: it goes, and its state with it.
                        cell.killed = true;
                        cell.deadline = None;
                        self.jail.signal(id, Signal::SIGKILL, true)?;
                    }
                }
            }
        }
        let cell = self.cells.running.get_mut(&id).expect("running");
        if cell.died.is_some() {
            return Ok(true);
        }
        if cell.broken.is_some() {
            return Ok(false);
        }
        let now = Instant::now();
        let client_left = client_ready && cell.cut.is_none() && client_gone(&cell.connection);
        let why = if cell.over {
            Some(Cut::OutputLimit)
        } else if client_left {
            Some(Cut::ClientGone)
        } else if cell.deadline.is_some_and(|at| now >= at) {
            Some(Cut::TimeLimit)
        } else {
            None
        };
        match (cell.cut, why) {
            // A reply came, but the interpreter is not back waiting: whatever wrote it,
            // the cell still runs, and the channel cannot be trusted any more.
            (None, Some(why)) if cell.reply.is_some() => {
                cell.cut = Some(why);
                cell.unconfirmed = Some(why);
                cell.killed = true;
                cell.deadline = None;
                self.jail.signal(id, Signal::SIGKILL, true)?;
            }
            // First: interrupt the cell, end what it started, give it a grace period.
            (None, Some(why)) => {
                cell.cut = Some(why);
                self.jail.signal(id, Signal::SIGINT, false)?;
                self.sweep_for(id, None)?;
                // From the end of the sweep, which may take a while (a fork bomb's).
                let cell = self.cells.running.get_mut(&id).expect("running");
                cell.deadline = Some(Instant::now() + INTERRUPT_GRACE);
            }
            // It did not come back (or came back without the kernel's word): the
            // interpreter goes, and its state with it.
            (Some(why), _) if cell.deadline.is_some_and(|at| now >= at) => {
                if cell.reply.is_some() {
                    cell.unconfirmed = Some(why);
                }
                cell.killed = true;
                cell.deadline = None;
                self.jail.signal(id, Signal::SIGKILL, true)?;
                self.sweep_for(id, Some(id))?;
            }
            _ => {}
        }
        Ok(false)
    }

    /// Program `id` ended: when it is a running cell's interpreter, the cell notes it
    /// (and ends); false when it is not.
    pub(super) fn cell_interpreter_ended(&mut self, id: u32, end: Ended) -> bool {
        match self.cells.running.get_mut(&id) {
            Some(cell) => {
                cell.died = Some(end);
                true
            }
            None => false,
        }
    }

    /// Cuts the running cell of context `key`, if any, at once (the session closes, the
    /// context is restarted or removed): its interpreter is killed and its client gets
    /// its verdict (stopped).
    pub(super) fn stop_cell(&mut self, key: &str) {
        let Some(id) = self.cells.running_in(key) else {
            return;
        };
        let cell = self.cells.running.get_mut(&id).expect("running");
        cell.cut.get_or_insert(Cut::Stopped);
        if cell.reply.is_some() && cell.unconfirmed.is_none() {
            cell.unconfirmed = cell.cut;
        }
        cell.killed = true;
        cell.deadline = None;
        let _ = self.jail.signal(id, Signal::SIGKILL, true);
        self.finish_cell(id);
    }

    /// The session closes: every running cell cut (its client gets its verdict).
    pub(super) fn stop_cells(&mut self) {
        let keys: Vec<String> = (self.cells.running.values())
            .map(|cell| cell.target.id.clone())
            .collect();
        for key in keys {
            self.stop_cell(&key);
        }
    }

    /// The session ends: the clients of the cells that run or wait get `message`, and
    /// are returned to be flushed with the others.
    pub(super) fn end_cells(&mut self, message: &SessionReply) -> Vec<Listener> {
        let mut clients = Vec::new();
        for (_, cell) in std::mem::take(&mut self.cells.running) {
            let mut client = match cell.streaming {
                Some(stream) => stream.client.answering(Some(cell.memfd)),
                None => Listener::new(cell.connection).answering(Some(cell.memfd)),
            };
            client.queue(message, None);
            clients.push(client);
        }
        clients.extend(self.end_starting(message));
        for pending in std::mem::take(&mut self.cells.queued)
            .into_values()
            .flatten()
        {
            let mut client = Listener::new(pending.connection).answering(Some(pending.memfd));
            client.queue(message, None);
            clients.push(client);
        }
        clients
    }

    /// Context `key` was removed: the cells that waited for it are told so.
    pub(super) fn refuse_queued(&mut self, key: &str) {
        for pending in self.cells.queued.remove(key).unwrap_or_default() {
            let err = Error::input(format!(
                "context: context {key:?} was removed while this cell waited for it; create \
                 another (session_context \"create\") and run the cell there"
            ));
            self.refuse(pending.connection, pending.memfd, &err);
        }
    }

    /// A cell brig could not go on watching (the jail's init did not take a signal): its
    /// client gets the error, its interpreter goes.
    fn fail_cell(&mut self, id: u32, err: &Error) {
        let Some(cell) = self.cells.running.remove(&id) else {
            return;
        };
        self.interpreter_ended(&cell.target.id);
        let client = match cell.streaming {
            Some(stream) => stream.client,
            None => Listener::new(cell.connection),
        };
        let mut client = client.answering(Some(cell.memfd));
        client.queue(&error_reply(err), None);
        self.close_client(client);
    }

    /// Cell `id` has ended: its outcome decided, its reply sent.
    fn finish_cell(&mut self, id: u32) {
        let Some(cell) = self.cells.running.remove(&id) else {
            return;
        };
        let memfd = cell.memfd.try_clone().ok();
        let (reply, streaming, connection) = self.cell_reply(cell);
        let reply = reply.unwrap_or_else(|err| error_reply(&err));
        let kept = match &reply {
            SessionReply::Exec(exec) => held_output(exec),
            _ => 0,
        };
        let mut client = match streaming {
            Some(stream) => stream.client,
            None => Listener::new(connection),
        }
        .answering(memfd);
        if kept <= session_loop::QUEUED_OUTPUT {
            client.queue(&reply, None);
            self.close_client(client);
        } else {
            // Encoded straight into the socket (JSON escaping may make it six times its
            // size: never held whole), within the client's patience.
            client.flush_by(Instant::now() + self.processes.patience);
            let give_up = sooner(
                Some(Instant::now() + self.processes.patience),
                self.end_by(),
            );
            let _ =
                protocol::write_reply_by(client.connection.as_fd(), &reply, give_up.expect("some"));
        }
    }

    /// The reply of an ended cell, and where it goes (its stream, else its connection).
    fn cell_reply(
        &mut self,
        cell: RunningCell,
    ) -> (Result<SessionReply>, Option<CellStream>, OwnedFd) {
        let RunningCell {
            target,
            id,
            code,
            peer,
            connection,
            mut streaming,
            mut output,
            limit,
            time_limit,
            started,
            cut,
            mut answer,
            cpu_before,
            cpu_after,
            broken,
            unconfirmed,
            died,
            oom_before,
            lost_before,
            ..
        } = cell;
        let (key, language) = (target.id.as_str(), target.language);
        let wall = started.elapsed();
        if (cut.is_some() || broken.is_some())
            && let Err(err) = self.sweep_for(id, died.map(|_| id))
        {
            return (Err(err), streaming, connection);
        }
        // What the cell started, and what it forks while it is interrupted, is gone:
        // what it wrote is read.
        for index in 0..2 {
            output.pump_to(index, |index, kept| {
                if let Some(stream) = streaming.as_mut() {
                    stream.send(index, kept);
                }
            });
        }
        let captured = output.into_captured();
        // What was streamed goes before the reply (a client that does not read gets
        // what it took, the rest counted as dropped).
        let dropped = streaming.as_mut().map(|stream| {
            stream.finish();
            stream.client.dropped
        });
        let oom = self.oom_kills().saturating_sub(oom_before);
        // CPU time as the kernel counts it: the interpreter's, across the cell (a dead
        // one's from its rusage, less what it had used before the cell).
        let since =
            |total_us: u64, before: Duration| total_us.saturating_sub(before.as_micros() as u64);
        let ended = match (&died, cpu_after) {
            (Some(end), _) => Ended {
                cpu_user_us: since(end.cpu_user_us, cpu_before.0),
                cpu_sys_us: since(end.cpu_sys_us, cpu_before.1),
                ..*end
            },
            (None, Some((user, sys))) => Ended {
                code: Some(0),
                cpu_user_us: since(user.as_micros() as u64, cpu_before.0),
                cpu_sys_us: since(sys.as_micros() as u64, cpu_before.1),
                ..Ended::default()
            },
            (None, None) => Ended::default(),
        };
        // A stopped cell's interpreter, killed, is forgotten by whoever stopped it.
        if died.is_some() {
            self.interpreter_ended(key);
        }
        let stopped = cut == Some(Cut::Stopped);
        let state_lost = died.is_some() || lost_before.is_some() || stopped;
        let error = answer
            .as_mut()
            .and_then(|answer| answer.error.take())
            .map(reply::CellError::from);
        // Rich results count against the output limit, with stdout and stderr.
        let (results, results_dropped) = match &mut answer {
            Some(answer) => context::keep_results(
                std::mem::take(&mut answer.results),
                limit.saturating_sub(captured.counts.stdout_bytes + captured.counts.stderr_bytes),
                answer.results_dropped,
            ),
            None => (Vec::new(), 0),
        };
        let error = error.or_else(|| {
            (results_dropped > 0).then(|| context::results_cut(results_dropped, limit))
        });
        // The cell's end, decided as every program's is: the interpreter's death as init
        // reported it, else its answer (a bash cell's status; an error is 1); what brig
        // ended it for (rich results cut to fit are an output cut).
        let program = match (&died, &answer) {
            (Some(end), _) => Some(ProgramEnd::of_session(end, None)),
            (None, Some(answer)) => Some(ProgramEnd::Exited(match answer.exit_code {
                Some(code) => i32::from(code),
                None if error.is_some() => 1,
                None => 0,
            })),
            (None, None) => None,
        };
        let ended_by = match cut {
            None if results_dropped > 0 => EndedBy::OutputLimit,
            cut => Cut::ended_by(cut),
        };
        let outcome = match outcome::decide(program, None, ended_by) {
            Ok(outcome) => outcome,
            Err(err) => return (Err(err), streaming, connection),
        };
        let end = ExecEnd {
            outcome,
            limit: time_limit,
            wall,
            ended,
            oom_kills: oom,
        };
        let name = language_name(language);
        let argv = [name.to_string(), code];
        let served = crate::verdict::Served { peer, argv: &argv };
        let verdict = self.verdict(end, &captured, served, Ran::Cell(&target));
        let lost_why = match (&broken, unconfirmed, &died) {
            (Some(why), _, _) => Some(format!("the cell broke its interpreter's protocol: {why}")),
            (None, _, _) if stopped => Some(
                "the session was closed (or the context restarted or removed) while the cell ran"
                    .to_string(),
            ),
            (None, Some(cut), _) => Some(format!(
                "a reply came on its control descriptor, but the interpreter did not go back to \
                 waiting for its next request before {} (the cell wrote it?)",
                match cut {
                    Cut::TimeLimit => "the time limit",
                    Cut::OutputLimit => "the output limit",
                    Cut::ClientGone => "its client left",
                    Cut::Stopped => "the session was closed",
                }
            )),
            (None, None, Some(end)) => Some(format!(
                "the {name} interpreter died ({})",
                describe_end(end, oom > 0)
            )),
            (None, None, None) => lost_before
                .as_ref()
                .map(|why| format!("before this cell, its {name} interpreter saw {why}")),
        };
        let error = error.or_else(|| {
            (died.is_some() || stopped).then(|| reply::CellError {
                kind: match (&broken, stopped) {
                    (Some(_), _) => "ProtocolError",
                    (None, true) => "Stopped",
                    (None, false) => "InterpreterDied",
                }
                .to_string(),
                message: format!(
                    "{}; its state is lost and the next cell starts a fresh one",
                    lost_why.as_deref().unwrap_or("the interpreter died")
                ),
                traceback: String::new(),
            })
        });
        let cell = reply::CellReply {
            result: answer.and_then(|answer| answer.result),
            results,
            context: key.to_string(),
            error,
            state_lost,
            state_lost_reason: lost_why.filter(|_| state_lost),
        };
        // A streamed cell's output went in its `output` frames.
        let (stdout, stderr) = match dropped {
            Some(_) => (None, None),
            None => (Some(captured.stdout), Some(captured.stderr)),
        };
        let reply = SessionReply::Exec(Box::new(ExecReply {
            verdict: Box::new(verdict),
            stdout,
            stderr,
            cell: Some(cell),
            dropped,
        }));
        (Ok(reply), streaming, connection)
    }
}

/// The bytes of output an exec reply holds (its stdout, stderr and rich results): a large
/// one is written straight into the socket, not queued.
fn held_output(exec: &ExecReply) -> usize {
    let text = |stream: &Option<String>| stream.as_ref().map_or(0, String::len);
    let results = exec.cell.as_ref().map_or(0, |cell| {
        (cell.results.iter())
            .map(|bundle| serde_json::to_vec(bundle).map_or(0, |json| json.len()))
            .sum()
    });
    text(&exec.stdout) + text(&exec.stderr) + results
}
