//! A session's files, in one interleaved run: a 100 MiB binary file written and read
//! back through a live session (`session_write` + `session_read`, streamed), the same
//! through the base64 `session_put` + `session_get` in 512 KiB requests (what clients
//! did before), and for scale `cat` of the same bytes into and out of a host tmpfs
//! (/dev/shm). Rates are of the file's size over the write-plus-read time, so a
//! round trip at 500 MB/s moves 1 GB.

use super::serve::{Server, median};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Instant;

const SIZE: usize = 100 << 20;
const CHUNK: usize = 512 << 10;

#[derive(Serialize)]
pub struct FilesReport {
    pub bytes: usize,
    /// Median MB/s (10^6 bytes a second) of each, write plus read.
    pub round_trip_mb_s: BTreeMap<String, f64>,
    pub ratios: BTreeMap<String, f64>,
}

fn send(socket: &Path, mut message: Value) -> UnixStream {
    message["brig"] = json!(1);
    let mut stream = UnixStream::connect(socket).expect("connect");
    let body = serde_json::to_vec(&message).expect("JSON");
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    stream.write_all(&frame).expect("send");
    stream
}

fn reply(mut stream: &UnixStream) -> Value {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).expect("read the reply");
    let mut body = vec![0u8; u32::from_be_bytes(length) as usize];
    stream.read_exact(&mut body).expect("read the reply");
    serde_json::from_slice(&body).expect("a JSON reply")
}

fn stream_round_trip(socket: &Path, id: &str, data: &[u8], back: &mut [u8]) {
    let mut stream = send(
        socket,
        json!({"type": "session_write", "session": id, "path": "bench.bin", "size": data.len()}),
    );
    assert_eq!(reply(&stream)["type"], "ready");
    stream.write_all(data).expect("send the file");
    assert_eq!(reply(&stream)["size"], data.len());
    let mut stream = send(
        socket,
        json!({"type": "session_read", "session": id, "path": "bench.bin"}),
    );
    assert_eq!(reply(&stream)["length"], data.len());
    stream.read_exact(back).expect("the file");
}

fn base64_round_trip(socket: &Path, id: &str, data: &[u8]) {
    use base64::Engine;
    let engine = base64::engine::general_purpose::STANDARD;
    for (index, piece) in data.chunks(CHUNK).enumerate() {
        let message = json!({"type": "session_put", "session": id, "path": "old.bin",
            "data": engine.encode(piece), "append": index > 0});
        let answer = reply(&send(socket, message));
        assert_eq!(answer["type"], "put", "{answer}");
    }
    let mut read = 0;
    while read < data.len() {
        let message = json!({"type": "session_get", "session": id, "path": "old.bin",
            "offset": read, "length": CHUNK});
        let answer = reply(&send(socket, message));
        let piece = engine
            .decode(answer["data"].as_str().expect("data"))
            .expect("base64");
        read += piece.len();
    }
}

fn cat_round_trip(source: &Path, copy: &Path) {
    for (from, to) in [(source, copy), (copy, Path::new("/dev/null"))] {
        let status = std::process::Command::new("cat")
            .arg(from)
            .stdout(std::fs::File::create(to).expect("the copy"))
            .status()
            .expect("cat");
        assert!(status.success());
    }
}

pub fn measure(brig: &str, rounds: usize) -> FilesReport {
    let server = Server::start(brig, "files", &["--pool", "0", "--home-size", "512M"]);
    let created = reply(&send(
        &server.socket,
        json!({"type": "session_create", "workspace_size": "512M"}),
    ));
    let id = created["session"].as_str().expect("a session").to_string();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let data: Vec<u8> = (0..SIZE / 8)
        .flat_map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()
        })
        .collect();
    let mut back = vec![0u8; SIZE];
    let source = Path::new("/dev/shm").join(format!("brig-bench-files-{}", std::process::id()));
    let copy = source.with_extension("copy");
    std::fs::write(&source, &data).expect("write the host copy");
    stream_round_trip(&server.socket, &id, &data, &mut back);
    assert!(back == data, "the session gave other bytes back");

    let names = [
        "session_write + session_read",
        "session_put + session_get (base64, 512 KiB)",
        "cat into and out of /dev/shm",
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    // A base64 round trip of 100 MiB takes seconds: fewer rounds than the others.
    let rounds = rounds.clamp(3, 20);
    for round in 0..rounds {
        for offset in 0..names.len() {
            let index = (round + offset) % names.len();
            let begun = Instant::now();
            match index {
                0 => stream_round_trip(&server.socket, &id, &data, &mut back),
                1 => base64_round_trip(&server.socket, &id, &data),
                _ => cat_round_trip(&source, &copy),
            }
            let seconds = begun.elapsed().as_secs_f64();
            samples[index].push(SIZE as f64 / seconds / 1e6);
        }
    }
    let _ = std::fs::remove_file(&source);
    let _ = std::fs::remove_file(&copy);
    reply(&send(
        &server.socket,
        json!({"type": "session_close", "session": id}),
    ));
    let round_trip_mb_s: BTreeMap<String, f64> = names
        .iter()
        .zip(samples)
        .map(|(name, values)| (name.to_string(), median(values)))
        .collect();
    let streamed = round_trip_mb_s[names[0]];
    let mut ratios = BTreeMap::new();
    ratios.insert(
        "streamed / base64 put+get (speed-up)".into(),
        streamed / round_trip_mb_s[names[1]],
    );
    ratios.insert(
        "streamed / host cat (share of the host's speed)".into(),
        streamed / round_trip_mb_s[names[2]],
    );
    FilesReport {
        bytes: SIZE,
        round_trip_mb_s,
        ratios,
    }
}

pub fn print(report: &FilesReport) {
    println!(
        "\nsession files: {} MiB written then read back (MB/s of the file's size, median; goal >= 500)",
        report.bytes >> 20
    );
    for (label, rate) in &report.round_trip_mb_s {
        println!("{label:<48} {rate:>8.0}");
    }
    for (label, ratio) in &report.ratios {
        println!("{label:<48} {ratio:.2}");
    }
}
