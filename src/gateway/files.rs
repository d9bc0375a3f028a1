//! envd's filesystem, served on a session's workspace: the `filesystem.Filesystem`
//! procedures `Stat`, `ListDir`, `MakeDir`, `Move` and `Remove` (unary, over Connect), and
//! `/files` (download: GET; upload: POST, `application/octet-stream` or
//! `multipart/form-data`).
//!
//! Paths: a sandbox's files are its session's workspace, E2B's home `/home/user` in the
//! jail (its user `user`'s home, its commands' working directory). A path is relative to
//! it, or absolute under it; another absolute path is refused (the workspace is the part of
//! the jail the server reads and writes, beneath it by the kernel: `..` and symlinks
//! leading out are refused there). Entries are reported with their paths in the jail
//! (`/home/user/...`).
//!
//! Watchers are the server's: polled (`CreateWatcher`, `GetWatcherEvents`,
//! `RemoveWatcher`) or streamed (`WatchDir`, `envd.rs`), their events named relative to
//! the watched directory. Not served yet: gzip uploads, file metadata.

use super::Gateway;
use super::backend::{Backend, BackendError};
use super::connect::{self, Code, Codec, ConnectError};
use super::error::ApiError;
use super::proto::filesystem as fs;
use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;
use std::sync::Arc;

/// The workspace, where the jail sees it: E2B's home, the home of the jail's user `user`
/// (every sandbox's session is made with `user: user`, `backend.rs`).
pub const WORKSPACE: &str = "/home/user";

/// How much of an upload is sent to the server at once (its `session_put` takes at most
/// 512 KiB): what the gateway holds of an upload at a time.
const UPLOAD_CHUNK: usize = 512 << 10;

/// A path as the server takes it: relative to the workspace.
pub fn in_workspace(path: &str) -> Result<String, String> {
    let path = path.trim_end_matches('/');
    let relative = [WORKSPACE, "~"]
        .iter()
        .find_map(|home| match path.strip_prefix(home) {
            Some("") => Some("."),
            Some(rest) => rest.strip_prefix('/'),
            None => None,
        });
    match relative {
        Some(relative) => Ok(relative.to_string()),
        None if path.is_empty() => Ok(".".into()),
        None if path.starts_with('/') => Err(format!(
            "path {path:?}: brig gateway serves the sandbox's home only ({WORKSPACE}, or a path relative to it)"
        )),
        None => Ok(path.to_string()),
    }
}

/// Where the jail sees a path the server reports (relative to the workspace).
fn in_jail(relative: &str) -> String {
    match relative {
        "" | "." => WORKSPACE.into(),
        relative => format!("{WORKSPACE}/{relative}"),
    }
}

