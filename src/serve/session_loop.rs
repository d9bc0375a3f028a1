//! A session's runner as one event loop (single-threaded): the server's control socket
//! (new requests), the jail's init and events, each watched program's pipes and stdin,
//! each attached client, each running cell's interpreter socket, pipes and client
//! (`session/cell.rs`), one set of deadlines. A command that runs (in the foreground,
//! streamed or not, or in the background) or a cell that runs does not stop the session
//! from serving its other requests; a cell for a context that runs one waits in that
//! context's queue.

use super::session_process::{
    Foreground, KEEP_ENDED, Listener, MAX_LISTENERS, MAX_RUNNING, Watch, Watched, parse_signal,
};
use super::*;
use crate::jail::Output;
use crate::serve::reply::{ExecReply, ListedProcess};
use std::collections::BTreeMap;

/// The most output a reply queued for a client carries (escaped as JSON, at most six
/// times that is held); a larger one is written before the loop goes on.
pub(super) const QUEUED_OUTPUT: usize = 256 << 10;

/// What one descriptor polled by the loop is.
#[derive(Clone, Copy, Debug)]
pub(super) enum Source {
    /// The server's control socket: a request, or the server's hang-up.
    Control,
    /// The jail's init ended.
    Init,
    /// The jail reports a program ended.
    Events,
    /// Program `id`'s stdout (0) or stderr (1).
    Output(u32, usize),
    Stdin(u32),
    /// The foreground client of program `id`.
    Waiting(u32),
    /// Connected client `index` of program `id`.
    Connected(u32, usize),
    /// A client whose last frames are being written.
    Closing(usize),
    /// The session's inotify descriptor, while a watcher streams (`session_watch_stream.rs`).
    WatchEvents,
    /// A streamed watcher's client.
    WatchStream,
    /// A descriptor of the cell interpreter `id` (its program id) runs, or of that
    /// interpreter while it starts (`session/cell.rs`, `session/starting.rs`).
    Cell(u32, super::cell::CellFd),
}

/// The loop's state beside the session's: the watched programs, the clients being
/// answered.
#[derive(Default)]
pub(super) struct Processes {
    pub watched: BTreeMap<u32, Watched>,
    pub closing: Vec<Listener>,
    /// How long a client may take nothing of what waits for it.
    pub patience: Duration,
    /// The server's control socket's frames.
    pub requests: FrameReader,
}

/// A request as the server handed it over.
pub(super) struct Taken {
    request: Result<Request>,
    peer: Peer,
    connection: OwnedFd,
    /// The request's memfd: emptied once the request is answered (`Listener::answered`).
    memfd: OwnedFd,
}

impl Processes {
    /// The descriptors of the watched programs and their clients, to poll, with what
    /// each is.
    pub fn poll_fds(&self) -> (Vec<Source>, Vec<PollFd<'_>>) {
        let mut sources = Vec::new();
        let mut fds = Vec::new();
        let writable = |client: &Listener| match client.has_pending() {
            true => PollFlags::POLLIN | PollFlags::POLLOUT,
            false => PollFlags::POLLIN,
        };
        for (id, process) in &self.watched {
            for (index, pipe) in process.output.iter().flat_map(Output::open_pipes) {
                sources.push(Source::Output(*id, index));
                fds.push(PollFd::new(pipe, PollFlags::POLLIN));
            }
            if process.stdin_wanted()
                && let Some(stdin) = &process.stdin
            {
                sources.push(Source::Stdin(*id));
                fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLOUT));
            }
            if let Some(foreground) = &process.foreground {
                sources.push(Source::Waiting(*id));
                let client = &foreground.client;
                fds.push(PollFd::new(client.connection.as_fd(), writable(client)));
            }
            for (index, client) in process.listeners.iter().enumerate() {
                sources.push(Source::Connected(*id, index));
                fds.push(PollFd::new(client.connection.as_fd(), writable(client)));
            }
        }
        for (index, client) in self.closing.iter().enumerate() {
            sources.push(Source::Closing(index));
            fds.push(PollFd::new(client.connection.as_fd(), writable(client)));
        }
        (sources, fds)
    }

    /// The soonest of the programs' time limits and their clients' give-ups.
    pub fn next_deadline(&self) -> Option<Instant> {
        let mut wake = None;
        for process in self.watched.values() {
            wake = sooner(wake, process.deadline.filter(|_| process.cut.is_none()));
            for client in process
                .listeners
                .iter()
                .chain(process.foreground.iter().map(|f| &f.client))
            {
                wake = sooner(wake, client.give_up_at(self.patience));
            }
        }
        for client in &self.closing {
            wake = sooner(wake, client.give_up_at(self.patience));
        }
        wake
    }

    /// Whether a client waits on a program (the session is not idle).
    fn busy(&self) -> bool {
        self.watched.values().any(Watched::attached)
    }

    /// The programs the loop watches that still run: a cell's sweep keeps them, and
    /// what they started (their process groups).
    pub fn running_ids(&self) -> Vec<u32> {
        self.watched
            .iter()
            .filter(|(_, process)| process.running())
            .map(|(id, _)| *id)
            .collect()
    }

    fn foreground_running(&self) -> bool {
        self.watched.values().any(|p| p.foreground.is_some())
    }
}

