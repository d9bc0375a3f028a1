#!/usr/bin/env python3
"""The servers the network tests reach through `--net filtered`, on this host only.

One process starts, on --bind (127.0.0.1) with ephemeral ports:
  http  GET /hello, /host (the Host it got), /bytes/N (N bytes), POST /echo, a package
        index (/simple/brigdemo/, /files/brigdemo-1.0-py3-none-any.whl) for pip, and the
        files under STATE/git/ for git's dumb HTTP protocol;
  tls   the same over TLS, with a certificate for allowed.test, *.allowed.test,
        web.test and other.test from a test CA made here with the openssl CLI (ca.pem);
  echo  a TCP echo; udp  a UDP echo;
  dns   a DNS stub (--dns-address, --dns-port) answering every A query with 127.0.0.1.
When all listen it prints one JSON line with the ports, then serves until stdin closes or
SIGTERM. Every request, connection, datagram and DNS query is a JSON line in
STATE/requests.jsonl. Standard library only (and the openssl program).
"""

import argparse
import hashlib
import http.server
import io
import json
import os
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import threading
import zipfile

LOCK = threading.Lock()
LOG_PATH = None
STATE = None
CHUNK = b"x" * (256 << 10)
PACKAGE = "brigdemo"
WHEEL_NAME = f"{PACKAGE}-1.0-py3-none-any.whl"
WHEEL = b""


def log(**entry):
    line = json.dumps(entry, sort_keys=True) + "\n"
    with LOCK, open(LOG_PATH, "a") as out:
        out.write(line)


def make_wheel():
    """A minimal pure-Python wheel, enough for `pip download`."""
    files = {
        f"{PACKAGE}/__init__.py": b"VALUE = 1\n",
        f"{PACKAGE}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n".encode(),
        f"{PACKAGE}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: brig-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{PACKAGE}-1.0.dist-info/RECORD,,\n"
    files[f"{PACKAGE}-1.0.dist-info/RECORD"] = record.encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            wheel.writestr(info, data)
    return buffer.getvalue()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_kind = "http"

    def log_message(self, *args):
        pass

    def record(self):
        log(
            server=self.server_kind,
            method=self.command,
            path=self.path,
            host=self.headers.get("Host"),
            authorization=self.headers.get("Authorization"),
            sni=getattr(self.request, "brig_sni", None),
            peer=self.client_address[0],
        )

    def reply(self, body, content_type="text/plain"):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.record()
        if self.path == "/hello":
            return self.reply(b"hello\n")
        if self.path == "/host":
            return self.reply((self.headers.get("Host") or "").encode())
        if self.path.startswith("/bytes/"):
            return self.stream(int(self.path[len("/bytes/"):]))
        if self.path in (f"/simple/{PACKAGE}/", f"/simple/{PACKAGE}"):
            digest = hashlib.sha256(WHEEL).hexdigest()
            page = f'<html><body><a href="/files/{WHEEL_NAME}#sha256={digest}">{WHEEL_NAME}</a></body></html>'
            return self.reply(page.encode(), "text/html")
        if self.path == f"/files/{WHEEL_NAME}":
            return self.reply(WHEEL, "application/octet-stream")
        if self.path.startswith("/git/"):
            # Git's "dumb" HTTP protocol: the files of a bare repository, as they are.
            root = os.path.join(STATE, "git")
            path = os.path.normpath(os.path.join(STATE, self.path[1:].split("?")[0]))
            if path.startswith(root + os.sep) and os.path.isfile(path):
                with open(path, "rb") as file:
                    return self.reply(file.read(), "application/octet-stream")
        self.send_error(404)

    def do_HEAD(self):
        # A status and headers only: a kept-alive client reads each reply whole.
        self.record()
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        self.record()
        if self.path == "/record":
            # The body as the server read it (by its Content-Length, or chunked), in the
            # log; the reply says only its length and framing (an echo would show the jail
            # what brig put in).
            chunked = (self.headers.get("Transfer-Encoding") or "").lower() == "chunked"
            body = self.read_chunked() if chunked else self.rfile.read(int(self.headers.get("Content-Length") or 0))
            log(server=self.server_kind, body=body.decode(errors="replace"), chunked=chunked)
            return self.reply(f"got {len(body)} {'chunked' if chunked else 'length'}\n".encode())
        length = int(self.headers.get("Content-Length") or 0)
        self.reply(self.rfile.read(length))

    def read_chunked(self):
        body = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0], 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return body
            body += self.rfile.read(size)
            self.rfile.readline()

    def stream(self, length):
        self.send_response(200)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        try:
            while length > 0:
                now = min(length, len(CHUNK))
                self.wfile.write(CHUNK[:now])
                length -= now
        except OSError:
            self.close_connection = True