/// One `filesystem.Filesystem` call (unary).
pub async fn procedure(
    gateway: Arc<Gateway>,
    sandbox: String,
    codec: Codec,
    procedure: &str,
    body: &[u8],
) -> Result<Response, ConnectError> {
    let shape = connect::Shape::Unary;
    let path_of = |path: &str| in_workspace(path).map_err(ConnectError::invalid);
    match procedure {
        "Stat" => {
            let request: fs::StatRequest = connect::decode(codec, shape, body)?;
            let path = path_of(&request.path)?;
            let entry = blocking(&gateway, &sandbox, move |backend, sandbox| {
                backend.stat(sandbox, &path)
            })
            .await?;
            let entry = Some(entry_of(&entry));
            Ok(connect::unary(codec, &fs::StatResponse { entry }))
        }
        "ListDir" => {
            let request: fs::ListDirRequest = connect::decode(codec, shape, body)?;
            let path = path_of(&request.path)?;
            let depth = request.depth.clamp(1, 64);
            let entries = blocking(&gateway, &sandbox, move |backend, sandbox| {
                backend.list_dir(sandbox, &path, depth)
            })
            .await?;
            let entries = entries.iter().map(entry_of).collect();
            Ok(connect::unary(codec, &fs::ListDirResponse { entries }))
        }
        "MakeDir" => {
            let request: fs::MakeDirRequest = connect::decode(codec, shape, body)?;
            let path = path_of(&request.path)?;
            let entry = blocking(&gateway, &sandbox, move |backend, sandbox| {
                let made = backend.make_dir(sandbox, &path)?;
                Ok((made, backend.stat(sandbox, &path)?))
            })
            .await?;
            match entry {
                (true, entry) => Ok(connect::unary(
                    codec,
                    &fs::MakeDirResponse {
                        entry: Some(entry_of(&entry)),
                    },
                )),
                (false, _) => Err(ConnectError::new(
                    Code::AlreadyExists,
                    format!("path {:?}: the directory exists already", request.path),
                )),
            }
        }
        "Move" => {
            let request: fs::MoveRequest = connect::decode(codec, shape, body)?;
            let source = path_of(&request.source)?;
            let destination = path_of(&request.destination)?;
            let entry = blocking(&gateway, &sandbox, move |backend, sandbox| {
                backend.rename(sandbox, &source, &destination)?;
                backend.stat(sandbox, &destination)
            })
            .await?;
            let entry = Some(entry_of(&entry));
            Ok(connect::unary(codec, &fs::MoveResponse { entry }))
        }
        "Remove" => {
            let request: fs::RemoveRequest = connect::decode(codec, shape, body)?;
            let path = path_of(&request.path)?;
            blocking(&gateway, &sandbox, move |backend, sandbox| {
                backend.remove(sandbox, &path)
            })
            .await?;
            Ok(connect::unary(codec, &fs::RemoveResponse {}))
        }
        "CreateWatcher" => {
            let request: fs::CreateWatcherRequest = connect::decode(codec, shape, body)?;
            let path = path_of(&request.path)?;
            let recursive = request.recursive;
            let watched = path.clone();
            let watcher = blocking(&gateway, &sandbox, move |backend, sandbox| {
                backend.watch(sandbox, &path, recursive)
            })
            .await?;
            // The id names the directory too: events are reported relative to it.
            let watcher_id = format!("{watcher}{WATCHER_SEPARATOR}{watched}");
            Ok(connect::unary(
                codec,
                &fs::CreateWatcherResponse { watcher_id },
            ))
        }
        "GetWatcherEvents" => {
            let request: fs::GetWatcherEventsRequest = connect::decode(codec, shape, body)?;
            let (watcher, watched) = watcher_of(&request.watcher_id)?;
            let events = blocking(&gateway, &sandbox, move |backend, sandbox| {
                backend.watch_events(sandbox, &watcher)
            })
            .await?;
            let events = events
                .iter()
                .filter_map(|event| event_of(event, &watched))
                .collect();
            Ok(connect::unary(
                codec,
                &fs::GetWatcherEventsResponse { events },
            ))
        }
        "RemoveWatcher" => {
            let request: fs::RemoveWatcherRequest = connect::decode(codec, shape, body)?;
            let (watcher, _) = watcher_of(&request.watcher_id)?;
            blocking(&gateway, &sandbox, move |backend, sandbox| {
                backend.unwatch(sandbox, &watcher)
            })
            .await?;
            Ok(connect::unary(codec, &fs::RemoveWatcherResponse {}))
        }
        _ => Err(ConnectError::new(
            Code::Unimplemented,
            format!("filesystem.Filesystem/{procedure}: no such procedure in envd"),
        )),
    }
}

/// Between the server's watcher id and the watched directory in the id a client gets.
const WATCHER_SEPARATOR: char = '@';

/// The server's watcher id and the watched directory (relative to the workspace).
fn watcher_of(id: &str) -> Result<(String, String), ConnectError> {
    id.split_once(WATCHER_SEPARATOR)
        .map(|(watcher, watched)| (watcher.to_string(), watched.to_string()))
        .ok_or_else(|| {
            ConnectError::new(
                Code::NotFound,
                format!("watcher {id:?}: no such watcher; create one with CreateWatcher"),
            )
        })
}

/// envd's event for one of the server's: its kind, and its path relative to the watched
/// directory.
pub(super) fn event_of(event: &Value, watched: &str) -> Option<fs::FilesystemEvent> {
    // A polled event's kind is its `type`; a streamed one's (`watch_event`) its `kind`.
    let kind = event["kind"].as_str().or(event["type"].as_str());
    let kind = match kind? {
        "create" => fs::EventType::Create,
        "write" => fs::EventType::Write,
        "remove" => fs::EventType::Remove,
        "rename" => fs::EventType::Rename,
        "chmod" => fs::EventType::Chmod,
        _ => return None,
    };
    let path = event["path"].as_str()?;
    let name = match watched {
        "." => path,
        watched => path
            .strip_prefix(watched)
            .and_then(|rest| rest.strip_prefix('/'))
            .unwrap_or(path),
    };
    Some(fs::FilesystemEvent {
        name: name.to_string(),
        r#type: kind as i32,
        entry: None,
    })
}

