//! E2B's code interpreter (the `e2b-code-interpreter` SDK's server on a sandbox's port
//! 49999, e2b-dev/code-interpreter's `template/server/`), served on a session's own
//! persistent interpreters:
//!
//! - `POST /execute` (`code`, `context_id` or `language`, `env_vars`, `timeout`): a cell
//!   (`session_exec` with `code` and `stream`), answered as NDJSON as E2B's server does:
//!   `stdout` / `stderr` lines as the runner reads them, then one `result` line per rich
//!   result (mime bundle), an `error` line (`name`, `value`, `traceback`) when the cell
//!   raised, and `end_of_execution`. A client that hangs up interrupts the cell (the
//!   server's rule for a client gone mid-exec).
//! - `/contexts`: `POST` (create: `language`, `cwd`), `GET` (list), `POST
//!   /contexts/ID/restart`, `DELETE /contexts/ID` (`session_context`).
//!
//! E2B's languages `python`, `javascript` (`js`) and `bash` are brig's `python`, `node` and
//! `bash`; the default context of each is the one named after brig's language.

use super::Gateway;
use super::backend::{BackendError, Failure, Stream};
use super::error::ApiError;
use crate::serve::protocol::{ContextAction, Language, Request};
use crate::units::Span;
use axum::body::Body;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The port E2B's code interpreter listens on in a sandbox, as the SDK addresses it.
pub const INTERPRETER_PORT: u16 = 49999;

/// A request's body (a cell's code and its fields) at most this big.
const MAX_BODY: usize = 4 << 20;

/// NDJSON lines of an answer waiting for the HTTP connection.
const BODY_LINES: usize = 16;

use super::files::WORKSPACE;

