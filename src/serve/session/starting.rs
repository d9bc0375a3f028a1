//! An interpreter that starts, as a phase of the session's one loop: spawned at once,
//! then advanced by the loop like a running cell — its control socket and stderr are
//! tagged sources of the one poll, its deadline ([`STARTUP`]) and its next look whether
//! the kernel shows it waiting for its first request (the confirmation backoff) come out
//! of the one `next_deadline`. It is ready when it said so and waits where brig expects
//! (`Interpreter::waiting`'s first reading: `learn_idle`); then it joins the session's
//! interpreters and what waited for it goes on: the cells queued for its context, the
//! `session_context` requests (create, restart) whose answer is its start.

use super::cell::CellFd;
use super::session_loop::Source;
use super::session_process::Listener;
use super::*;

/// An interpreter on its way to its first request.
pub(super) struct Starting {
    /// Its context.
    key: String,
    language: Language,
    interpreter: Interpreter,
    /// What it says on stderr (kept, to say why it did not start).
    startup: Option<Output>,
    deadline: Instant,
    /// The jail's init could not run it, or it ended.
    failure: Option<String>,
    ended: bool,
    /// It said it is ready; brig now looks for it waiting, at `look_at` (doubling pause).
    ready: bool,
    pause: Duration,
    look_at: Instant,
    /// The `session_context` requests answered when it is ready (or not).
    waiters: Vec<Waiter>,
}

/// A `session_context` request that waits for its context's interpreter.
pub(super) struct Waiter {
    client: Listener,
    reply: SessionReply,
    /// A context being created: it exists once its interpreter is ready.
    context: Option<context::Context>,
}

/// The answer of a `session_context` request: now, or when the interpreter of context
/// `key` is ready.
pub(super) enum ContextAnswer {
    Now(SessionReply),
    WhenStarted {
        key: String,
        reply: SessionReply,
        context: Option<context::Context>,
    },
}

impl Starting {
    fn wake(&self) -> Instant {
        // Its end, noted outside its turn, is seen at once.
        if self.ended {
            return Instant::now();
        }
        match self.ready {
            true => self.deadline.min(self.look_at),
            false => self.deadline,
        }
    }
}

impl<'p> Session<'p> {
    /// Starts the interpreter of context `target` unless it runs or starts already.
    pub(super) fn start_context(&mut self, target: &context::Target) -> Result<()> {
        if self.interpreters.contains_key(&target.id) || self.starting_of(&target.id).is_some() {
            return Ok(());
        }
        let interpreter = self.spawn_interpreter(target.language, target.cwd.clone())?;
        let id = interpreter.id;
        let mut startup = match interpreter.collector(4096) {
            Ok(collector) => collector,
            Err(err) => {
                let _ = self.jail.signal(id, Signal::SIGKILL, true);
                return Err(err);
            }
        };
        // Its stderr only: its stdout is the first cell's.
        startup.without(0);
        startup.capture(4096);
        let now = Instant::now();
        let starting = Starting {
            key: target.id.clone(),
            language: target.language,
            interpreter,
            startup: Some(startup),
            deadline: now + STARTUP,
            failure: None,
            ended: false,
            ready: false,
            pause: CONFIRM_FIRST,
            look_at: now,
            waiters: Vec::new(),
        };
        self.cells.starting.insert(id, starting);
        Ok(())
    }

    /// The program id of the interpreter of context `key` that starts, if one does.
    pub(super) fn starting_of(&self, key: &str) -> Option<u32> {
        self.cells
            .starting
            .iter()
            .find(|(_, starting)| starting.key == key)
            .map(|(id, _)| *id)
    }

    /// The contexts being created (their interpreters start): `session_context`'s bound
    /// counts them.
    pub(super) fn contexts_being_created(&self) -> usize {
        (self.cells.starting.values())
            .flat_map(|starting| &starting.waiters)
            .filter(|waiter| waiter.context.is_some())
            .count()
    }