/// Runs a blocking backend call off the async threads.
async fn blocking<T: Send + 'static>(
    gateway: &Arc<Gateway>,
    sandbox: &str,
    work: impl FnOnce(&Backend, &str) -> Result<T, BackendError> + Send + 'static,
) -> Result<T, ConnectError> {
    let backend = gateway.backend.clone();
    let sandbox = sandbox.to_string();
    tokio::task::spawn_blocking(move || work(&backend, &sandbox))
        .await
        .map_err(|err| ConnectError::new(Code::Internal, format!("brig gateway: {err}")))?
        .map_err(ConnectError::from)
}

/// envd's `EntryInfo` for a `session_stat` entry.
fn entry_of(entry: &Value) -> fs::EntryInfo {
    let kind = match entry["type"].as_str() {
        Some("file") => fs::FileType::File,
        Some("dir") => fs::FileType::Directory,
        Some("symlink") => fs::FileType::Symlink,
        _ => fs::FileType::Unspecified,
    };
    let mode = entry["mode"].as_u64().unwrap_or(0) as u32 & 0o7777;
    let mtime = entry["mtime"].as_f64().unwrap_or(0.0);
    let path = entry["path"].as_str().unwrap_or(".");
    fs::EntryInfo {
        name: entry["name"].as_str().unwrap_or_default().to_string(),
        r#type: kind as i32,
        path: in_jail(path),
        size: entry["size"].as_i64().unwrap_or(0),
        mode,
        permissions: permissions(kind, mode),
        owner: entry["uid"].to_string(),
        group: entry["gid"].to_string(),
        modified_time: Some(pbjson_types::Timestamp {
            seconds: mtime.trunc() as i64,
            nanos: (mtime.fract() * 1e9) as i32,
        }),
        symlink_target: entry["symlink_target"].as_str().map(str::to_string),
        metadata: Default::default(),
    }
}

/// `ls -l`'s permissions: `drwxr-xr-x`.
fn permissions(kind: fs::FileType, mode: u32) -> String {
    let mut text = String::from(match kind {
        fs::FileType::Directory => 'd',
        fs::FileType::Symlink => 'l',
        _ => '-',
    });
    for shift in [6, 3, 0] {
        let bits = mode >> shift;
        text.push(if bits & 4 != 0 { 'r' } else { '-' });
        text.push(if bits & 2 != 0 { 'w' } else { '-' });
        text.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    text
}

/// `/files`: a download (GET) or an upload (POST).
pub async fn transfer(
    gateway: Arc<Gateway>,
    sandbox: String,
    method: Method,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let answer = match method {
        Method::GET => download(gateway, sandbox, query).await,
        Method::POST => upload(gateway, sandbox, query, headers, body).await,
        _ => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "/files takes GET (download) or POST (upload)",
        )),
    };
    answer.unwrap_or_else(IntoResponse::into_response)
}

/// Why files are not read or written as root: they are the workspace's, which root inside
/// (without CAP_DAC_OVERRIDE) cannot enter; done as the user instead, they would be
/// someone else's than asked.
pub const AS_ROOT_REFUSED: &str = "user \"root\": a sandbox's files are its workspace's, /home/user, the user's alone (mode 0700), which root inside cannot enter (it has no capability, no CAP_DAC_OVERRIDE); leave the user out, or write elsewhere (/tmp) with a command run as root";

/// The query's `path` (and a `username` other than E2B's default is refused).
fn query_path(query: Option<&str>) -> Result<Option<String>, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|err| ApiError::bad_request(format!("the query string: {err}")))?;
    let mut path = None;
    for (name, value) in pairs {
        match name.as_str() {
            "path" => path = Some(value),
            "username" if value == "root" => {
                return Err(ApiError::bad_request(AS_ROOT_REFUSED));
            }
            "username" if value != "user" => {
                return Err(ApiError::bad_request(format!(
                    "username {value:?}: brig gateway reads and writes files as the sandbox's own user only; leave it out"
                )));
            }
            _ => {}
        }
    }
    Ok(path)
}