impl<'p> Session<'p> {
    /// Serves requests until the session ends: why it ended, and the connection of the
    /// `session_close` that ended it.
    pub(super) fn serve_requests(
        &mut self,
        control: &OwnedFd,
        ends_at: Instant,
        idle: Duration,
    ) -> (&'static str, Option<OwnedFd>) {
        self.processes.patience = protocol::REPLY_TIMEOUT.min(idle);
        let mut last_request = Instant::now();
        let why = loop {
            let now = Instant::now();
            // A client waiting on a program or a cell, or streaming a watcher, keeps the
            // session from idling; a background process nobody is connected to does not.
            if self.processes.busy() || self.cells.busy() || self.watches.streams().next().is_some()
            {
                last_request = now;
            }
            // Paused, neither the session's end nor its idle timer runs; its end is
            // `self.ends_at`, moved by session_set_timeout and by a pause.
            let clock = (!self.lifecycle.paused())
                .then(|| self.ends_at.unwrap_or(ends_at).min(last_request + idle));
            let wake = sooner(clock, self.drain_by);
            let wake = sooner(wake, self.processes.next_deadline());
            let wake = sooner(wake, self.cells.next_deadline());
            let wake = sooner(wake, self.starting_deadline());
            let ready = self.poll(control, wake);
            if ready.iter().any(|source| matches!(source, Source::Init)) {
                break "its jail ended";
            }
            self.absorb_process_events();
            self.serve_processes(&ready);
            self.serve_cells(&ready);
            if self.over() {
                break self.ended.unwrap_or(DRAINING);
            }
            // Between requests the drain ends the session at once; a command running in
            // the foreground and a running cell have the drain's grace.
            if self.drain_by.is_some()
                && !self.processes.foreground_running()
                && self.cells.running.is_empty()
            {
                break DRAINING;
            }
            if !self.processes.busy()
                && !self.lifecycle.paused()
                && !self.cells.busy()
                && self.watches.streams().next().is_none()
                && Instant::now() >= last_request + idle
            {
                break "it was idle for its idle_timeout";
            }
            // Draining, the server sends nothing more (what it sent is answered at the end).
            if self.drain_by.is_some()
                || !ready.iter().any(|source| matches!(source, Source::Control))
            {
                continue;
            }
            let taken = match self.read_next(control) {
                Err(()) => break "the server went away",
                Ok(None) => continue,
                Ok(Some(taken)) => taken,
            };
            let Taken {
                request,
                peer,
                connection,
                memfd,
            } = taken;
            if matches!(request, Ok(Request::SessionClose { .. })) {
                // Its running cells are cut, their clients given their verdicts.
                self.stop_cells();
                self.end_clients("it was closed");
                return ("it was closed", Some(connection));
            }
            self.take_request(request, peer, connection, memfd);
            last_request = Instant::now();
            if let Some(why) = self.ended {
                break why;
            }
        };
        self.end_clients(why);
        (why, None)
    }

