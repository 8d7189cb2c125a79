"""A watch over a raw TLS socket (HTTP/1.1), for the load scripts that need one the client
stops reading: the socket is returned once the response head is read, byte by byte, so
nothing past it is taken off the socket. `rcvbuf` (set before connecting, so it sizes the
TCP window) keeps what the kernel buffers small."""
import socket
import realapi


def send_get(base, token, path, accept="application/json", rcvbuf=None, timeout=30, headers=""):
    """Connect to `base` over TLS (HTTP/1.1) and send a GET of `path`; nothing is read.
    `headers`: more header lines, each ending in CRLF."""
    host, port = base.split("//")[1].split(":")
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    raw.settimeout(timeout)
    raw.connect((host, int(port)))
    ctx = realapi.tls()
    ctx.set_alpn_protocols(["http/1.1"])
    s = ctx.wrap_socket(raw, server_hostname=host)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\nAccept: {accept}\r\n{headers}\r\n".encode())
    return s


def open_watch(base, token, path, accept="application/json", rcvbuf=None, timeout=30):
    s = send_get(base, token, path, accept, rcvbuf, timeout)
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert head.split(b" ", 2)[1] == b"200", head
    return s