async fn download(
    gateway: Arc<Gateway>,
    sandbox: String,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let path = query_path(query)?
        .ok_or_else(|| ApiError::bad_request("path: missing; give the file's path"))?;
    let relative = in_workspace(&path).map_err(ApiError::bad_request)?;
    let backend = gateway.backend.clone();
    let file = tokio::task::spawn_blocking(move || backend.read_file(&sandbox, &relative))
        .await
        .map_err(|err| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()))?
        .map_err(ApiError::from)?;
    let length = file.length;
    let body = futures_util::stream::unfold(file, |mut file| async move {
        let chunk = file.chunks.recv().await?;
        // A file cut short ends the body early: the client sees fewer bytes than the
        // Content-Length said.
        let chunk = chunk.map_err(|err| std::io::Error::other(err.message));
        Some((chunk, file))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, length.to_string()),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

async fn upload(
    gateway: Arc<Gateway>,
    sandbox: String,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let path = query_path(query)?;
    if headers.contains_key(header::CONTENT_ENCODING) {
        return Err(ApiError::bad_request(
            "Content-Encoding: compressed uploads are not served by brig gateway yet; send the file as it is",
        ));
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let mut written = Vec::new();
    if let Ok(boundary) = multer::parse_boundary(content_type) {
        let mut parts = multer::Multipart::new(body.into_data_stream(), boundary);
        let mut count = 0;
        while let Some(part) = parts.next_field().await.map_err(|err| {
            ApiError::bad_request(format!(
                "the multipart body: {err}; send multipart/form-data with one part a file"
            ))
        })? {
            count += 1;
            // One file: the query's path; several: each part's file name is its path.
            let target = match (&path, part.file_name()) {
                (Some(path), _) if count == 1 => path.clone(),
                (_, Some(name)) => name.to_string(),
                _ => {
                    return Err(ApiError::bad_request(
                        "a multipart part without a file name: give each file's path as its filename (or one file and ?path=)",
                    ));
                }
            };
            let chunks = futures_util::StreamExt::map(part, |chunk| {
                chunk.map_err(|err| format!("the multipart body: {err}"))
            });
            written.push(store(&gateway, &sandbox, &target, chunks).await?);
        }
        if count == 0 {
            return Err(ApiError::bad_request("the multipart body has no file"));
        }
    } else {
        let path =
            path.ok_or_else(|| ApiError::bad_request("path: missing; give the file's path"))?;
        let chunks = futures_util::StreamExt::map(body.into_data_stream(), |chunk| {
            chunk.map_err(|err| format!("the request's body broke off: {err}"))
        });
        written.push(store(&gateway, &sandbox, &path, chunks).await?);
    }
    Ok(axum::Json(written).into_response())
}

/// Writes one uploaded file: its chunks gathered into pieces of [`UPLOAD_CHUNK`], each
/// sent to the server as it fills (the first replaces the file, the others append), so
/// the gateway holds at most one piece of it. envd's `EntryInfo` of the file.
async fn store(
    gateway: &Arc<Gateway>,
    sandbox: &str,
    path: &str,
    chunks: impl futures_util::Stream<Item = Result<Bytes, String>> + Unpin,
) -> Result<Value, ApiError> {
    use futures_util::StreamExt;
    let relative = in_workspace(path).map_err(ApiError::bad_request)?;
    let mut chunks = chunks;
    let mut piece = bytes::BytesMut::with_capacity(UPLOAD_CHUNK);
    let mut sent_any = false;
    loop {
        let next = chunks.next().await;
        let done = next.is_none();
        if let Some(chunk) = next {
            let chunk = chunk.map_err(ApiError::bad_request)?;
            piece.extend_from_slice(&chunk);
        }
        while piece.len() >= UPLOAD_CHUNK || (done && (!piece.is_empty() || !sent_any)) {
            let take = piece.len().min(UPLOAD_CHUNK);
            let data = piece.split_to(take).freeze();
            let (backend, sandbox, relative) = (
                gateway.backend.clone(),
                sandbox.to_string(),
                relative.clone(),
            );
            let append = sent_any;
            tokio::task::spawn_blocking(move || backend.put(&sandbox, &relative, &data, append))
                .await
                .map_err(|err| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()))?
                .map_err(ApiError::from)?;
            sent_any = true;
            if piece.is_empty() && done {
                break;
            }
        }
        if done {
            break;
        }
    }
    let name = relative.rsplit('/').next().unwrap_or(&relative).to_string();
    Ok(serde_json::json!({"name": name, "type": "file", "path": in_jail(&relative)}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_the_workspace_by_any_of_its_names() {
        for (given, expected) in [
            ("data/a.txt", "data/a.txt"),
            ("/home/user/data/a.txt", "data/a.txt"),
            ("/home/user", "."),
            ("/home/user/", "."),
            ("~/x", "x"),
            ("", "."),
        ] {
            assert_eq!(in_workspace(given).unwrap(), expected, "{given}");
        }
        for refused in ["/etc/passwd", "/home/userx/a", "/home/sandbox/a", "/tmp"] {
            let err = in_workspace(refused).unwrap_err();
            assert!(err.contains("home only"), "{refused}: {err}");
        }
        assert_eq!(in_jail("."), "/home/user");
        assert_eq!(in_jail("a/b"), "/home/user/a/b");
        assert_eq!(permissions(fs::FileType::Directory, 0o755), "drwxr-xr-x");
        assert_eq!(permissions(fs::FileType::File, 0o640), "-rw-r-----");
    }
}