    /// The starting interpreters' descriptors, to poll: its socket (its "ready") and its
    /// stderr.
    pub(super) fn starting_fds(&self) -> (Vec<Source>, Vec<PollFd<'_>>) {
        let mut sources = Vec::new();
        let mut fds = Vec::new();
        for (id, starting) in &self.cells.starting {
            if !starting.ready {
                sources.push(Source::Cell(*id, CellFd::Control));
                fds.push(PollFd::new(
                    starting.interpreter.control.as_fd(),
                    PollFlags::POLLIN,
                ));
            }
            for (index, pipe) in starting.startup.iter().flat_map(Output::open_pipes) {
                sources.push(Source::Cell(*id, CellFd::Output(index)));
                fds.push(PollFd::new(pipe, PollFlags::POLLIN));
            }
        }
        (sources, fds)
    }

    /// The soonest of the starting interpreters' deadlines and looks.
    pub(super) fn starting_deadline(&self) -> Option<Instant> {
        self.cells.starting.values().map(Starting::wake).min()
    }

    /// A jail event for a starting interpreter (its failure, its end); false when
    /// program `id` is none.
    pub(super) fn starting_event(&mut self, id: u32, failure: Option<String>) -> bool {
        match self.cells.starting.get_mut(&id) {
            Some(starting) => {
                match failure {
                    Some(message) => starting.failure = Some(message),
                    None => starting.ended = true,
                }
                true
            }
            None => false,
        }
    }

    /// Each starting interpreter one step on: ready (it joins the interpreters, its
    /// waiters are answered), failed (killed, its waiters and its context's first
    /// queued cell told why), or still on its way.
    pub(super) fn advance_starting(&mut self) {
        let ids: Vec<u32> = self.cells.starting.keys().copied().collect();
        for id in ids {
            let starting = self.cells.starting.get_mut(&id).expect("starting");
            let result = starting.step();
            match result {
                None => {}
                Some(Ok(())) => {
                    let starting = self.cells.starting.remove(&id).expect("starting");
                    let key = starting.key.clone();
                    self.interpreters.insert(key.clone(), starting.interpreter);
                    for waiter in starting.waiters {
                        if let Some(context) = waiter.context {
                            self.contexts.insert(key.clone(), context);
                        }
                        let mut client = waiter.client;
                        client.queue(&waiter.reply, None);
                        self.close_client(client);
                    }
                }
                Some(Err(why)) => {
                    let starting = self.cells.starting.remove(&id).expect("starting");
                    // What it started, if anything, goes with it.
                    let _ = self.jail.signal(id, Signal::SIGKILL, true);
                    let err = Error::setup(why);
                    for waiter in starting.waiters {
                        let mut client = waiter.client;
                        client.queue(&error_reply(&err), None);
                        self.close_client(client);
                    }
                    // The cell that asked for it is told; the next one starts another.
                    let first = (self.cells.queued.get_mut(&starting.key))
                        .and_then(std::collections::VecDeque::pop_front);
                    if let Some(pending) = first {
                        self.refuse_pending(pending, &err);
                    }
                }
            }
        }
    }

    /// A `session_context` request, answered now or once its interpreter is ready.
    pub(super) fn take_context(&mut self, request: Request, connection: OwnedFd, memfd: OwnedFd) {
        let Request::SessionContext {
            action,
            language,
            cwd,
            context,
            ..
        } = request
        else {
            return;
        };
        let mut client = Listener::new(connection).answering(Some(memfd));
        let answer = self.context_request(action, language, cwd, context);
        let reply = match answer {
            Err(err) => error_reply(&err),
            Ok(ContextAnswer::Now(reply)) => reply,
            Ok(ContextAnswer::WhenStarted {
                key,
                reply,
                context,
            }) => match self.starting_of(&key) {
                Some(id) => {
                    let starting = self.cells.starting.get_mut(&id).expect("starting");
                    starting.waiters.push(Waiter {
                        client,
                        reply,
                        context,
                    });
                    return;
                }
                // Ready already.
                None => {
                    if let Some(context) = context {
                        self.contexts.insert(key, context);
                    }
                    reply
                }
            },
        };
        client.queue(&reply, None);
        self.close_client(client);
    }