    /// The next request on the server's control socket (blocking until its frame is
    /// whole); None for a frame that is not one; an error when the server went away.
    fn read_next(&mut self, control: &OwnedFd) -> std::result::Result<Option<Taken>, ()> {
        let Ok(Some((body, mut fds))) = self.processes.requests.read_blocking(control) else {
            return Err(());
        };
        let (Ok(ToSession::Request { peer }), 2) =
            (serde_json::from_slice::<ToSession>(&body), fds.len())
        else {
            return Ok(None);
        };
        let connection = fds.remove(0);
        let memfd = fds.remove(0);
        let Some(body) = read_request(&memfd) else {
            return Ok(None);
        };
        let request = protocol::parse_request(&body);
        Ok(Some(Taken {
            request,
            peer,
            connection,
            memfd,
        }))
    }

    /// Polls every source until one is ready or `wake`; the sources that are.
    fn poll(&mut self, control: &OwnedFd, wake: Option<Instant>) -> Vec<Source> {
        let mut sources = vec![Source::Init, Source::Events];
        let mut fds = vec![
            PollFd::new(self.jail.init_fd(), PollFlags::POLLIN),
            PollFd::new(self.jail.events_fd(), PollFlags::POLLIN),
        ];
        // Once the server has shut it (draining), it has no requests left, and its
        // hang-up, which poll always reports, is known.
        let draining = self.drain_by.is_some();
        if !draining {
            sources.push(Source::Control);
            fds.push(PollFd::new(control.as_fd(), PollFlags::POLLIN));
        }
        let (theirs, their_fds) = self.processes.poll_fds();
        sources.extend(theirs);
        fds.extend(their_fds);
        let (watching, watch_fds) = super::session_watch_stream::watch_stream_fds(&self.watches);
        sources.extend(watching);
        fds.extend(watch_fds);
        let (cells, cell_fds) = self.cells.poll_fds(&self.interpreters);
        sources.extend(cells);
        fds.extend(cell_fds);
        let (starting, starting_fds) = self.starting_fds();
        sources.extend(starting);
        fds.extend(starting_fds);
        let reader = &self.processes.requests;
        let buffered = reader.has_frame() && !draining;
        // To the microsecond (ppoll): a cell's end waits for the kernel's word that its
        // interpreter is back waiting, looked for every 100 µs at first, which poll's
        // milliseconds would make 1 ms.
        let timeout = match buffered {
            true => Some(Duration::ZERO),
            false => wake.map(|at| at.saturating_duration_since(Instant::now())),
        };
        let timeout = timeout.map(nix::sys::time::TimeSpec::from_duration);
        let _ = nix::poll::ppoll(&mut fds, timeout, None);
        let mut ready: Vec<Source> = sources
            .iter()
            .zip(&fds)
            .filter(|(_, fd)| fd.any().unwrap_or(false))
            .map(|(source, _)| *source)
            .collect();
        if buffered && !ready.iter().any(|s| matches!(s, Source::Control)) {
            ready.push(Source::Control);
        }
        ready
    }

    /// The watched programs' sources that are ready, then their time limits, their
    /// clients' patience, and the verdicts of those that ended (events already noted).
    pub(super) fn serve_processes(&mut self, ready: &[Source]) {
        for source in ready {
            self.serve_source(*source);
        }
        let events_ready = ready.iter().any(|s| matches!(s, Source::WatchEvents));
        if events_ready || ready.iter().any(|s| matches!(s, Source::WatchStream)) {
            self.serve_watch_streams(events_ready);
        }
        self.processes.closing.retain(|client| !client.gone);
        for process in self.processes.watched.values_mut() {
            process.listeners.retain(|client| !client.gone);
        }
        self.enforce_deadlines();
        self.finish_ended();
    }