/// One request to sandbox `sandbox`'s interpreter port (its owner known, its token, if it
/// is secure, checked by the caller where the SDK sends it).
pub async fn serve(
    gateway: Arc<Gateway>,
    sandbox: String,
    method: Method,
    path: &str,
    body: Body,
) -> Response {
    let body = match super::body::read(body, MAX_BODY).await {
        Ok(body) => body,
        Err(err @ super::body::BodyError::TooLarge { .. }) => {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{path}: the body is {}; send a smaller cell",
                    err.describe()
                ),
            )
            .into_response();
        }
        Err(err) => {
            return ApiError::bad_request(format!(
                "{path}: the body: {}; send it whole",
                err.describe()
            ))
            .into_response();
        }
    };
    let call = Call { gateway, sandbox };
    let answer = match (method.as_str(), path) {
        ("GET", "/health") => return (StatusCode::OK, "OK").into_response(),
        ("POST", "/execute") => match json_body(&body).and_then(Cell::of) {
            Ok(cell) => return call.execute(cell).await,
            Err(err) => Err(err),
        },
        ("POST", "/contexts") => match json_body(&body).and_then(|body| new_context(&body)) {
            Ok((language, cwd)) => call.create_context(language, cwd).await,
            Err(err) => Err(err),
        },
        ("GET", "/contexts") => call.list_contexts().await,
        _ => match context_route(&method, path) {
            Some((id, ContextAction::Restart)) => call
                .context(ContextAction::Restart, None, None, Some(id))
                .await
                .map(|_| StatusCode::NO_CONTENT.into_response()),
            Some((id, _)) => call
                .context(ContextAction::Remove, None, None, Some(id))
                .await
                .map(|_| StatusCode::NO_CONTENT.into_response()),
            None => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "{method} {path}: not a route of E2B's code interpreter as brig gateway serves it (see docs/e2b.md)"
                ),
            )),
        },
    };
    answer.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /contexts/ID/restart` or `DELETE /contexts/ID`: the context and what to do.
fn context_route(method: &Method, path: &str) -> Option<(String, ContextAction)> {
    let rest = path.strip_prefix("/contexts/")?;
    let (id, action) = match (method.as_str(), rest.strip_suffix("/restart")) {
        ("POST", Some(id)) => (id, ContextAction::Restart),
        ("DELETE", None) => (rest, ContextAction::Remove),
        _ => return None,
    };
    (!id.is_empty() && !id.contains('/')).then(|| (id.to_string(), action))
}

fn json_body(body: &Bytes) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(|err| {
        ApiError::bad_request(format!(
            "the body is not JSON ({err}); send a JSON object as E2B's SDK does"
        ))
    })
}

/// E2B's language name as brig's (`None`, `python`: Python).
fn language_of(name: Option<&str>) -> Result<Language, ApiError> {
    match name.map(|name| name.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("python") => Ok(Language::Python),
        Some("javascript") | Some("js") => Ok(Language::Node),
        Some("bash") => Ok(Language::Bash),
        Some(other) => Err(ApiError::bad_request(format!(
            "language: {other:?} is not served by brig gateway; give python, javascript or bash"
        ))),
    }
}

/// brig's language as E2B names it.
fn e2b_language(language: &Value) -> &'static str {
    match language.as_str() {
        Some("node") => "javascript",
        Some("bash") => "bash",
        _ => "python",
    }
}

/// `POST /contexts`'s `language` and `cwd`.
fn new_context(body: &Value) -> Result<(Language, Option<String>), ApiError> {
    let text = |field: &str| -> Result<Option<&str>, ApiError> {
        match &body[field] {
            Value::Null => Ok(None),
            Value::String(text) => Ok(Some(text)),
            _ => Err(ApiError::bad_request(format!(
                "{field}: give a string or leave it out"
            ))),
        }
    };
    let language = language_of(text("language")?)?;
    Ok((language, text("cwd")?.map(str::to_string)))
}

/// A cell as `/execute` asks for it.
struct Cell {
    code: String,
    language: Option<Language>,
    context: Option<String>,
    env: Vec<(String, String)>,
    time_limit: Option<Duration>,
}

impl Cell {
    fn of(body: Value) -> Result<Cell, ApiError> {
        let Some(code) = body["code"].as_str() else {
            return Err(ApiError::bad_request(
                "code: missing or not a string; give the cell's code",
            ));
        };
        let context = match &body["context_id"] {
            Value::Null => None,
            Value::String(id) => Some(id.clone()),
            _ => {
                return Err(ApiError::bad_request(
                    "context_id: give a context's id (a string) or leave it out",
                ));
            }
        };
        let language = match &body["language"] {
            Value::Null => None,
            Value::String(name) => Some(language_of(Some(name))?),
            _ => {
                return Err(ApiError::bad_request(
                    "language: give python, javascript or bash, or leave it out",
                ));
            }
        };
        if context.is_some() && language.is_some() {
            return Err(ApiError::bad_request(
                "Only one of context_id or language can be provided",
            ));
        }
        let env = match &body["env_vars"] {
            Value::Null => Vec::new(),
            Value::Object(vars) => vars
                .iter()
                .map(|(name, value)| match value.as_str() {
                    Some(value) if env_name_ok(name) => Ok((name.clone(), value.to_string())),
                    _ => Err(ApiError::bad_request(format!(
                        "env_vars: {name:?} needs a name of letters, digits and _ and a string value"
                    ))),
                })
                .collect::<Result<_, _>>()?,
            _ => {
                return Err(ApiError::bad_request(
                    "env_vars: give an object of names to strings, or leave it out",
                ));
            }
        };
        let time_limit = match &body["timeout"] {
            Value::Null => None,
            value => match value.as_f64() {
                Some(seconds) if seconds > 0.0 && seconds < 1e9 => {
                    Some(Duration::from_secs_f64(seconds))
                }
                _ => {
                    return Err(ApiError::bad_request(
                        "timeout: give the cell's time limit in seconds, more than 0",
                    ));
                }
            },
        };
        Ok(Cell {
            code: code.to_string(),
            language,
            context,
            env,
            time_limit,
        })
    }

    /// Its context: the one named, else the language's default (named as brig's
    /// language: `python`, `node`, `bash`).
    fn context(&self) -> String {
        self.context.clone().unwrap_or_else(|| {
            match self.language.unwrap_or_default() {
                Language::Python => "python",
                Language::Node => "node",
                Language::Bash => "bash",
            }
            .to_string()
        })
    }
}

fn env_name_ok(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The cells that set `env` in a context before a cell and restore it after (as E2B's
/// server does), in the context's language: JSON strings are Python and JavaScript
/// literals; bash gets single-quoted words.
fn env_cells(language: &Value, env: &[(String, String)]) -> (String, String) {
    let names: Vec<&str> = env.iter().map(|(name, _)| name.as_str()).collect();
    let vars: Map<String, Value> = env
        .iter()
        .map(|(name, value)| (name.clone(), Value::String(value.clone())))
        .collect();
    let vars = Value::Object(vars).to_string();
    let names_json = json!(names).to_string();
    match language.as_str() {
        Some("node") => (
            format!(
                "globalThis.__brig_env = Object.fromEntries({names_json}.map(k => [k, process.env[k]])); Object.assign(process.env, {vars}); undefined"
            ),
            "for (const [k, v] of Object.entries(globalThis.__brig_env)) { if (v === undefined) delete process.env[k]; else process.env[k] = v; } undefined".into(),
        ),
        Some("bash") => {
            let quote = |text: &str| format!("'{}'", text.replace('\'', "'\\''"));
            let save: String = names
                .iter()
                .map(|name| {
                    format!("if [ \"${{{name}+set}}\" ]; then __brig_env_{name}=\"${name}\"; else unset __brig_env_{name}; fi\n")
                })
                .collect();
            let set: String = env
                .iter()
                .map(|(name, value)| format!("export {name}={}\n", quote(value)))
                .collect();
            let restore: String = names
                .iter()
                .map(|name| {
                    format!("if [ \"${{__brig_env_{name}+set}}\" ]; then export {name}=\"$__brig_env_{name}\"; else unset {name}; fi\n")
                })
                .collect();
            (format!("{save}{set}"), restore)
        }
        _ => (
            format!(
                "import os as __brig_os\n__brig_env = {{k: __brig_os.environ.get(k) for k in {names_json}}}\n__brig_os.environ.update({vars})"
            ),
            "for __brig_k, __brig_v in __brig_env.items():\n    if __brig_v is None: __brig_os.environ.pop(__brig_k, None)\n    else: __brig_os.environ[__brig_k] = __brig_v".into(),
        ),
    }
}

/// A bundle of a rich result as E2B's `result` line: mime types to its fields, the
/// others under `extra`.
fn result_line(bundle: &Value) -> Value {
    let mut line = Map::new();
    line.insert("type".into(), "result".into());
    let mut extra = Map::new();
    if let Some(bundle) = bundle.as_object() {
        for (key, value) in bundle {
            let field = match key.as_str() {
                "is_main_result" => "is_main_result",
                "text/plain" => "text",
                "text/html" => "html",
                "text/markdown" => "markdown",
                "image/svg+xml" => "svg",
                "image/png" => "png",
                "image/jpeg" => "jpeg",
                "application/pdf" => "pdf",
                "text/latex" => "latex",
                "application/json" => "json",
                "application/javascript" => "javascript",
                _ => {
                    extra.insert(key.clone(), value.clone());
                    continue;
                }
            };
            line.insert(field.into(), value.clone());
        }
    }
    if !extra.is_empty() {
        line.insert("extra".into(), Value::Object(extra));
    }
    Value::Object(line)
}

fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

/// An NDJSON line.
fn line(value: &Value) -> Bytes {
    let mut text = value.to_string();
    text.push('\n');
    Bytes::from(text)
}

/// The lines of one of the server's frames for a cell (none for frames E2B has no line
/// for).
fn lines_of(frame: &Value) -> Vec<Value> {
    match frame["type"].as_str() {
        Some("output") => {
            let text = match (&frame["data"], &frame["base64"]) {
                (Value::String(text), _) => text.clone(),
                (_, Value::String(encoded)) => {
                    use base64::Engine;
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(encoded)
                        .unwrap_or_default();
                    String::from_utf8_lossy(&bytes).into_owned()
                }
                _ => String::new(),
            };
            let stream = if frame["stream"] == "stderr" {
                "stderr"
            } else {
                "stdout"
            };
            vec![json!({"type": stream, "text": text, "timestamp": now()})]
        }
        Some("exec") => {
            let mut lines: Vec<Value> = frame["results"]
                .as_array()
                .map(|results| results.iter().map(result_line).collect())
                .unwrap_or_default();
            if let Some(error) = frame["error"].as_object() {
                lines.push(json!({
                    "type": "error",
                    "name": error.get("type").cloned().unwrap_or(Value::Null),
                    "value": error.get("message").cloned().unwrap_or(Value::Null),
                    "traceback": error.get("traceback").and_then(Value::as_str).unwrap_or(""),
                }));
            }
            lines
        }
        _ => Vec::new(),
    }
}

/// A call's failure as E2B's code interpreter answers it: an unknown context 404 (the
/// SDK's `NotFoundException`), a sandbox gone 502 (its `TimeoutException`), bad input 400.
fn api_error(err: BackendError) -> ApiError {
    let status = if err.message.contains("no context") {
        StatusCode::NOT_FOUND
    } else {
        match err.failure {
            Failure::Gone => StatusCode::BAD_GATEWAY,
            Failure::NotFound => StatusCode::NOT_FOUND,
            Failure::BadInput => StatusCode::BAD_REQUEST,
            Failure::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Failure::Server => StatusCode::INTERNAL_SERVER_ERROR,
        }
    };
    ApiError::new(status, err.message)
}

/// A context as E2B's SDK reads it (`id`, `language`, `cwd`).
fn e2b_context(context: &Value) -> Value {
    json!({
        "id": context["id"],
        "language": e2b_language(&context["language"]),
        "cwd": context["cwd"].as_str().unwrap_or(WORKSPACE),
    })
}

struct Call {
    gateway: Arc<Gateway>,
    sandbox: String,
}

impl Call {
    /// `work` with the backend and the sandbox's id, off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&super::backend::Backend, &str) -> Result<T, BackendError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let gateway = self.gateway.clone();
        let sandbox = self.sandbox.clone();
        tokio::task::spawn_blocking(move || work(&gateway.backend, &sandbox))
            .await
            .map_err(|err| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()))?
            .map_err(api_error)
    }

    async fn context(
        &self,
        action: ContextAction,
        language: Option<Language>,
        cwd: Option<String>,
        context: Option<String>,
    ) -> Result<Value, ApiError> {
        self.blocking(move |backend, session| {
            backend.call(&Request::SessionContext {
                session: session.into(),
                action,
                language,
                cwd: cwd.map(Into::into),
                context,
            })
        })
        .await
    }

    async fn create_context(
        &self,
        language: Language,
        cwd: Option<String>,
    ) -> Result<Response, ApiError> {
        let reply = self
            .context(ContextAction::Create, Some(language), cwd, None)
            .await?;
        Ok(axum::Json(e2b_context(&reply["context"])).into_response())
    }

    async fn list_contexts(&self) -> Result<Response, ApiError> {
        let reply = self.context(ContextAction::List, None, None, None).await?;
        let contexts: Vec<Value> = reply["contexts"]
            .as_array()
            .map(|contexts| contexts.iter().map(e2b_context).collect())
            .unwrap_or_default();
        Ok(axum::Json(contexts).into_response())
    }

    /// A cell, streamed: the first frame is waited for, so that a refusal (an unknown
    /// context, a bad field) is an HTTP status, not a line.
    async fn execute(self, cell: Cell) -> Response {
        let permit =
            match super::quota::share_for(&self.gateway, &self.gateway.streams, &self.sandbox) {
                Ok(permit) => permit,
                Err(refused) => {
                    return ApiError::new(refused.status(), refused.message()).into_response();
                }
            };
        let context = cell.context();
        // The context's language: for the cells that set and restore `env_vars`.
        let language = if cell.env.is_empty() {
            Value::Null
        } else {
            let listed = self.context(ContextAction::List, None, None, None).await;
            let listed = match listed {
                Ok(listed) => listed,
                Err(err) => return err.into_response(),
            };
            let known = listed["contexts"]
                .as_array()
                .and_then(|contexts| {
                    contexts
                        .iter()
                        .find(|found| found["id"] == context.as_str())
                })
                .map(|found| found["language"].clone());
            match known {
                Some(language) => language,
                // A default context not started yet is named after its language.
                None => Value::String(context.clone()),
            }
        };
        let (set_env, restore_env) = env_cells(&language, &cell.env);
        let run = |code: String, stream: bool, time_limit: Option<Duration>| {
            let context = context.clone();
            move |backend: &super::backend::Backend, session: &str| {
                let request = Request::SessionExec {
                    session: session.into(),
                    command: Vec::new(),
                    code: Some(code),
                    language: None,
                    context: Some(context),
                    stdin: None,
                    env: Vec::new(),
                    chdir: None,
                    time_limit: time_limit.map(Span),
                    output_limit: None,
                    stream,
                    background: false,
                    tag: None,
                    pty: None,
                    user: None,
                };
                if stream {
                    backend.stream(&request).map(Some)
                } else {
                    backend.call(&request).map(|_| None)
                }
            }
        };
        if !cell.env.is_empty()
            && let Err(err) = self.blocking(run(set_env, false, None)).await
        {
            return err.into_response();
        }
        let opened = self
            .blocking(run(cell.code, true, cell.time_limit))
            .await
            .map(|stream| stream.expect("a streamed exec opens a stream"));
        let mut stream: Stream = match opened {
            Ok(stream) => stream,
            Err(err) => return err.into_response(),
        };
        let first = match stream.frames.recv().await {
            Some(Ok(frame)) => frame,
            Some(Err(err)) => return api_error(err).into_response(),
            None => {
                return ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "the brig server ended the cell's stream early",
                )
                .into_response();
            }
        };
        let (lines, receiver) = mpsc::channel::<Bytes>(BODY_LINES);
        let restore = (!cell.env.is_empty()).then(|| run(restore_env, false, None));
        tokio::spawn(async move {
            let mut frame: Option<Result<Value, BackendError>> = Some(Ok(first));
            while let Some(next) = frame {
                let (out, last) = match next {
                    Ok(frame) => (lines_of(&frame), frame["type"] == "exec"),
                    Err(err) => (
                        vec![json!({
                            "type": "error",
                            "name": "UnexpectedEndOfExecution",
                            "value": err.message,
                            "traceback": "",
                        })],
                        true,
                    ),
                };
                for out in out {
                    if lines.send(line(&out)).await.is_err() {
                        // The client hung up: dropping the stream hangs up on the
                        // server, which interrupts the cell.
                        return;
                    }
                }
                if last {
                    break;
                }
                frame = stream.frames.recv().await;
            }
            drop(stream);
            if let Some(restore) = restore {
                let _ = self.blocking(restore).await;
            }
            // Given back before the end is sent: a client that saw its cell end may run
            // the next at once.
            drop(permit);
            let _ = lines.send(line(&json!({"type": "end_of_execution"}))).await;
        });
        let body = futures_util::stream::unfold(receiver, |mut receiver| async move {
            let chunk = receiver.recv().await?;
            Some((Ok::<_, Infallible>(chunk), receiver))
        });
        (
            [(header::CONTENT_TYPE, "application/x-ndjson")],
            Body::from_stream(body),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cells_answer_becomes_e2bs_lines() {
        let exec = json!({"type": "exec", "results": [
            {"text/plain": "2", "image/png": "iVBO", "x-custom/thing": "y", "is_main_result": true}
        ], "error": {"type": "ZeroDivisionError", "message": "division by zero", "traceback": "Traceback"}});
        assert_eq!(
            lines_of(&exec),
            vec![
                json!({"type": "result", "text": "2", "png": "iVBO", "is_main_result": true,
                       "extra": {"x-custom/thing": "y"}}),
                json!({"type": "error", "name": "ZeroDivisionError", "value": "division by zero",
                       "traceback": "Traceback"}),
            ]
        );
        let output = lines_of(&json!({"type": "output", "stream": "stderr", "base64": "aGk="}));
        assert_eq!(
            (output[0]["type"].as_str(), output[0]["text"].as_str()),
            (Some("stderr"), Some("hi"))
        );
    }

    #[test]
    fn languages_and_routes_are_e2bs() {
        assert_eq!(language_of(Some("JS")).unwrap(), Language::Node);
        assert_eq!(language_of(None).unwrap(), Language::Python);
        let refused = language_of(Some("r")).unwrap_err();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert!(refused.message.starts_with("language: \"r\""));
        assert_eq!(
            context_route(&Method::POST, "/contexts/ctx-1/restart"),
            Some(("ctx-1".into(), ContextAction::Restart))
        );
        assert_eq!(
            context_route(&Method::DELETE, "/contexts/ctx-2"),
            Some(("ctx-2".into(), ContextAction::Remove))
        );
        assert_eq!(context_route(&Method::GET, "/contexts/ctx-2"), None);
    }
}