    /// Ends the interpreter of context `key` while it starts (the context is restarted
    /// or removed): its waiters are told.
    pub(super) fn stop_starting(&mut self, key: &str) {
        let Some(id) = self.starting_of(key) else {
            return;
        };
        let starting = self.cells.starting.remove(&id).expect("starting");
        let _ = self.jail.signal(id, Signal::SIGKILL, true);
        self.jail.wait_for_end(id);
        let err = Error::input(format!(
            "context: context {key:?} was restarted or removed while its interpreter started; \
             list the contexts (session_context \"list\") and try again"
        ));
        for waiter in starting.waiters {
            let mut client = waiter.client;
            client.queue(&error_reply(&err), None);
            self.close_client(client);
        }
    }

    /// The session ends: the clients waiting for an interpreter get `message`.
    pub(super) fn end_starting(&mut self, message: &SessionReply) -> Vec<Listener> {
        let mut clients = Vec::new();
        for (_, starting) in std::mem::take(&mut self.cells.starting) {
            for waiter in starting.waiters {
                let mut client = waiter.client;
                client.queue(message, None);
                clients.push(client);
            }
        }
        clients
    }
}

impl Starting {
    /// Reads what came; Some when it is ready (Ok) or cannot be (why).
    fn step(&mut self) -> Option<std::result::Result<(), String>> {
        let name = language_name(self.language);
        if let Some(startup) = self.startup.as_mut() {
            startup.pump(1);
        }
        if !self.ready
            && let Some(line) = self.interpreter.next_line()
            && is_ready(&line)
            && self.interpreter.pid.is_some()
        {
            self.ready = true;
            self.look_at = Instant::now();
        }
        if self.ready && Instant::now() >= self.look_at {
            match self.learn_idle() {
                Ok(true) => return Some(Ok(())),
                Ok(false) => {
                    self.look_at = Instant::now() + self.pause;
                    self.pause = (self.pause * 2).min(CONFIRM_MOST);
                }
                Err(why) => {
                    return Some(Err(format!(
                        "the session's {name} interpreter cannot be watched: {why}; brig reads \
                         it to tell the interpreter's replies from a cell's (see \
                         docs/protocol.md, the trust boundary)"
                    )));
                }
            }
        }
        // Its end (after the jail's init said why it could not run it, if it could not).
        if self.ended {
            let stderr = self.startup.take().map(Output::into_captured);
            let stderr = stderr.map(|captured| captured.stderr).unwrap_or_default();
            let why = self
                .failure
                .take()
                .unwrap_or_else(|| format!("it ended before it was ready: {}", stderr.trim()));
            return Some(Err(format!(
                "the session's {name} interpreter did not start: {why}"
            )));
        }
        if Instant::now() >= self.deadline {
            return Some(Err(match self.ready {
                true => format!(
                    "the session's {name} interpreter cannot be watched: it did not wait for a \
                     request within {}s; brig reads it to tell the interpreter's replies from a \
                     cell's (see docs/protocol.md, the trust boundary)",
                    STARTUP.as_secs()
                ),
                false => format!(
                    "the session's {name} interpreter was not ready within {}s",
                    STARTUP.as_secs()
                ),
            }));
        }
        None
    }

    /// The kernel's word whether the ready interpreter waits for its first request, and
    /// in what (Node: on which epoll descriptor); an error when brig cannot read it (fail
    /// closed).
    fn learn_idle(&mut self) -> std::result::Result<bool, String> {
        let interpreter = &mut self.interpreter;
        let pid = interpreter.pid.ok_or("its pid is unknown")?;
        if let Syscall::In { number, first } = kernel::syscall(pid)? {
            match interpreter.idle {
                Idle::Receive(inode) if interpreter.reads_socket(number, first, inode)? => {
                    return Ok(true);
                }
                Idle::Epoll(None, inode)
                    if kernel::is_epoll_wait(number)
                        && kernel::epoll_watches(pid, first, inode)? =>
                {
                    interpreter.idle = Idle::Epoll(Some(first), inode);
                    return Ok(true);
                }
                _ => {}
            }
        }
        Ok(false)
    }
}