    fn serve_source(&mut self, source: Source) {
        let processes = &mut self.processes;
        match source {
            Source::Control | Source::Init | Source::Events => {}
            Source::WatchEvents | Source::WatchStream | Source::Cell(..) => {}
            Source::Output(id, index) => {
                if let Some(process) = processes.watched.get_mut(&id)
                    && process.read(index)
                    && process.cut.is_none()
                {
                    process.cut = Some(Cut::OutputLimit);
                    let _ = self.jail.signal(id, Signal::SIGKILL, true);
                }
            }
            Source::Stdin(id) => {
                if let Some(process) = processes.watched.get_mut(&id) {
                    process.feed_stdin();
                }
            }
            Source::Waiting(id) => {
                let Some(process) = processes.watched.get_mut(&id) else {
                    return;
                };
                let Some(foreground) = process.foreground.as_mut() else {
                    return;
                };
                let alive = foreground.client.flush();
                if (!alive || client_gone(&foreground.client.connection)) && process.cut.is_none() {
                    // Nobody waits for the result: the command goes.
                    process.foreground = None;
                    process.cut = Some(Cut::ClientGone);
                    let _ = self.jail.signal(id, Signal::SIGKILL, true);
                }
            }
            // Clients let go are removed after the turn (the sources name them by index).
            Source::Connected(id, index) => {
                if let Some(process) = processes.watched.get_mut(&id)
                    && let Some(client) = process.listeners.get_mut(index)
                {
                    client.gone = !client.flush() || client_gone(&client.connection);
                }
            }
            Source::Closing(index) => {
                if let Some(client) = processes.closing.get_mut(index) {
                    client.gone = !client.flush() || !client.has_pending();
                }
            }
        }
    }

    /// The jail's events: a watched program's end or failure is noted; an interpreter
    /// that died is forgotten.
    fn absorb_process_events(&mut self) {
        for event in self.jail.events() {
            self.note_event(event);
        }
    }

    /// An event of the jail: a watched program's end or failure is noted (its verdict
    /// goes out from the session's loop); a running cell's interpreter's end is the
    /// cell's; an idle interpreter that ended is forgotten.
    pub(super) fn note_event(&mut self, event: Event) {
        match event {
            Event::Started { id, pid } => {
                if let Some(process) = self.processes.watched.get_mut(&id) {
                    process.pid = Some(pid);
                    if let Some(mut starter) = process.announce.take() {
                        starter.queue(&process.describe(), None);
                        self.close_client(starter);
                    }
                }
            }
            Event::Failed { id, code, message } => {
                if let Some(process) = self.processes.watched.get_mut(&id) {
                    process.failure = Some((code, message));
                } else {
                    self.starting_event(id, Some(message));
                }
            }
            Event::Ended { id, end } => {
                if let Some(process) = self.processes.watched.get_mut(&id) {
                    process.ended = Some(end);
                } else if !self.cell_interpreter_ended(id, end) && !self.starting_event(id, None) {
                    self.forget_interpreter(id);
                }
            }
        }
    }

    /// Time limits, and clients that take nothing of what waits for them.
    fn enforce_deadlines(&mut self) {
        let patience = self.processes.patience;
        let now = Instant::now();
        for (id, process) in &mut self.processes.watched {
            if process.cut.is_none() && process.deadline.is_some_and(|at| now >= at) {
                process.cut = Some(Cut::TimeLimit);
                let _ = self.jail.signal(*id, Signal::SIGKILL, true);
            }
            process
                .listeners
                .retain(|client| client.give_up_at(patience).is_none_or(|at| now < at));
            let stalled = process
                .foreground
                .as_ref()
                .and_then(|f| f.client.give_up_at(patience))
                .is_some_and(|at| now >= at);
            if stalled && process.cut.is_none() {
                process.foreground = None;
                process.cut = Some(Cut::ClientGone);
                let _ = self.jail.signal(*id, Signal::SIGKILL, true);
            }
        }
        self.processes
            .closing
            .retain(|client| client.give_up_at(patience).is_none_or(|at| now < at));
    }