class TlsHandler(Handler):
    server_kind = "tls"

    def setup(self):
        # The handshake happens here, in the connection's thread, not in accept.
        self.request = self.server.context.wrap_socket(self.request, server_side=True)
        super().setup()

    def handle(self):
        try:
            super().handle()
        except (ssl.SSLError, OSError) as error:
            log(server="tls", error=str(error), peer=self.client_address[0])


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        log(server="echo", peer=self.client_address[0])
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            self.request.sendall(data)


class TcpServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def udp_echo(sock):
    while True:
        data, peer = sock.recvfrom(65536)
        log(server="udp", peer=peer[0], bytes=len(data))
        sock.sendto(data, peer)


def dns_stub(sock):
    """Answers A with 127.0.0.1 (TTL 1), or with A.B.C.D for a name that starts with the
    label A-B-C-D; anything else with no records."""
    while True:
        query, peer = sock.recvfrom(4096)
        if len(query) < 12:
            continue
        labels, offset = [], 12
        while offset < len(query) and query[offset]:
            length = query[offset]
            labels.append(query[offset + 1:offset + 1 + length].decode(errors="replace"))
            offset += 1 + length
        qtype = struct.unpack("!H", query[offset + 1:offset + 3])[0] if offset + 3 <= len(query) else 0
        name = ".".join(labels).lower()
        log(server="dns", name=name, type=qtype)
        question = query[12:offset + 5]
        answers = b""
        if qtype == 1:
            parts = labels[0].split("-") if labels else []
            address = ".".join(parts) if len(parts) == 4 and all(p.isdigit() for p in parts) else "127.0.0.1"
            answers = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 1, 4) + socket.inet_aton(address)
        header = query[:2] + struct.pack("!HHHHH", 0x8180, 1, 1 if answers else 0, 0, 0)
        sock.sendto(header + question + answers, peer)


def make_certificates(state):
    """A test CA and a server certificate it signed, with the openssl CLI."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=state, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=brig test CA",
            "-keyout", "ca.key", "-out", "ca.pem")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=web.test", "-keyout", "server.key",
            "-out", "server.csr")
    with open(os.path.join(state, "san.ext"), "w") as ext:
        ext.write("subjectAltName=DNS:allowed.test,DNS:*.allowed.test,DNS:web.test,DNS:other.test\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "san.ext", "-out", "server.pem")
    os.chmod(os.path.join(state, "ca.pem"), 0o644)


def start_thread(target, *args):
    threading.Thread(target=target, args=args, daemon=True).start()


def main():
    global LOG_PATH, WHEEL, STATE
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", required=True)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--dns-address", default="127.0.0.1")
    parser.add_argument("--dns-port", type=int, default=0)
    options = parser.parse_args()
    state = STATE = options.state
    LOG_PATH = os.path.join(state, "requests.jsonl")
    open(LOG_PATH, "w").close()
    WHEEL = make_wheel()
    make_certificates(state)

    http_server = Server((options.bind, 0), Handler)
    tls_server = Server((options.bind, 0), TlsHandler)
    tls_server.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls_server.context.load_cert_chain(os.path.join(state, "server.pem"), os.path.join(state, "server.key"))

    def remember_sni(ssl_socket, name, _context):
        ssl_socket.brig_sni = name

    tls_server.context.sni_callback = remember_sni
    echo_server = TcpServer((options.bind, 0), Echo)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((options.bind, 0))
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind((options.dns_address, options.dns_port))

    for server in (http_server, tls_server, echo_server):
        start_thread(server.serve_forever, 0.05)
    start_thread(udp_echo, udp)
    start_thread(dns_stub, dns)

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(json.dumps({
        "http": http_server.server_address[1],
        "tls": tls_server.server_address[1],
        "echo": echo_server.server_address[1],
        "udp": udp.getsockname()[1],
        "dns": list(dns.getsockname()),
        "ca": os.path.join(state, "ca.pem"),
        "log": LOG_PATH,
    }), flush=True)
    sys.stdin.read()
    os._exit(0)


if __name__ == "__main__":
    main()
