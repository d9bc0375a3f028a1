//! A session's code contexts and its cells' rich results.
//!
//! A context is one interpreter of the session (Python, Node or bash) with its own state;
//! all of them run in the session's jail and count against its pids and memory (one
//! cgroup). Each language has a default context, named after it (`python`, `node`,
//! `bash`), started at its first cell as before; `session_context` creates more (at most
//! [`MAX_CONTEXTS`]), lists, restarts (a fresh interpreter) and removes them.
//!
//! A cell's reply may carry `results`: mime bundles (what it displayed, its figures, its
//! final value). They are the interpreter's data, checked here for shape, and count against
//! the exec's output limit together with its stdout and stderr.

use super::starting::ContextAnswer;
use super::{Session, language_name};
use crate::error::{Error, Result};
use crate::serve::protocol::{ContextAction, Language};
use crate::serve::reply::{Bundle, CellError, ContextInfo, SessionReply};
use nix::sys::signal::Signal;
use serde::Serialize;
use std::path::PathBuf;

/// The most contexts `session_context` may create in one session (besides the three
/// default ones); each is a running interpreter.
pub const MAX_CONTEXTS: usize = 16;

/// A context created by `session_context`.
pub struct Context {
    pub language: Language,
    pub cwd: Option<PathBuf>,
}

/// The context a cell runs in: its id (the interpreter map's key), language and working
/// directory.
#[derive(Clone)]
pub struct Target {
    pub id: String,
    pub language: Language,
    pub cwd: Option<PathBuf>,
}

impl Target {
    /// The default context of `language`.
    pub fn default_of(language: Language) -> Target {
        Target {
            id: language_name(language).to_string(),
            language,
            cwd: None,
        }
    }
}

fn is_default(id: &str) -> Option<Language> {
    [Language::Python, Language::Node, Language::Bash]
        .into_iter()
        .find(|language| language_name(*language) == id)
}

/// The line that hands cell `cell` to an interpreter. Python and Node read a JSON line;
/// bash (which has no JSON parser) reads the id on a line, then the code up to a NUL byte
/// (which its code cannot hold: refused before, in `Session::target`).
pub fn request_line(language: Language, cell: u64, code: &str) -> Vec<u8> {
    match language {
        Language::Bash => format!("{cell}\n{code}\0").into_bytes(),
        _ => {
            let mut line = serde_json::to_vec(&CellRequest { id: cell, code }).expect("JSON");
            line.push(b'\n');
            line
        }
    }
}

/// Whether `mime` is a media type as bundles name them: `type/subtype`, short, printable.
fn is_mime(mime: &str) -> bool {
    mime.len() <= 127
        && mime.split_once('/').is_some_and(|(kind, sub)| {
            !kind.is_empty()
                && !sub.is_empty()
                && mime
                    .bytes()
                    .all(|byte| byte.is_ascii_graphic() && !b"\"\\".contains(&byte))
        })
}

/// Checks one mime bundle of a reply: `is_main_result` a boolean, every other key a mime
/// type whose value is text (base64 for binary types), or any JSON for a JSON type.
pub fn check_bundle(bundle: &Bundle) -> std::result::Result<(), String> {
    for (key, value) in bundle {
        let fits = match key.as_str() {
            "is_main_result" => value.is_boolean(),
            mime if is_mime(mime) => {
                value.is_string() || mime == "application/json" || mime.ends_with("+json")
            }
            _ => false,
        };
        if !fits {
            return Err(format!(
                "a reply whose result bundle has {key:?}, which is not a mime type with its \
                 data (nor is_main_result)"
            ));
        }
    }
    Ok(())
}

/// The results that fit in `room` bytes (their JSON), in order; what does not fit is
/// dropped and counted, with those the interpreter already dropped.
pub fn keep_results(results: Vec<Bundle>, room: u64, dropped_before: u64) -> (Vec<Bundle>, u64) {
    let mut used = 0u64;
    let mut dropped = dropped_before;
    let mut kept = Vec::new();
    for bundle in results {
        let size = serde_json::to_vec(&bundle).map_or(u64::MAX, |json| json.len() as u64);
        if dropped == dropped_before && used.saturating_add(size) <= room {
            used += size;
            kept.push(bundle);
        } else {
            dropped += 1;
        }
    }
    (kept, dropped)
}

/// The cell's error when results were dropped at the output limit.
pub fn results_cut(dropped: u64, limit: u64) -> CellError {
    CellError {
        kind: "OutputLimit".into(),
        message: format!(
            "{dropped} result(s) of the cell were dropped: with its stdout and stderr they \
             pass the output limit of {limit} bytes; raise output_limit (at most {} bytes) \
             or display less",
            crate::serve::protocol::MAX_CAPTURE
        ),
        traceback: String::new(),
    }
}