    /// Programs that ended: their verdicts, to whoever waits for them.
    fn finish_ended(&mut self) {
        let ended: Vec<u32> = self
            .processes
            .watched
            .iter()
            .filter(|(_, process)| process.ended.is_some() && process.verdict.is_none())
            .map(|(id, _)| *id)
            .collect();
        for id in ended {
            let mut process = self.processes.watched.remove(&id).expect("listed");
            process.finish_output();
            let end = process.ended.expect("ended");
            let program = ProgramEnd::of_session(&end, process.failure.take());
            let outcome = outcome::decide(Some(program), None, Cut::ended_by(process.cut))
                .expect("decide errs only when the program's end is unknown");
            let exec_end = ExecEnd {
                outcome,
                limit: process.time_limit,
                wall: process.started.elapsed(),
                ended: end,
                oom_kills: self.oom_kills().saturating_sub(process.oom_before),
            };
            let served = crate::verdict::Served {
                peer: process.peer,
                argv: &process.argv,
            };
            let ran = Ran::Command {
                pid: process.pid,
                as_root: process.as_root,
            };
            let verdict = self.verdict(exec_end, &process.captured, served, ran);
            if let Some(mut foreground) = process.foreground.take() {
                let captured = &mut process.captured;
                let kept = captured.stdout.len() + captured.stderr.len();
                let exec = match foreground.stream {
                    true => ExecReply {
                        verdict: Box::new(verdict.clone()),
                        stdout: None,
                        stderr: None,
                        cell: None,
                        dropped: Some(foreground.client.dropped),
                    },
                    false => ExecReply {
                        verdict: Box::new(verdict.clone()),
                        stdout: Some(std::mem::take(&mut captured.stdout)),
                        stderr: Some(std::mem::take(&mut captured.stderr)),
                        cell: None,
                        dropped: None,
                    },
                };
                let reply = SessionReply::Exec(Box::new(exec));
                if kept <= QUEUED_OUTPUT {
                    foreground.client.queue(&reply, None);
                    self.close_client(foreground.client);
                } else {
                    // Encoded straight into the socket (JSON escaping may make it six
                    // times its size: never held whole), within the client's patience.
                    let now = Instant::now();
                    let give_up = sooner(Some(now + self.processes.patience), self.end_by());
                    let connection = foreground.client.connection.as_fd();
                    let _ = protocol::write_reply_by(connection, &reply, give_up.expect("some"));
                }
            }
            process.verdict = Some(Box::new(verdict));
            // Ended before the jail said its pid (it could not be started): its starter
            // is told how it ended.
            if let Some(mut starter) = process.announce.take() {
                starter.queue(&process.describe(), None);
                self.close_client(starter);
            }
            for mut client in std::mem::take(&mut process.listeners) {
                client.queue(&process.end_frame(client.dropped), None);
                self.close_client(client);
            }
            if process.background {
                self.processes.watched.insert(id, process);
            }
        }
        // Ended background processes are kept for a while (their verdicts, their
        // backlogs), the oldest forgotten first.
        let gone: Vec<u32> = self
            .processes
            .watched
            .iter()
            .filter(|(_, process)| !process.running())
            .map(|(id, _)| *id)
            .collect();
        for id in gone.iter().take(gone.len().saturating_sub(KEEP_ENDED)) {
            self.processes.watched.remove(id);
        }
    }

    /// A client with its last frames queued: written as it takes them.
    pub(super) fn close_client(&mut self, mut client: Listener) {
        client.answered();
        if client.flush() && client.has_pending() {
            self.processes.closing.push(client);
        }
    }

    /// The session ends: everyone waiting is told so (within a second at most, all
    /// together), then let go.
    fn end_clients(&mut self, why: &str) {
        let message = error_reply(&Error::not_found(format!(
            "brig serve: session {} ended: {why}",
            self.id
        )));
        let mut clients = std::mem::take(&mut self.processes.closing);
        for process in std::mem::take(&mut self.processes.watched).into_values() {
            for mut client in process
                .listeners
                .into_iter()
                .chain(process.foreground.map(|f| f.client))
                .chain(process.announce)
            {
                client.queue(&message, None);
                clients.push(client);
            }
        }
        for mut client in self.watches.take_streams() {
            client.queue(&message, None);
            clients.push(client);
        }
        clients.extend(self.end_cells(&message));
        let by = Instant::now() + Duration::from_secs(1);
        for client in &mut clients {
            client.flush_by(by);
        }
    }

