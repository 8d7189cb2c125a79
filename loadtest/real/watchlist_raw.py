#!/usr/bin/env python3
"""How long a raw reader (HTTP/1.1 over TLS, reading as fast as it can) takes to get a consistent
WatchList of every pod up to its initial-events-end bookmark: the stream's own time, without
a client's decoding.

    python3 loadtest/real/watchlist_raw.py https://HOST:PORT TOKEN_FILE [rounds]
"""
import sys
import time

import rawwatch
import realapi

PATH = ("/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        "&allowWatchBookmarks=true&timeoutSeconds=60")


def one(base, token):
    """Seconds to the last chunk with an ADDED event, to the bookmark, and the bytes read."""
    t0 = time.time()
    s = rawwatch.open_watch(base, token, PATH)
    last_add = end = None
    total = 0
    tail = b""
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        total += len(d)
        seen = tail + d
        if b'{"type":"ADDED"' in seen:
            last_add = time.time()
        if b"initial-events-end" in seen:
            end = time.time()
            break
        tail = d[-64:]
    s.close()
    return (last_add or t0) - t0, (end or time.time()) - t0, total


def main():
    base, token = sys.argv[1], realapi.token_file(sys.argv[2])
    for _ in range(int(sys.argv[3]) if len(sys.argv) > 3 else 3):
        adds, end, total = one(base, token)
        print(f"last ADDED after {adds:.3f} s, initial-events-end after {end:.3f} s, {total} bytes")


if __name__ == "__main__":
    main()