fn describe(id: &str, language: Language, cwd: Option<&PathBuf>, running: bool) -> ContextInfo {
    ContextInfo {
        id: id.to_string(),
        language,
        cwd: cwd.map(|dir| dir.to_string_lossy().into_owned()),
        default: is_default(id).is_some(),
        running,
    }
}

/// A cell as Python and Node read it: one JSON line.
#[derive(Serialize)]
struct CellRequest<'a> {
    id: u64,
    code: &'a str,
}

impl Session<'_> {
    /// The context a cell runs in: `context` (whose language must be `language`, if
    /// given), or the default context of `language` (Python without one).
    pub(super) fn target(
        &self,
        context: Option<&str>,
        language: Option<Language>,
        code: &str,
    ) -> Result<Target> {
        let target = match context {
            None => Target::default_of(language.unwrap_or_default()),
            Some(id) => {
                let (of, cwd) = match (is_default(id), self.contexts.get(id)) {
                    (Some(of), _) => (of, None),
                    (None, Some(context)) => (context.language, context.cwd.clone()),
                    (None, None) => {
                        return Err(Error::input(format!(
                            "context: no context {id:?} in this session; create one with \
                             session_context \"create\" (list them with \"list\"), or leave \
                             \"context\" out for the language's default"
                        )));
                    }
                };
                if let Some(asked) = language.filter(|asked| *asked != of) {
                    return Err(Error::input(format!(
                        "language: context {id:?} runs {}, not {}; leave \"language\" out or \
                         give {:?}",
                        language_name(of),
                        language_name(asked),
                        language_name(of)
                    )));
                }
                Target {
                    id: id.to_string(),
                    language: of,
                    cwd,
                }
            }
        };
        if target.language == Language::Bash && code.contains('\0') {
            return Err(Error::input(
                "code: a bash cell cannot hold a NUL byte (bash strings end there); remove it",
            ));
        }
        Ok(target)
    }

    /// A `session_context` request.
    pub(super) fn context_request(
        &mut self,
        action: ContextAction,
        language: Option<Language>,
        cwd: Option<PathBuf>,
        context: Option<String>,
    ) -> Result<ContextAnswer> {
        let named = |what: &str| {
            context.clone().ok_or_else(|| {
                Error::input(format!(
                    "context: session_context \"{what}\" needs \"context\" (an id from \"create\" \
                     or \"list\")"
                ))
            })
        };
        match action {
            ContextAction::Create => self.create_context(language.unwrap_or_default(), cwd),
            ContextAction::List => {
                self.absorb_events();
                let mut contexts: Vec<ContextInfo> =
                    [Language::Python, Language::Node, Language::Bash]
                        .into_iter()
                        .map(Target::default_of)
                        .filter(|target| self.interpreters.contains_key(&target.id))
                        .map(|target| describe(&target.id, target.language, None, true))
                        .collect();
                contexts.extend(self.contexts.iter().map(|(id, context)| {
                    let running = self.interpreters.contains_key(id);
                    describe(id, context.language, context.cwd.as_ref(), running)
                }));
                Ok(ContextAnswer::Now(SessionReply::Contexts { contexts }))
            }
            ContextAction::Restart => {
                let id = named("restart")?;
                let target = self.target(Some(&id), None, "")?;
                self.stop_interpreter(&id);
                self.start_context(&target)?;
                let reply = SessionReply::Context {
                    context: describe(&id, target.language, target.cwd.as_ref(), true),
                };
                Ok(ContextAnswer::WhenStarted {
                    key: id,
                    reply,
                    context: None,
                })
            }
            ContextAction::Remove => {
                let id = named("remove")?;
                if is_default(&id).is_some() {
                    // A default context cannot go; its interpreter can (the next cell starts one).
                    self.stop_interpreter(&id);
                } else if self.contexts.remove(&id).is_some() {
                    self.stop_interpreter(&id);
                    self.refuse_queued(&id);
                } else {
                    self.target(Some(&id), None, "")?;
                }
                Ok(ContextAnswer::Now(SessionReply::ContextRemoved {
                    context: id,
                }))
            }
        }
    }

    fn create_context(
        &mut self,
        language: Language,
        cwd: Option<PathBuf>,
    ) -> Result<ContextAnswer> {
        if self.contexts.len() + self.contexts_being_created() >= MAX_CONTEXTS {
            return Err(Error::input(format!(
                "session_context: this session has {MAX_CONTEXTS} contexts, the most it may; \
                 remove one first"
            )));
        }
        let cwd = cwd
            .map(|dir| crate::mount::jail_path("cwd", &dir.to_string_lossy()))
            .transpose()?;
        let id = format!("ctx-{}", self.next_context);
        self.next_context += 1;
        let target = Target {
            id: id.clone(),
            language,
            cwd: cwd.clone(),
        };
        // Started now, answered when it is ready: a context that cannot run (no such
        // interpreter, a cwd that is not there) is refused, and does not exist.
        self.start_context(&target)?;
        let reply = SessionReply::Context {
            context: describe(&id, language, cwd.as_ref(), true),
        };
        Ok(ContextAnswer::WhenStarted {
            key: id,
            reply,
            context: Some(Context {
                language,
                cwd: cwd.clone(),
            }),
        })
    }

    /// Ends the interpreter of context `id`, if it runs, and its state with it: a cell it
    /// runs is cut (its client gets its verdict), it is forgotten and its process group
    /// killed (what its cells started), and this returns once the jail's init has reaped
    /// it (its pid no longer counts against the session's pids).
    pub(super) fn stop_interpreter(&mut self, id: &str) {
        self.stop_cell(id);
        self.stop_starting(id);
        if let Some(program) = self.interpreter_ended(id) {
            self.jail.wait_for_end(program);
        }
    }

    /// Forgets the interpreter of context `id`, which has ended or is to end, and kills
    /// its process group: what its cells started goes with it (the jail's init reaches
    /// the group also when the interpreter itself has ended). Its program id, if it ran.
    /// Every path that ends an interpreter comes here.
    pub(super) fn interpreter_ended(&mut self, id: &str) -> Option<u32> {
        let interpreter = self.interpreters.remove(id)?;
        let _ = self.jail.signal(interpreter.id, Signal::SIGKILL, true);
        Some(interpreter.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value, json};

    fn bundle(value: Value) -> Map<String, Value> {
        value.as_object().expect("an object").clone()
    }

    #[test]
    fn bundles_hold_mime_types_and_their_data_only() {
        let fine = [
            json!({"text/plain": "1", "is_main_result": true}),
            json!({"image/png": "iVBOR", "text/html": "<b>"}),
            json!({"application/json": {"a": [1, null]}, "application/vnd.x+json": 3}),
            json!({}),
        ];
        for value in fine {
            assert_eq!(check_bundle(&bundle(value.clone())), Ok(()), "{value}");
        }
        let broken = [
            json!({"is_main_result": "yes"}),
            json!({"text/plain": 1}),
            json!({"image/png": {"not": "text"}}),
            json!({"plain": "no slash"}),
            json!({"/html": "no type"}),
            json!({"text/": "no subtype"}),
            json!({"text/pl ain": "a space"}),
            json!({"text/\"x": "a quote"}),
            json!({"cpu_user_ms": 0}),
        ];
        for value in broken {
            assert!(check_bundle(&bundle(value.clone())).is_err(), "{value}");
        }
        let long = format!("text/{}", "x".repeat(200));
        assert!(check_bundle(&bundle(json!({long: "x"}))).is_err());
    }

    #[test]
    fn results_are_kept_in_order_while_they_fit() {
        let three: Vec<_> = (0..3)
            .map(|index| bundle(json!({"text/plain": "x".repeat(10 + index)})))
            .collect();
        let size = |kept: &[Map<String, Value>]| serde_json::to_vec(kept).unwrap().len() as u64;
        let (kept, dropped) = keep_results(three.clone(), u64::MAX, 0);
        assert_eq!((kept.len(), dropped), (3, 0));
        // Room for the first only: the rest are dropped, a later smaller one too (order).
        let first = size(&three[..1]) - 2;
        let (kept, dropped) = keep_results(three.clone(), first, 0);
        assert_eq!((kept.len(), dropped), (1, 2));
        let (kept, dropped) = keep_results(three.clone(), 0, 0);
        assert_eq!((kept.len(), dropped), (0, 3));
        // Once the interpreter dropped some, what follows is not taken out of order.
        let (kept, dropped) = keep_results(three, u64::MAX, 4);
        assert_eq!((kept.len(), dropped), (3, 4));
    }

    #[test]
    fn bash_requests_end_with_a_nul_and_the_others_are_json_lines() {
        assert_eq!(
            request_line(Language::Bash, 7, "echo hi\n"),
            b"7\necho hi\n\0"
        );
        let line = request_line(Language::Python, 7, "a\nb");
        assert_eq!(line.last(), Some(&b'\n'));
        let parsed: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(parsed, json!({"id": 7, "code": "a\nb"}));
    }
}