    /// One request: the loop's own (commands, processes), or one answered at once.
    fn take_request(
        &mut self,
        request: Result<Request>,
        peer: Peer,
        connection: OwnedFd,
        memfd: OwnedFd,
    ) {
        let Some((request, connection, memfd)) = self
            .lifecycle_request(request, connection, memfd)
            .and_then(|(request, connection, memfd)| {
                self.watch_stream_request(request, connection, memfd)
            })
        else {
            return;
        };
        let immediate = match request {
            Ok(Request::SessionResize {
                pid,
                tag,
                cols,
                rows,
                ..
            }) => {
                let size = super::protocol::PtySize { cols, rows };
                let reply = self.resize_terminal(pid, tag.as_deref(), size);
                (
                    connection,
                    memfd,
                    reply.unwrap_or_else(|err| error_reply(&err)),
                )
            }
            Ok(Request::SessionExec {
                command,
                code: None,
                stdin,
                env,
                chdir,
                time_limit,
                output_limit,
                stream,
                background,
                tag,
                pty,
                user,
                ..
            }) if !command.is_empty() || pty.is_some() => {
                let exec = CommandExec {
                    command,
                    stdin,
                    env,
                    chdir,
                    time_limit,
                    output_limit,
                    user,
                };
                let form = Form {
                    stream,
                    // A terminal's program runs in the background.
                    background: background || pty.is_some(),
                    tag,
                };
                match self.start_command(exec, form, pty, peer, connection, memfd) {
                    Ok(()) => return,
                    Err((connection, memfd, err)) => (connection, memfd, error_reply(&err)),
                }
            }
            Ok(Request::SessionPs { .. }) => {
                let processes = self
                    .processes
                    .watched
                    .values()
                    .map(|process| ListedProcess {
                        process: process.process(),
                    })
                    .collect();
                (connection, memfd, SessionReply::Processes { processes })
            }
            Ok(Request::SessionConnect { pid, tag, .. }) => {
                let found = self
                    .find_process("session_connect", pid, tag.as_deref())
                    .and_then(|id| match self.processes.watched[&id].listeners.len() {
                        MAX_LISTENERS.. => Err(Error::input(format!(
                            "session_connect: that process has {MAX_LISTENERS} clients connected already (the most); close one"
                        ))),
                        _ => Ok(id),
                    });
                match found {
                    Ok(id) => {
                        let process = self.processes.watched.get_mut(&id).expect("found");
                        let mut client = process.connect(connection).answering(Some(memfd));
                        if process.running() {
                            client.flush();
                            process.listeners.push(client);
                        } else {
                            self.close_client(client);
                        }
                        return;
                    }
                    Err(err) => (connection, memfd, error_reply(&err)),
                }
            }
            Ok(Request::SessionStdin {
                pid,
                tag,
                data,
                base64,
                close,
                ..
            }) => {
                let reply = session_pty::stdin_bytes(data, base64).and_then(|data| {
                    self.find_process("session_stdin", pid, tag.as_deref())
                    .and_then(|id| {
                        let process = self.processes.watched.get_mut(&id).expect("found");
                        let pid = process.pid.unwrap_or_default();
                        if !process.running() {
                            return Err(Error::input(format!(
                                "session_stdin: process {pid} has ended; see session_ps"
                            )));
                        }
                        if close && process.pty.is_some() {
                            return Err(Error::input(format!(
                                "session_stdin: process {pid} reads a terminal, which has no end to close; send \"\\u0004\" (Ctrl-D) for end of input, or session_kill"
                            )));
                        }
                        process
                            .queue_stdin(&data, close)
                            .map(|written| SessionReply::Stdin {
                                pid,
                                written,
                                closed: close,
                            })
                            .map_err(|err| err.within(format!("session_stdin: process {pid}")))
                    })
                });
                (
                    connection,
                    memfd,
                    reply.unwrap_or_else(|err| error_reply(&err)),
                )
            }
            Ok(Request::SessionSignal {
                pid, tag, signal, ..
            }) => {
                let reply = parse_signal(&signal)
                    .map_err(Error::input)
                    .and_then(|signal| {
                        self.signal_process("session_signal", pid, tag.as_deref(), signal)
                    });
                (
                    connection,
                    memfd,
                    reply.unwrap_or_else(|err| error_reply(&err)),
                )
            }
            Ok(Request::SessionKill { pid, tag, .. }) => {
                let reply =
                    self.signal_process("session_kill", pid, tag.as_deref(), Signal::SIGKILL);
                (
                    connection,
                    memfd,
                    reply.unwrap_or_else(|err| error_reply(&err)),
                )
            }
            // A cell: run at once when its context is free, else queued.
            Ok(request @ Request::SessionExec { .. }) => {
                return self.take_cell(request, peer, connection, memfd);
            }
            // Answered at once, or once its interpreter is ready (create, restart).
            Ok(request @ Request::SessionContext { .. }) => {
                return self.take_context(request, connection, memfd);
            }
            // Files (a reply of at most 512 KiB of data) and errors: queued.
            request => {
                // None: the answer went out already (a streamed read).
                let Some(reply) = self.handle(request, peer, &connection) else {
                    let _ = nix::unistd::ftruncate(&memfd, 0);
                    return;
                };
                (connection, memfd, reply)
            }
        };
        let (connection, memfd, reply) = immediate;
        let mut client = Listener::new(connection).answering(Some(memfd));
        client.queue(&reply, None);
        self.close_client(client);
    }

    /// The process a request names, by pid or tag.
    pub(super) fn find_process(
        &self,
        what: &str,
        pid: Option<u32>,
        tag: Option<&str>,
    ) -> Result<u32> {
        let found = match (pid, tag) {
            // A pid the jail reuses names its running process first.
            (Some(pid), None) => self
                .processes
                .watched
                .values()
                .filter(|p| p.pid == Some(pid))
                .max_by_key(|p| (p.running(), p.id))
                .map(|p| p.id),
            (None, Some(tag)) => self
                .processes
                .watched
                .values()
                .rev()
                .find(|p| p.tag.as_deref() == Some(tag))
                .map(|p| p.id),
            _ => {
                return Err(Error::input(format!(
                    "{what}: give either \"pid\" or \"tag\" (one of them)"
                )));
            }
        };
        found.ok_or_else(|| {
            let which = match (pid, tag) {
                (Some(pid), _) => format!("pid {pid}"),
                (_, tag) => format!("tag {:?}", tag.unwrap_or_default()),
            };
            Error::input(format!(
                "{what}: no process with {which} in session {}; see session_ps",
                self.id
            ))
        })
    }

    fn signal_process(
        &mut self,
        what: &str,
        pid: Option<u32>,
        tag: Option<&str>,
        signal: Signal,
    ) -> Result<SessionReply> {
        let id = self.find_process(what, pid, tag)?;
        let pid = self.processes.watched[&id].pid.unwrap_or_default();
        if !self.processes.watched[&id].running() {
            return Err(Error::input(format!(
                "{what}: process {pid} has ended; see session_ps"
            )));
        }
        self.jail.signal(id, signal, true)?;
        Ok(SessionReply::Signaled {
            pid,
            signal: signal.as_str().to_string(),
        })
    }

    /// Starts a command: watched in the foreground (its client waits), or in the
    /// background (answered at once). On an error, the connection comes back with it.
    fn start_command(
        &mut self,
        exec: CommandExec,
        form: Form,
        pty: Option<super::protocol::PtySize>,
        peer: Peer,
        connection: OwnedFd,
        memfd: OwnedFd,
    ) -> std::result::Result<(), (OwnedFd, OwnedFd, Error)> {
        let result = match pty {
            Some(size) => self.start_terminal(exec, &form, size, peer),
            None => self.spawn_watched(exec, &form, peer),
        };
        let (id, mut watched) = match result {
            Ok(started) => started,
            Err(err) => return Err((connection, memfd, err)),
        };
        let client = Listener::new(connection).answering(Some(memfd));
        match form.background {
            // Answered once the jail's init says its pid (an event).
            true => watched.announce = Some(client),
            false => {
                watched.foreground = Some(Foreground {
                    client,
                    stream: form.stream,
                });
            }
        }
        self.processes.watched.insert(id, watched);
        Ok(())
    }

    /// Whether the session may start another command: fewer than [`MAX_RUNNING`] run,
    /// and none has the tag `form` asks for.
    pub(super) fn check_room(&self, form: &Form) -> Result<()> {
        if self.processes.running_ids().len() >= MAX_RUNNING {
            return Err(Error::input(format!(
                "session_exec: the session runs {MAX_RUNNING} commands already (the most); end one (session_kill) first"
            )));
        }
        if let Some(tag) = &form.tag
            && self
                .processes
                .watched
                .values()
                .any(|p| p.running() && p.tag.as_ref() == Some(tag))
        {
            return Err(Error::input(format!(
                "tag: a running process of the session has the tag {tag:?} already; choose another"
            )));
        }
        Ok(())
    }

    fn spawn_watched(
        &mut self,
        exec: CommandExec,
        form: &Form,
        peer: Peer,
    ) -> Result<(u32, Watched)> {
        check_form(form, false)?;
        let (mut time_limit, mut limit) = self.limits(exec.time_limit, exec.output_limit)?;
        if form.background {
            // A background process lives until it is killed or the session ends; it
            // has the limits its request asks for, and no others.
            time_limit = time_limit.filter(|_| exec.time_limit.is_some());
            if exec.output_limit.is_none() {
                limit = u64::MAX;
            }
        }
        self.check_room(form)?;
        let asked_env = exec.env.clone();
        let as_root = self.runs_as_root(exec.user.as_deref())?;
        let program = self.program(exec.command, exec.env, exec.chdir, as_root)?;
        let (stdin_read, stdin_write) = pipe("the session")?;
        // The one collector makes the output pipes (the jail's ends blocking, its own
        // not); it keeps the output for the reply of a foreground exec that does not
        // stream, and hands it on to the watcher otherwise.
        let (mut output, ends) = Output::new(limit)
            .map_err(|errno| Error::os("create the pipes for a command's output", errno))?;
        match !form.background && !form.stream {
            true => output.capture(limit),
            false => output.to_caller(),
        }
        let oom_before = self.oom_kills();
        let id = self.jail.spawn(
            &program,
            &[stdin_read.as_fd(), ends.stdout.as_fd(), ends.stderr.as_fd()],
        )?;
        drop((stdin_read, ends));
        nonblocking(&stdin_write);
        let watch = Watch {
            argv: program.argv,
            env: asked_env,
            cwd: program.chdir.to_string_lossy().into_owned(),
            tag: form.tag.clone(),
            peer,
            background: form.background,
            time_limit,
            oom_before,
        };
        let stdin = exec.stdin.unwrap_or_default().into_bytes();
        // A foreground command's stdin closes after the request's; a background
        // process's stays open for session_stdin.
        let mut watched = Watched::new(id, watch, output, stdin_write, stdin);
        watched.as_root = as_root;
        watched.feed_stdin();
        Ok((id, watched))
    }
}

/// How an exec runs: streamed, in the background (with a tag).
pub(super) struct Form {
    pub stream: bool,
    pub background: bool,
    pub tag: Option<String>,
}

/// The one-line errors of an exec's form; `cell` for a code cell.
pub(super) fn check_form(form: &Form, cell: bool) -> Result<()> {
    if form.background && form.stream {
        return Err(Error::input(
            "session_exec: \"background\" and \"stream\" together; a background process streams to whoever connects (session_connect): drop \"stream\"",
        ));
    }
    if form.background && cell {
        return Err(Error::input(
            "session_exec: \"background\" is for commands, not code cells; run the cell in the foreground or start a command",
        ));
    }
    if form.tag.is_some() && !form.background {
        return Err(Error::input(
            "session_exec: \"tag\" names a background process; add \"background\": true or drop it",
        ));
    }
    if let Some(tag) = &form.tag
        && (tag.is_empty()
            || tag.len() > super::session_process::MAX_TAG
            || tag.chars().any(char::is_control))
    {
        return Err(Error::input(format!(
            "tag: 1 to {} characters, none of them control characters",
            super::session_process::MAX_TAG
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_s_form_is_checked_with_one_line_errors() {
        let form = |stream, background, tag: Option<&str>| Form {
            stream,
            background,
            tag: tag.map(String::from),
        };
        assert!(check_form(&form(true, false, None), true).is_ok());
        assert!(check_form(&form(false, true, Some("web")), false).is_ok());
        for (form, cell, needle) in [
            (
                form(true, true, None),
                false,
                "\"background\" and \"stream\"",
            ),
            (form(false, true, None), true, "not code cells"),
            (
                form(false, false, Some("web")),
                false,
                "\"tag\" names a background",
            ),
            (form(false, true, Some("")), false, "tag: 1 to 128"),
            (form(false, true, Some("a\nb")), false, "control characters"),
            (
                form(false, true, Some(&"x".repeat(129))),
                false,
                "tag: 1 to 128",
            ),
        ] {
            let err = check_form(&form, cell).unwrap_err();
            let message = err.to_string();
            assert!(message.contains(needle), "{message}");
            assert!(!message.contains('\n'), "{message}");
            assert_eq!(err.kind(), crate::error::ErrorKind::BadInput);
        }
    }
}
